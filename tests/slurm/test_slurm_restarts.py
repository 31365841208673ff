"""A rank lost under SLURM: with SUITE_MAX_RESTARTS=1, slurm/run_slurm.sh starts the failed srun
step again in the same allocation, and the run goes on from its newest step checkpoint, on both
frameworks: rank 1 SIGKILLed after step 15 (`SUITE_KILL_AT`), checkpoints every 10 steps, the
final weights those of a job that never lost a rank, bit for bit."""

import subprocess
import sys

import numpy as np
import pytest

from common.report import lost_rank_table
from tests.faults.test_restarts import weights
from tests.records import read_metrics
from tests.slurm.jobs import ROOT_ONLY, slurm_env, submit, wait_for

# make test-scaling: 4 jobs on the test cluster (34 s on [B]); make test keeps the requeue test
pytestmark = [ROOT_ONLY, pytest.mark.scaling]

EVERY = 10
SETTINGS = [
    "configs/mlp_adam.yaml",
    *("--set", "data.train_limit=1280", "--set", "data.test_limit=500"),
    *("--set", "train.epochs=2", "--set", "model.dropout=false"),
    *("--set", "train.log_every_steps=1", "--set", f"train.checkpoint_every_steps={EVERY}"),
    *("--set", "output.save_model=true", "--set", "dist.timeout_s=30"),
]
MODULES = {"torch": "torch_impl.train", "tf": "tf_impl.train"}


@pytest.mark.parametrize("cluster", [1], indirect=True)
@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_a_lost_rank_restarts_the_step_from_its_checkpoint(cluster, framework, tmp_path):
    env = slurm_env(tmp_path)
    settings = [*SETTINGS, *(["--set", "torch.strategy=ddp"] if framework == "torch" else [])]
    out = f"--output={tmp_path}/%x-%j.out"
    whole = submit(["--ntasks=2", "--job-name=whole", out], [framework, *settings], env)
    lost = {**env, "SUITE_MAX_RESTARTS": "1", "SUITE_KILL_AT": "1:15"}
    job = submit(["--ntasks=2", "--job-name=lost", out], [framework, *settings], lost)
    assert wait_for(whole, env) == "COMPLETED", (tmp_path / f"whole-{whole}.out").read_text()
    log = (tmp_path / f"lost-{job}.out").read_text
    assert wait_for(job, env) == "COMPLETED", log()
    assert "starting it again (restart 1 of 1, SUITE_MAX_RESTARTS)" in log(), log()
    records = read_metrics(tmp_path / f"lost-{job}" / "metrics.jsonl")
    ends = [r for r in records if r["record"] == "run_end"]
    statuses = [e["status"] for e in ends]
    assert statuses[0] in ("failed", "aborted") and statuses[1:] == ["success"], ends
    (resumed,) = [r for r in records if r["record"] == "resume"]
    assert resumed["step"] == EVERY  # lost: steps 11 to 15
    ours = weights(tmp_path / f"lost-{job}", MODULES[framework])
    theirs = weights(tmp_path / f"whole-{whole}", MODULES[framework])
    assert ours.keys() == theirs.keys()
    for key in theirs:
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)


@pytest.mark.parametrize("cluster", [1], indirect=True)
def test_the_failure_cost_bench_measures_a_lost_rank_under_slurm(cluster, tmp_path):
    command = [sys.executable, "-m", "common.tools.failure_cost", "--launcher", "slurm"]
    command += ["--cases", "tf-mwms", "--out", str(tmp_path)]
    done = subprocess.run(
        command, env=slurm_env(tmp_path), capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = lost_rank_table.read(tmp_path / "failure_cost-slurm.json").rows
    assert (row["case"], row["launcher"], row["steps_lost"], row["resharded_to"]) == (
        "tf-mwms",
        "slurm",
        10,
        1,
    )
    assert 0 < row["notice_s"] < 30 and 0 < row["recover_s"] < 120  # dist.timeout_s=30
    assert all(row[key] > 0 for key in ("step_s", "save_s", "load_s", "resharded_load_s"))
