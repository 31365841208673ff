"""Gradient accumulation (train.accumulation_steps): k = 4 micro-batches of 8 on each of 2 ranks
against one batch of 32 (the global batch 64 either way), on ddp, fsdp2 and mwms, from the parity
preset (MLP, no dropout, SGD): the same update within the noise of another summation order, the
torch-TensorFlow parity kept, and the collectives counted per optimizer step as the strategy
registry prices them (DDP and MWMS one all-reduce of the whole gradient; FSDP2 its all-gathers
once per micro-batch, its reduce-scatters once)."""

import numpy as np
import pytest
import torch

from tests.launching import runner
from tests.records import read_metrics
from tests.tf.conftest import PARITY

K = 4
SETTINGS = ["data.train_limit=1280", "data.test_limit=200", "output.save_model=true"]
RUNS = {
    "torch-ddp": ("torch_impl.train", ["torch.strategy=ddp"]),
    "torch-ddp-k4": ("torch_impl.train", ["torch.strategy=ddp", f"train.accumulation_steps={K}"]),
    "torch-fsdp2-k4": (
        "torch_impl.train",
        ["torch.strategy=fsdp2", f"train.accumulation_steps={K}"],
    ),
    "tf-mwms": ("tf_impl.train", []),
    "tf-mwms-k4": ("tf_impl.train", [f"train.accumulation_steps={K}"]),
}
# The suite's bound for two summation orders of the same float32 maths (torch against
# TensorFlow, tests/tf/test_distributed.py); what these runs measured is printed.
LOSSES_RTOL = 1e-4
WEIGHTS = {"rtol": 1e-3, "atol": 1e-5}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("accumulation")
    return {
        name: runner(module, root, warm=True)(
            name, 2, *SETTINGS, *extra, extra=PARITY, small=False
        )[1]
        for name, (module, extra) in RUNS.items()
    }


def step_losses(folder):
    return np.array(
        [r["loss"] for r in read_metrics(folder / "metrics.jsonl") if r["record"] == "step"]
    )


def weights(folder):
    if (folder / "model.pt").exists():
        return {name: t.numpy() for name, t in torch.load(folder / "model.pt").items()}
    with np.load(folder / "model.npz") as saved:
        return {name: saved[name] for name in saved.files}


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        ("torch-ddp-k4", "torch-ddp"),
        ("torch-fsdp2-k4", "torch-ddp"),
        ("tf-mwms-k4", "tf-mwms"),
        ("tf-mwms-k4", "torch-ddp-k4"),
    ],
)
def test_four_micro_batches_follow_one_batch_of_four_times_the_size(runs, ours, theirs):
    mine, reference = step_losses(runs[ours]), step_losses(runs[theirs])
    assert len(mine) == len(reference) == 20
    relative = np.abs(mine - reference) / np.abs(reference)
    print(f"{ours} vs {theirs}: max relative loss difference {relative.max():.2e}")
    assert relative.max() < LOSSES_RTOL, int(np.argmax(relative >= LOSSES_RTOL))
    found, expected = weights(runs[ours]), weights(runs[theirs])
    assert found.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(found[name], expected[name], **WEIGHTS, err_msg=name)


@pytest.mark.parametrize("name", ["torch-ddp-k4", "torch-fsdp2-k4", "tf-mwms-k4"])
def test_the_collectives_per_optimizer_step_are_those_the_registry_prices(runs, name):
    records = read_metrics(runs[name] / "metrics.jsonl")
    epoch = next(r for r in records if r["record"] == "epoch")
    train = {
        e["kind"]: e for e in epoch["traffic"] if e["phase"] == "train" and e["expected_calls"]
    }
    for entry in train.values():
        assert entry["calls"] == pytest.approx(entry["expected_calls"], rel=0.01), entry
        assert entry["payload_bytes"] == pytest.approx(entry["expected_payload_bytes"], rel=0.01)
    if name == "torch-fsdp2-k4":  # 3 units gathered before forward and backward, K times
        assert train["all_gather"]["calls"] == 2 * 3 * K and train["reduce_scatter"]["calls"] == 3
    else:  # the whole MLP's gradient, once
        assert (train["all_reduce"]["calls"], train["all_reduce"]["payload_bytes"]) == (1, 437_544)
