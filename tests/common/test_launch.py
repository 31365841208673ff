"""The local launcher with real processes."""

import subprocess
import sys
import time

LAUNCH = [sys.executable, "-m", "common.launch"]


def test_every_rank_gets_a_consistent_cluster_spec():
    probe = (
        "from common import cluster; s = cluster.from_environment(); "
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


def test_a_peer_that_ignores_sigterm_is_killed_within_ten_seconds():
    script = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "if os.environ['RANK'] == '0':\n    time.sleep(0.5); os.kill(os.getpid(), 9)\n"
        "time.sleep(300)\n"
    )
    start = time.monotonic()
    out = subprocess.run(
        [*LAUNCH, "--nproc", "2", "--", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 128 + 9 and "rank 0 failed with exit code 137" in out.stderr
    assert time.monotonic() - start < 11


def test_bad_invocations_fail_with_a_message():
    out = subprocess.run([*LAUNCH, "--nproc", "2"], capture_output=True, text=True)
    assert out.returncode == 2 and "no command given" in out.stderr
    out = subprocess.run(
        [*LAUNCH, "--nproc", "2", "--", "/no/such/program"], capture_output=True, text=True
    )
    assert out.returncode == 127 and "cannot start '/no/such/program'" in out.stderr
