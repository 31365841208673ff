"""Elastic restarts: a rank SIGKILLed after step 15 (`SUITE_KILL_AT`), its peers stopped, and
every rank started again by the launcher (`python -m common.launch --max-restarts 1`, `torchrun
--max-restarts 1`; both frameworks under both): the run goes on from its step-10 checkpoint and
ends with run_end success and the weights, bit for bit, of a run that never failed, having lost
5 steps."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from common.launch.ports import free_ports
from tests.launching import runner
from tests.records import read_metrics
from tests.resizing import step_losses, tolerance

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
    # --grace 1: TensorFlow's survivor stays blocked in its collective until the launcher stops it
    "local": [
        *[sys.executable, "-m", "common.launch", "--nproc", "2", "--grace", "1"],
        *["--max-restarts", "1", "--"],
    ],
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
    logs = [f"--log-dir={root / 'torchelastic'}"] if launcher == "torchrun" else []  # not /tmp
    command = [*LAUNCHERS[launcher], *logs, *python, "-m", module, *settings, "--quiet", *extra]
    env = {**os.environ, "SUITE_KILL_AT": "1:15"}
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Each framework's run that never failed, made once."""
    made = {}

    def run(module):
        if module not in made:
            root = tmp_path_factory.mktemp("whole")
            strategy = ["torch.strategy=ddp"] if module.startswith("torch") else []
            made[module] = runner(module, root, warm=True)(
                "whole", 2, *SETTINGS, *strategy, small=False
            )[1]
        return made[module]

    return run


@pytest.mark.parametrize(
    ("launcher", "module"),
    [
        ("local", "torch_impl.train"),
        ("torchrun", "torch_impl.train"),
        ("local", "tf_impl.train"),
        ("torchrun", "tf_impl.train"),
    ],
)
def test_a_killed_rank_restarts_the_group_from_the_last_step_checkpoint(
    launcher, module, tmp_path, uninterrupted
):
    strategy = ["torch.strategy=ddp"] if module.startswith("torch") else []
    whole = uninterrupted(module)
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


def _tree(pid):
    """`pid` and every process below it, from /proc."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


@pytest.mark.scaling  # 37 s of torchrun's rendezvous waits on [B]: make test-scaling
def test_a_node_gone_for_good_goes_on_at_the_smaller_world(tmp_path, uninterrupted):
    """Two torchrun agents (two nodes of one rank) with --nnodes 1:2 and c10d rendezvous; the
    second node's agent and rank are SIGKILLed mid-epoch. The first agent's rank fails, the
    agent meets the rendezvous again with one node, and its rank goes on from the last step
    checkpoint at world size 1 (ddp 2 -> 1): run_end success, the loss following the
    uninterrupted 2-rank run's within tests/resizing.py's tolerance. The agent that serves the
    rendezvous store is the one that stays: torchrun's c10d store dies with its host."""
    settings = [*SETTINGS, "torch.strategy=ddp"]
    whole = uninterrupted("torch_impl.train")
    port = free_ports(1)[0]
    agent = [
        *[sys.executable, "-m", "torch.distributed.run", "--nnodes", "1:2", "--nproc-per-node"],
        *["1", "--max-restarts", "1", "--rdzv-backend", "c10d", "--rdzv-id", "gone"],
        *["--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-conf", "last_call_timeout=5"],
        f"--log-dir={tmp_path / 'torchelastic'}",
        *["-m", "torch_impl.train", "--quiet"],
        *[f"--set={s}" for s in [*settings, f"output.dir={tmp_path}", "output.run_name=gone"]],
    ]
    logs = [open(tmp_path / f"agent-{i}.log", "w") for i in range(2)]  # noqa: SIM115
    stays = subprocess.Popen(agent, stdout=logs[0], stderr=subprocess.STDOUT)
    time.sleep(1)  # it binds the endpoint first: it serves the rendezvous store
    goes = subprocess.Popen(agent, stdout=logs[1], stderr=subprocess.STDOUT)
    metrics = tmp_path / "gone" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.is_file() and metrics.read_text().count('"record": "step"') >= 15):
        assert time.monotonic() < deadline and stays.poll() is None, "training never started"
        time.sleep(0.02)
    for pid in _tree(goes.pid):  # the node is gone: its agent and its rank
        os.kill(pid, signal.SIGKILL)
    goes.wait()
    try:
        assert stays.wait(timeout=180) == 0, (tmp_path / "agent-0.log").read_text()[-3000:]
    finally:
        stays.kill()
    records = read_metrics(metrics)
    starts = [r for r in records if r["record"] == "run_start"]
    (resumed,) = [r for r in records if r["record"] == "resume"]
    assert [s["world_size"] for s in starts] == [2, 1] and records[-1]["status"] == "success"
    assert resumed["world_size_before"] == 2 and resumed["step"] % EVERY == 0
    losses, reference = step_losses(metrics.parent), step_losses(whole)
    apart = abs(losses - reference) / reference
    assert len(losses) == 40 and apart.max() <= tolerance()[0], apart.max()
