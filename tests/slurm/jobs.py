"""Submitting to the SLURM test cluster (slurm/testcluster.py) and following its jobs: the
helpers of the tests in this folder."""

import os
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLUSTER_DIR = Path("/tmp/suite-slurm-tests")
QUICK = [
    "--set",
    "data.train_limit=2048",
    "--set",
    "data.test_limit=1000",
    "--set",
    "train.epochs=2",
    "--set",
    "dist.timeout_s=60",
]

ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason="the test cluster needs root (CI runs as root)"
)


def slurm_env(results: Path) -> dict:
    return {
        **os.environ,
        "SLURM_CONF": str(CLUSTER_DIR / "slurm.conf"),
        "SUITE_RESULTS": str(results),
    }


def scontrol_field(job_id: str, field: str, env: dict) -> str:
    shown = subprocess.run(
        ["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True
    ).stdout
    for word in shown.split():
        if word.startswith(field + "="):
            return word.split("=", 1)[1]
    return ""


def wait_for(job_id: str, env: dict, timeout_s: float = 300) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = scontrol_field(job_id, "JobState", env)
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
            return state
        time.sleep(0.3)
    pytest.fail(f"job {job_id} did not end within {timeout_s} s")


def submit(options: list[str], args: list[str], env: dict) -> str:
    command = ["sbatch", "--parsable", *options, "slurm/run_slurm.sh", *args]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def layout(nodes: int) -> list[str]:
    """2 tasks: both on the one node, or one on each of two."""
    return ["--nodes=1", "--ntasks=2"] if nodes == 1 else ["--nodes=2", "--ntasks-per-node=1"]
