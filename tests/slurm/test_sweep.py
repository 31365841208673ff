"""slurm/sweep.py's commands, without a cluster (--dry-run): the matrix, the jobs one after
another, and the layout options."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def dry_run(*options, check=True):
    command = [sys.executable, "slurm/sweep.py", "--config", "configs/mlp_adam.yaml", "--dry-run"]
    return subprocess.run(
        [*command, *options], cwd=REPO, capture_output=True, text=True, check=check
    )


def test_the_matrix_runs_one_job_after_another_by_default():
    lines = dry_run("--repeats", "2").stdout.splitlines()
    assert len(lines) == (2 + 1) * 4 * 2  # (ddp, fsdp2, tf) x tasks 1,2,4,8 x repeats
    assert all(line.startswith("sbatch --parsable --job-name=") for line in lines)
    assert any("--ntasks=8" in line and "slurm/run_slurm.sh tf" in line for line in lines)
    assert "--dependency" not in lines[0]
    assert all("--dependency=afterany:<the job before>" in line for line in lines[1:])
    together = dry_run("--parallel").stdout.splitlines()
    assert not any("--dependency" in line for line in together)


def test_nodes_and_exclusive_set_each_jobs_layout():
    lines = dry_run("--tasks", "2,4", "--nodes", "2", "--exclusive").stdout.splitlines()
    assert all("--exclusive" in line and "--nodes=2" in line for line in lines)
    assert sum("--ntasks=4" in line and "--ntasks-per-node=2" in line for line in lines) == 3
    refused = dry_run("--tasks", "1,2", "--nodes", "2", check=False)
    assert refused.returncode == 2 and "--nodes 2 does not divide task counts [1]" in refused.stderr
