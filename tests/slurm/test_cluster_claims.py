"""The machine's one SLURM test cluster across runs: a stale cluster of a killed run is taken
down with everything it left (orphaned processes in its namespaces, their links), a live
owner's cluster is left alone, and a test session stopped by Ctrl-C or by a timeout leaves
nothing behind. These tests run before the session's own cluster is up (file order)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.slurm.conftest import BUSY_EXIT, BUSY_WAIT_S, REGISTRY, cluster_command, registry
from tests.slurm.jobs import CLUSTER_DIR, REPO, ROOT_ONLY

pytestmark = ROOT_ONLY


def _running(pid: str) -> bool:
    """Not ended: a process that ended and waits to be reaped (a zombie, whose parent, pid 1
    in a container, may reap late) holds nothing."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _processes() -> list[str]:
    """SLURM's processes still running ("pid command")."""
    daemons = subprocess.run(["pgrep", "-a", "slurm"], capture_output=True, text=True).stdout
    return [line for line in daemons.splitlines() if _running(line.split()[0])]


def nothing_left() -> list[str]:
    """What of a test cluster is still on the machine."""
    found = []
    if REGISTRY.exists():
        found.append(f"registry {registry()}")
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"namespace {n}" for n in namespaces.split() if n.startswith("suite-n")]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found += [
        f"link {line.split(':')[1].strip()}" for line in links.splitlines() if "suite-" in line
    ]
    found += [f"process {line}" for line in _processes()]
    if "suite-testcluster" in Path("/etc/hosts").read_text():
        found.append("/etc/hosts lines")
    return found


@pytest.fixture
def free_machine():
    """No cluster up: another live run's is waited for, then the test is skipped."""
    record = registry()
    if record.get("owner") == os.getpid():
        pytest.fail("this session's own cluster is up: these tests must run before it")
    deadline = time.monotonic() + BUSY_WAIT_S
    while True:
        done = cluster_command("down")
        if done.returncode != BUSY_EXIT:
            break
        if time.monotonic() > deadline:
            pytest.skip(f"another run's SLURM test cluster stayed up: {done.stderr}")
        time.sleep(10)
    assert done.returncode == 0, done.stderr
    yield
    cluster_command("down")


def test_a_stale_cluster_is_taken_down_with_its_orphans(free_machine):
    owner = subprocess.Popen(["sleep", "600"])
    up = cluster_command("up", "--nodes", "2", "--owner", str(owner.pid))
    assert up.returncode == 0, up.stderr
    # a process left in a node's namespace (as an orphaned slurmstepd is), whose namespace then
    # lost its name: it keeps the namespace and the host end of its link alive
    subprocess.run(["ip", "netns", "exec", "suite-n1", "setsid", "-f", "sleep", "600"], check=True)
    # the orphan and the node's daemon, followed by pid: another process of the machine may
    # run the same command line
    held = subprocess.run(["ip", "netns", "pids", "suite-n1"], capture_output=True, text=True)
    in_node = held.stdout.split()
    assert len(in_node) >= 2, held
    subprocess.run(["ip", "netns", "del", "suite-n1"], check=True)
    owner.kill()
    owner.wait()
    up = cluster_command("up", "--nodes", "2", "--owner", str(os.getpid()))
    assert up.returncode == 0, up.stderr
    assert (
        f"taking down a stale test cluster whose owner is gone (owner pid {owner.pid}" in up.stderr
    )
    survivors = [pid for pid in in_node if _running(pid)]
    assert survivors == [], "processes of the node's namespace survived"
    assert cluster_command("down").returncode == 0
    assert nothing_left() == []


def test_a_live_owners_cluster_is_left_alone(free_machine, tmp_path):
    owner = subprocess.Popen(["sleep", "600"])
    try:
        assert cluster_command("up", "--owner", str(owner.pid)).returncode == 0
        second = cluster_command("up", "--owner", str(os.getpid()))
        assert second.returncode == BUSY_EXIT
        assert f"in use (owner pid {owner.pid} (sleep 600)" in second.stderr
        other = subprocess.run(
            [sys.executable, "slurm/testcluster.py", "down", "--dir", str(tmp_path)],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        assert other.returncode == BUSY_EXIT and "is not this --dir's" in other.stderr
        assert registry().get("owner") == owner.pid  # untouched
    finally:
        owner.kill()
        owner.wait()
    assert cluster_command("down").returncode == 0
    assert nothing_left() == []


STOPS = {  # how a session is stopped: its signal, who gets it, and SIGINT as it was started with
    # a terminal's Ctrl-C reaches every process of its foreground job
    "ctrl-c": (signal.SIGINT, "group", signal.SIG_DFL),
    # timeout(1) or a CI runner signals the process it started, a background job: a shell starts
    # those with SIGINT ignored, which Python keeps (so Ctrl-C alone once let a session run on)
    "timeout": (signal.SIGTERM, "process", signal.SIG_IGN),
}


# four nested test sessions, each with a SLURM job (56 s of make test on [B]): make test-scaling
@pytest.mark.scaling
@pytest.mark.parametrize("workers", [[], ["-n", "2", "--lanes"]], ids=["serial", "lanes"])
@pytest.mark.parametrize("stop", list(STOPS))
def test_a_session_stopped_mid_job_leaves_nothing_behind(free_machine, stop, workers, tmp_path):
    """Serial, and as make test runs: on two xdist workers the cluster is the first worker's,
    and the controller, which stops its workers within seconds of its own stop (killed if they
    do not end), takes down what the worker had no time to."""
    signum, whom, sigint = STOPS[stop]
    session = subprocess.Popen(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers),
            *("tests/slurm/test_slurm_operations.py", "-k", "preflight_runs_as_a_job"),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
        start_new_session=True,  # its own process group, as a job has
    )
    deadline = time.monotonic() + 180
    while not any("slurmstepd" in line for line in _processes()):  # the job runs
        assert session.poll() is None and time.monotonic() < deadline, session.communicate()[0]
        time.sleep(0.2)
    time.sleep(2)  # the job's ranks are at work: the preflight's job runs for about a minute
    if whom == "group":
        os.killpg(session.pid, signum)
    else:
        session.send_signal(signum)
    output, _ = session.communicate(timeout=180)
    assert session.returncode != 0, output
    assert nothing_left() == [], output
    assert not (CLUSTER_DIR / "started.json").exists()
