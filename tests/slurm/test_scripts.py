"""The slurm/ scripts where no cluster is needed: sweep.py's commands (--dry-run: the matrix,
the jobs one after another, the layout options) and run_slurm.sh's refusals."""

import os
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


def test_sizes_multiply_the_matrix_and_set_each_model():
    lines = dry_run(
        "--sizes", "10M,w2", "--tasks", "2", "--set", "data.name=synthetic"
    ).stdout.splitlines()
    assert len(lines) == 3 * 2  # (ddp, fsdp2, tf) x two sizes
    mlp = [line for line in lines if "-10M-r1" in line]
    assert len(mlp) == 3
    assert all("--set model.name=mlp --set 'model.hidden=[2816, 2816]'" in line for line in mlp)
    assert sum("--set model.name=cnn --set model.width=2" in line for line in lines) == 3
    assert all(line.endswith("--set data.name=synthetic") for line in lines)
    refused = dry_run("--sizes", "10Q", check=False)
    assert refused.returncode == 2 and "size '10Q': give a preset" in refused.stderr


def test_nodes_and_exclusive_set_each_jobs_layout():
    lines = dry_run("--tasks", "2,4", "--nodes", "2", "--exclusive").stdout.splitlines()
    assert all("--exclusive" in line and "--nodes=2" in line for line in lines)
    assert sum("--ntasks=4" in line and "--ntasks-per-node=2" in line for line in lines) == 3
    refused = dry_run("--tasks", "1,2", "--nodes", "2", check=False)
    assert refused.returncode == 2 and "--nodes 2 does not divide task counts [1]" in refused.stderr


def test_a_job_submitted_from_outside_the_suite_names_the_variable_that_fixes_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SUITE_"))}
    env.update(SLURM_JOB_ID="41", SLURM_SUBMIT_DIR=str(tmp_path))  # what sbatch would set
    done = subprocess.run(
        ["bash", str(REPO / "slurm" / "run_slurm.sh"), "torch", "configs/mlp_adam.yaml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert f"{tmp_path} is not the suite's folder" in done.stderr
    assert "SUITE_ROOT=/path/to/the/suite" in done.stderr


def test_a_restart_count_that_is_not_a_number_is_refused_before_any_step(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SUITE_"))}
    env.update(SLURM_JOB_ID="42", SLURM_JOB_NAME="t", SUITE_MAX_RESTARTS="two")
    env.update(SUITE_RESULTS=str(tmp_path))
    done = subprocess.run(
        ["bash", "slurm/run_slurm.sh", "torch", "configs/mlp_adam.yaml"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "SUITE_MAX_RESTARTS must be a whole number of restarts (0, 1, ...), got 'two'" in (
        done.stderr
    )
    assert "srun" not in done.stdout + done.stderr
