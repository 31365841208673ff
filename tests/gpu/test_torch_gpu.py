"""torch on the GPUs it sees: every strategy at world size = the visible GPUs, at every
precision, eager and compiled; fp16's skipped step; the refusal of more ranks than GPUs; and
dist.deterministic's promise, bitwise repeats and resumes, with --assert-close between
strategies. Never run on more than one GPU yet (README, "GPU tier")."""

import subprocess
import sys

import pytest
import torch

from common.core.measure.precision import FORCE_OVERFLOW_VARIABLE, LOSS_SCALE_INIT
from tests.gpu.checks import assert_a_filled_gpu_run, records
from tests.launching import runner

SHORT = ["data.train_limit=6400", "data.test_limit=1000", "train.epochs=2", "dist.device=gpu"]
PRECISIONS = {
    "none": ["torch.mixed_precision=none"],
    "tf32": ["torch.mixed_precision=none", "dist.tf32=true"],
    "bf16": ["torch.mixed_precision=bf16"],
    "fp16": ["torch.mixed_precision=fp16"],
}

STRICT = [
    "dist.deterministic=true",
    "output.save_model=true",
    "train.checkpoint_every_epochs=1",
]


def launched(run, name, gpus, strategy, *settings, **kwargs):
    nproc = 0 if strategy == "single" else gpus  # single is one plain process
    return run(name, nproc, *SHORT, f"torch.strategy={strategy}", *settings, **kwargs)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("precision", list(PRECISIONS))
@pytest.mark.parametrize("strategy", ["single", "ddp", "fsdp2", "fsdp1"])
def test_every_strategy_precision_and_compilation_runs(
    torch_gpus, tmp_path, strategy, precision, compiled
):
    if strategy == "single" and torch_gpus > 1:
        pytest.skip("single runs on one GPU; this machine's world size is its GPU count")
    run = runner("torch_impl.train", tmp_path)
    settings = [*PRECISIONS[precision], f"torch.compile={str(compiled).lower()}"]
    _, run_dir = launched(run, "r", torch_gpus, strategy, *settings)
    assert_a_filled_gpu_run(run_dir)
    found = records(run_dir)
    start, epochs = found[0], [r for r in found if r["record"] == "epoch"]
    assert all("CUDA events" in epoch["train_clock"] for epoch in epochs)
    assert start["numerics"]["tf32_effective"] is (precision == "tf32")


def test_an_fp16_overflow_is_skipped_and_halves_the_scale(torch_gpus, tmp_path):
    run = runner("torch_impl.train", tmp_path)
    _, run_dir = launched(
        run,
        "o",
        torch_gpus,
        "ddp",
        *PRECISIONS["fp16"],
        "train.log_every_steps=1",
        env={FORCE_OVERFLOW_VARIABLE: "0:3"},
    )
    first = [r for r in records(run_dir) if r["record"] == "epoch"][0]
    assert first["skipped_steps"] == [1] * torch_gpus
    assert first["loss_scale"] == [LOSS_SCALE_INIT / 2] * torch_gpus


def test_more_ranks_than_gpus_are_refused(torch_gpus, tmp_path):
    run = runner("torch_impl.train", tmp_path)
    done, run_dir = run("many", torch_gpus + 1, *SHORT, "torch.strategy=ddp", check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "GPU" in done.stdout + done.stderr and not (run_dir / "metrics.jsonl").exists()


def weights(run_dir):
    return torch.load(run_dir / "model.pt")


def test_deterministic_runs_repeat_and_resume_bitwise(torch_gpus, tmp_path):
    run = runner("torch_impl.train", tmp_path)
    strict = STRICT
    folders = [launched(run, f"repeat{i}", torch_gpus, "single", *strict)[1] for i in (1, 2)]
    first, second = (weights(folder) for folder in folders)
    assert all(torch.equal(first[name], second[name]) for name in first)
    _, whole = launched(run, "whole", torch_gpus, "fsdp2", *strict)
    launched(run, "parts", torch_gpus, "fsdp2", *strict, extra=["--stop-after-epoch", "1"])
    _, parts = launched(run, "parts", torch_gpus, "fsdp2", *strict, extra=["--resume"])
    a, b = weights(whole), weights(parts)
    assert all(torch.equal(a[name], b[name]) for name in a)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_strategies_follow_single_in_deterministic_mode(torch_gpus, tmp_path, strategy):
    run = runner("torch_impl.train", tmp_path)
    strict = ["dist.deterministic=true", "train.log_every_steps=1", "model.dropout=false"]
    _, single = launched(run, "single", torch_gpus, "single", *strict)
    _, other = launched(run, strategy, torch_gpus, strategy, *strict)
    close = [sys.executable, "compare.py", "--assert-close", str(single), str(other)]
    done = subprocess.run([*close, "--rtol", "1e-4"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
