"""Elastic restarts: a rank SIGKILLed after step 15 (`SUITE_KILL_AT`), its peers stopped, and
every rank started again by the launcher (`python -m common.launch --max-restarts 1`, `torchrun
--max-restarts 1`): the run goes on from its step-10 checkpoint and ends with run_end success
and the weights, bit for bit, of a run that never failed, having lost 5 steps."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.launching import runner
from tests.records import read_metrics

EVERY = 10
SETTINGS = [
    "data.train_limit=1280",
    "data.test_limit=500",
    "train.epochs=2",
    "model.name=mlp",
    "model.dropout=false",
    "optim.name=adam",
    "train.log_every_steps=1",
    f"train.checkpoint_every_steps={EVERY}",
    "output.save_model=true",
    "dist.timeout_s=30",
    "dist.startup_timeout_s=60",
]
LAUNCHERS = {
    "local": [sys.executable, "-m", "common.launch", "--nproc", "2", "--max-restarts", "1", "--"],
    "torchrun": [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "1",
    ],
}
EXPORTED = {"torch_impl.train": "model.pt", "tf_impl.train": "model.npz"}


def weights(folder, module):
    path = folder / EXPORTED[module]
    if module.startswith("torch"):
        return {name: tensor.numpy() for name, tensor in torch.load(path).items()}
    with np.load(path) as saved:
        return {key: saved[key] for key in saved.files}


def killed_run(launcher, module, root, name, *extra):
    """The run under `launcher` with rank 1 killed after step 15 of the first attempt."""
    settings = [f"--set={s}" for s in [*SETTINGS, f"output.dir={root}", f"output.run_name={name}"]]
    python = [] if launcher == "torchrun" else [sys.executable]  # torchrun runs -m itself
    command = [*LAUNCHERS[launcher], *python, "-m", module, *settings, "--quiet", *extra]
    env = {**os.environ, "SUITE_KILL_AT": "1:15"}
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.parametrize(
    ("launcher", "module"),
    [("local", "torch_impl.train"), ("torchrun", "torch_impl.train"), ("local", "tf_impl.train")],
)
def test_a_killed_rank_restarts_the_group_from_the_last_step_checkpoint(launcher, module, tmp_path):
    strategy = ["torch.strategy=ddp"] if module.startswith("torch") else []
    _, whole = runner(module, tmp_path, warm=True)("whole", 2, *SETTINGS, *strategy, small=False)
    extra = [f"--set={s}" for s in strategy]
    done = killed_run(launcher, module, tmp_path, "killed", *extra)
    assert done.returncode == 0, done.stdout + done.stderr
    records = read_metrics(tmp_path / "killed" / "metrics.jsonl")
    ends = [r for r in records if r["record"] == "run_end"]
    assert [e["status"] for e in ends][-1] == "success" and len(ends) == 2, ends
    assert "rank 1" in ends[0]["error"] or "SIGTERM" in ends[0]["error"], ends[0]
    (resumed,) = [r for r in records if r["record"] == "resume"]
    assert resumed["step"] == EVERY  # lost: steps 11 to 15, fewer than the cadence
    ours, theirs = weights(tmp_path / "killed", module), weights(whole, module)
    assert ours.keys() == theirs.keys()
    for key in theirs:
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)


def test_restarts_without_a_checkpoint_cadence_are_refused_before_any_work(tmp_path):
    settings = [s for s in SETTINGS if not s.startswith("train.checkpoint_every")]
    command = [*LAUNCHERS["local"], sys.executable, "-m", "torch_impl.train"]
    command += [f"--set={s}" for s in [*settings, f"output.dir={tmp_path}", "output.run_name=r"]]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no checkpoint cadence: a restart would start the run over" in done.stdout
    assert "restart 1 of 1" not in done.stderr  # a refusal is not restarted
    assert not (tmp_path / "r").exists()
