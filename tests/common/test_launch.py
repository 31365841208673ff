"""The local launcher with real processes."""

import os
import subprocess
import sys
import time
from pathlib import Path

LAUNCH = [sys.executable, "-m", "common.launch"]


def test_every_rank_gets_a_consistent_cluster_spec():
    probe = (
        "from common.launch import environment; s = environment.from_environment(); "
        "print(s.launcher, s.rank, s.world_size, s.tf_config()['task']['index'], "
        "len(set(s.tf_ports)), s.launch_id.startswith('local-'))"
    )
    out = subprocess.run(
        [*LAUNCH, "--nproc", "3", "--", sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    lines = sorted(out.stdout.splitlines())
    assert lines == [f"[rank {r}] local {r} 3 {r} 3 True" for r in range(3)]


def test_a_failing_rank_stops_its_peers_and_sets_the_exit_code():
    script = (
        "import os, sys, time\n"
        "rank = int(os.environ['RANK'])\n"
        "if rank == 1:\n    time.sleep(1); sys.exit(7)\n"
        "time.sleep(300)\n"
    )
    start = time.monotonic()
    out = subprocess.run(
        [*LAUNCH, "--nproc", "3", "--", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.monotonic() - start
    assert out.returncode == 7
    assert "rank 1 failed with exit code 7" in out.stderr
    assert elapsed < 11, f"peers were stopped only after {elapsed:.1f} s"


def _gone(pid: int) -> bool:
    """The process has ended: no /proc entry, or a zombie its parent has not reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_peer_that_ignores_sigterm_is_killed_within_ten_seconds(tmp_path):
    """Timed from rank 0's death to rank 1's, both on the machine's monotonic clock: the
    launcher's own exit comes later, after it writes the run_end (an interpreter's start-up,
    0.8 s idle and 2 s on a loaded 2-core host), which a wall-clock bound must not count."""
    died = tmp_path / "died"
    script = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('pid', os.getpid(), flush=True)\n"
        "if os.environ['RANK'] == '0':\n"
        f"    time.sleep(0.5); open({str(died)!r}, 'w').write(repr(time.monotonic()))\n"
        "    os.kill(os.getpid(), 9)\n"
        "time.sleep(300)\n"
    )
    launch = subprocess.Popen(
        [*LAUNCH, "--nproc", "2", "--", sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        peer = None
        while peer is None:
            line = launch.stdout.readline()
            assert line, "the launcher's output ended before rank 1 said its pid"
            if line.startswith("[rank 1] pid "):
                peer = int(line.split()[-1])
        while not _gone(peer):
            time.sleep(0.01)
        killed = time.monotonic()
        stdout, stderr = launch.communicate(timeout=60)
    finally:
        launch.kill()
    grace = 5  # the launcher's default: grace to fail alone, then grace after SIGTERM
    assert launch.returncode == 128 + 9 and "rank 0 was killed by SIGKILL" in stderr
    assert killed - float(died.read_text()) < 2 * grace + 1


def test_bad_invocations_fail_with_a_message():
    out = subprocess.run([*LAUNCH, "--nproc", "2"], capture_output=True, text=True)
    assert out.returncode == 2 and "no command given" in out.stderr
    out = subprocess.run(
        [*LAUNCH, "--nproc", "2", "--", "/no/such/program"], capture_output=True, text=True
    )
    assert out.returncode == 127 and "cannot start '/no/such/program'" in out.stderr


REPORTER = (
    "import os, signal, sys, time\n"
    "def stopped(signum, frame):\n"
    "    reason = open(os.environ['SUITE_STOP_REASON']).read()\n"
    "    print('SIGTERM because', reason, flush=True); sys.exit(5)\n"
    "signal.signal(signal.SIGTERM, stopped)\n"
    "if os.environ['RANK'] == '1':\n    sys.exit(3)\n"
)


def test_the_others_may_fail_on_their_own_before_sigterm():
    script = REPORTER + "time.sleep(0.5); print('failed on my own', flush=True); sys.exit(4)\n"
    out = subprocess.run(
        [*LAUNCH, "--nproc", "2", "--grace", "3", "--", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 3 and "rank 1 failed with exit code 3" in out.stderr
    assert "[rank 0] failed on my own" in out.stdout and "SIGTERM" not in out.stdout


def test_a_rank_stopped_after_the_grace_hears_why():
    start = time.monotonic()
    out = subprocess.run(
        [
            *LAUNCH,
            "--nproc",
            "2",
            "--grace",
            "1",
            "--",
            sys.executable,
            "-c",
            REPORTER + "time.sleep(300)\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 3
    assert "[rank 0] SIGTERM because rank 1 failed with exit code 3 (pid " in out.stdout
    assert 1 <= time.monotonic() - start < 5


def test_a_rank_killed_by_a_signal_is_blamed_before_a_peer_that_exited():
    from common.launch.watch import _first_failure

    exits = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(1)"])
    killed = subprocess.Popen([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"])
    for process in (exits, killed):
        process.wait(timeout=30)
    assert _first_failure([exits, killed]) == (1, -9)  # rank 1, although rank 0 failed too
    assert _first_failure([exits]) == (0, 1)


def test_the_ranks_die_with_their_launcher_however_it_is_killed():
    """SIGKILL to the launcher (a timeout's last word) while its ranks are busy, before any
    collective: nobody is left to stop them but the kernel."""
    script = "import os, time\nprint('pid', os.getpid(), flush=True)\ntime.sleep(300)\n"
    launcher = subprocess.Popen(
        [*LAUNCH, "--nproc", "2", "--", sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
    )
    pids = [int(launcher.stdout.readline().split()[-1]) for _ in range(2)]
    launcher.kill()
    launcher.wait(timeout=30)
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{pid}") and not zombie(pid) for pid in pids):
        assert time.monotonic() < deadline, f"ranks {pids} outlived their launcher"
        time.sleep(0.05)


def zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
