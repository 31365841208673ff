"""The SLURM test cluster, brought up once per node count for the whole session: one node,
then two (network namespaces with their own hostnames, addresses and cores).

The cluster is the machine's one (slurm/testcluster.py): this session owns it while its tests
run. Another live session's cluster is waited for (BUSY_WAIT_S), then its tests are skipped
with that reason; a stale one, whose owner was killed, is taken down by `up`. SIGTERM (a
timeout) ends the session as Ctrl-C does, so the cluster is taken down either way."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.slurm.jobs import CLUSTER_DIR, REPO

sys.path.insert(0, str(REPO / "slurm"))
import testcluster_claim  # noqa: E402 - the cluster's own module, beside its script

BUSY_EXIT = 3  # slurm/testcluster.py: another live owner's cluster is up
BUSY_WAIT_S = 300
REGISTRY = Path("/run/suite-testcluster.json")  # slurm/testcluster_claim.py


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def cluster_command(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "slurm/testcluster.py", *args, "--dir", str(CLUSTER_DIR)]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)


def registry() -> dict:
    """The machine's test cluster record (slurm/testcluster_claim.py): its owner and folder."""
    try:
        return json.loads(REGISTRY.read_text())
    except (OSError, ValueError):
        return {}


def take_down_orphaned() -> None:
    """Take down the cluster of CLUSTER_DIR if its owner is gone (a make test worker killed
    before its teardown ended); another live run's cluster is left alone."""
    record = registry()
    if not record and not (CLUSTER_DIR / "started.json").exists():
        return
    if not (record and testcluster_claim.owner_alive(record)):
        cluster_command("down")


def _bring_up(nodes: int) -> None:
    """This session's cluster of `nodes` nodes, once another live run's is gone (bounded)."""
    deadline = time.monotonic() + BUSY_WAIT_S
    while True:
        up = cluster_command("up", "--nodes", str(nodes), "--owner", str(os.getpid()))
        if up.returncode != BUSY_EXIT:
            assert up.returncode == 0, up.stderr
            return
        if time.monotonic() > deadline:
            pytest.skip(f"waited {BUSY_WAIT_S} s for another run's SLURM test cluster: {up.stderr}")
        time.sleep(10)


@pytest.fixture(scope="session", params=[1, 2], ids=["1-node", "2-node"])
def cluster(request):
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        _bring_up(request.param)
    except BaseException:  # skipped, or stopped while `up` ran: what it built is taken down
        if registry().get("owner") == os.getpid():
            cluster_command("down")
        signal.signal(signal.SIGTERM, previous)
        raise
    try:
        yield request.param
    finally:
        down = cluster_command("down")
        signal.signal(signal.SIGTERM, previous)
        assert down.returncode == 0, down.stderr


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """tests/slurm/test_cluster_claims.py needs the machine without this session's cluster: its
    tests go first among the SLURM tests, whatever order pytest gave them when it grouped the
    tests by cluster size (a module sorting before it, with a cluster parameter of its own,
    once put them after the 2-node cluster was up)."""
    claims = [item for item in items if item.path.name == "test_cluster_claims.py"]
    if not claims:
        return
    rest = [item for item in items if item.path.name != "test_cluster_claims.py"]
    first = next(
        (index for index, item in enumerate(rest) if item.path.parent.name == "slurm"), len(rest)
    )
    items[:] = rest[:first] + claims + rest[first:]
