"""The SLURM test cluster, brought up once per node count for the whole session: one node,
then two (network namespaces with their own hostnames, addresses and cores)."""

import subprocess
import sys

import pytest

from tests.slurm.jobs import CLUSTER_DIR, REPO


@pytest.fixture(scope="session", params=[1, 2], ids=["1-node", "2-node"])
def cluster(request):
    up = subprocess.run(
        [
            sys.executable,
            "slurm/testcluster.py",
            "up",
            "--nodes",
            str(request.param),
            "--dir",
            str(CLUSTER_DIR),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert up.returncode == 0, up.stderr
    yield request.param
    subprocess.run(
        [sys.executable, "slurm/testcluster.py", "down", "--dir", str(CLUSTER_DIR)],
        cwd=REPO,
        check=True,
        timeout=120,
    )
