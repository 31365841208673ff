"""The local launcher with real processes."""

import os
import re
import subprocess
import sys
import time

LAUNCH = [sys.executable, "-m", "common.launch"]


def test_every_rank_gets_a_consistent_cluster_spec():
    probe = (  # the ports outside the ephemeral range, where no outgoing connection takes them
        "from common.launch import environment, ports; s = environment.from_environment(); "
        "low, high = ports.ephemeral_range(); "
        "print(s.launcher, s.rank, s.world_size, s.tf_config()['task']['index'], "
        "len(set(s.tf_ports)), s.launch_id.startswith('local-'), "
        "not any(low <= port <= high for port in (s.master_port, *s.tf_ports)))"
    )
    out = subprocess.run(
        [*LAUNCH, "--nproc", "3", "--", sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    lines = sorted(out.stdout.splitlines())
    assert lines == [f"[rank {r}] local {r} 3 {r} 3 True True" for r in range(3)]


def launch_timed(nproc: int, options: list[str], script: str) -> tuple[int, str, str, dict]:
    """Run `script` as `nproc` ranks under the launcher; return its exit code, output, errors
    and when each rank ended, on the machine's monotonic clock (the ranks watched in /proc).

    The bounds below are on the ranks' ends, not the launcher's: its exit comes after it
    writes the run_end in a fresh interpreter, 0.8 s later idle and 2 s on a loaded 2-core host,
    and a wall-clock bound on the launch once failed CI by that (12.02 s against 12)."""
    launch = subprocess.Popen(
        [*LAUNCH, "--nproc", str(nproc), *options, "--", sys.executable, "-c", PID + script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pids: dict[int, int] = {}
        lines: list[str] = []
        while len(pids) < nproc:
            line = launch.stdout.readline()
            lines.append(line)
            assert line, f"the launcher's output ended before every rank said its pid: {pids}"
            said = re.fullmatch(r"\[rank (\d+)\] pid (\d+)\n", line)
            if said:
                pids[int(said[1])] = int(said[2])
        ended: dict[int, float] = {}
        deadline = time.monotonic() + 60
        while len(ended) < nproc and time.monotonic() < deadline:
            now = time.monotonic()
            ended.update(
                {rank: now for rank, pid in pids.items() if rank not in ended and zombie(pid)}
            )
            time.sleep(0.01)
        assert len(ended) == nproc, f"ranks still running a minute on: {set(pids) - set(ended)}"
        stdout, stderr = launch.communicate(timeout=60)
    finally:
        launch.kill()
    return launch.returncode, "".join(lines) + stdout, stderr, ended


PID = "import os\nprint('pid', os.getpid(), flush=True)\n"
GRACE_S = 5  # the launcher's default: to fail alone, then again between SIGTERM and SIGKILL


def test_a_failing_rank_stops_its_peers_and_sets_the_exit_code():
    script = (
        "import os, sys, time\n"
        "rank = int(os.environ['RANK'])\n"
        "if rank == 1:\n    time.sleep(1); sys.exit(7)\n"
        "time.sleep(300)\n"
    )
    code, _, stderr, ended = launch_timed(3, [], script)
    assert code == 7
    assert "rank 1 failed with exit code 7" in stderr
    after = max(ended[0], ended[2]) - ended[1]  # the grace to fail alone, then SIGTERM
    assert GRACE_S - 0.5 < after < GRACE_S + 1, f"peers were stopped {after:.1f} s after it"


def test_a_peer_that_ignores_sigterm_is_killed_within_ten_seconds():
    script = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "if os.environ['RANK'] == '0':\n    time.sleep(0.5); os.kill(os.getpid(), 9)\n"
        "time.sleep(300)\n"
    )
    code, _, stderr, ended = launch_timed(2, [], script)
    assert code == 128 + 9 and "rank 0 was killed by SIGKILL" in stderr
    after = ended[1] - ended[0]
    assert 2 * GRACE_S - 0.5 < after < 2 * GRACE_S + 1, f"killed {after:.1f} s after it"


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
    code, stdout, _, ended = launch_timed(2, ["--grace", "1"], REPORTER + "time.sleep(300)\n")
    assert code == 3
    assert "[rank 0] SIGTERM because rank 1 failed with exit code 3 (pid " in stdout
    assert 0.5 < ended[0] - ended[1] < 1 + 1  # after the grace given, with a margin for polls


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
