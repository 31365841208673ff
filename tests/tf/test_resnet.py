"""ResNet-8, a model with residual blocks and batch normalization, on both frameworks and at 1
and 2 ranks: the same curve (MNIST and synthetic data), the golden curve, the same weights and
running statistics, and a bitwise stop + resume."""

from pathlib import Path

import numpy as np
import pytest
import torch

import compare
from tests.launching import runner
from tests.records import read_metrics
from tests.rounding import float32_drifts

PRESET = ["--config", "configs/resnet8_sgd.yaml"]
STEPS = 50
SETTINGS = [f"data.train_limit={64 * STEPS}", "data.test_limit=500", "output.save_model=true"]
RUNS = {
    "torch-single": ("torch_impl.train", 0, ["torch.strategy=single"]),
    "torch-ddp": ("torch_impl.train", 2, ["torch.strategy=ddp"]),
    "tf-w1": ("tf_impl.train", 0, []),
    "tf-w2": ("tf_impl.train", 2, []),
}
GOLDEN = Path(__file__).parents[1] / "golden" / "resnet8_sgd_3200.jsonl"


@pytest.fixture(scope="module", params=["mnist", "synthetic"])
def resnet_runs(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"resnet-{request.param}")
    dataset = [f"data.name={request.param}"]
    folders = {}
    # every framework and world size on MNIST; on synthetic data one run of each framework
    names = RUNS if request.param == "mnist" else ["torch-single", "tf-w1"]
    for name in names:
        module, nproc, extra = RUNS[name]
        _, folders[name] = runner(module, root, warm=True)(
            name, nproc, *SETTINGS, *dataset, *extra, extra=[*PRESET, "--quiet"], small=False
        )
    return request.param, folders


@pytest.fixture(scope="module")
def drifts():
    """float32's own drift from float64 on these steps (tests/rounding.py): the losses' (max
    relative) and the weights' and running statistics' (max absolute)."""
    losses, weights = float32_drifts(
        ["model.name=resnet8", "optim.name=sgd", "optim.lr=0.01", *SETTINGS[:1]], STEPS
    )
    print(f"float32 drift from float64 over {STEPS} steps: {losses.max():.2e}, {weights:.2e}")
    return float(losses.max()), weights


@pytest.fixture(scope="module")
def tolerance(drifts):
    """4 x float32's own drift of the losses: measured 1.2e-4 on MNIST, so the bound is about
    5e-4; the implementations measured 1.3e-4 apart."""
    return max(4 * drifts[0], 1e-6)


def step_losses(folder):
    records = read_metrics(folder / "metrics.jsonl")
    return np.array([record["loss"] for record in records if record["record"] == "step"])


def test_every_framework_and_world_size_follows_torch_single(resnet_runs, tolerance):
    dataset, folders = resnet_runs
    reference = step_losses(folders["torch-single"])
    assert len(reference) == STEPS
    for name in [name for name in folders if name != "torch-single"]:
        relative = np.abs(step_losses(folders[name]) - reference) / np.abs(reference)
        print(f"{dataset} {name}: max relative loss difference {relative.max():.2e}")
        assert relative.max() < tolerance, (name, int(np.argmax(relative > tolerance)))


@pytest.mark.parametrize("resnet_runs", ["mnist"], indirect=True)
def test_the_mnist_runs_follow_the_golden_curve(resnet_runs, tolerance, capsys):
    _, folders = resnet_runs
    for folder in folders.values():
        rtol = f"{tolerance:.3g}"
        args = ["--assert-close", str(folder), str(GOLDEN), "--rtol", rtol, "--steps", "50"]
        assert compare.main(args) == 0, capsys.readouterr().err


@pytest.mark.parametrize("resnet_runs", ["mnist"], indirect=True)
def test_weights_and_running_statistics_agree_and_the_records_say_how(
    resnet_runs, tolerance, drifts
):
    """The evaluation (which uses the running statistics) agrees to 10x the tolerance; the
    exported tensors to 1% of their largest value, or 4 x float32's own drift of the weights
    where that is larger: their last bits feed back through the batch statistics (torch single
    and DDP measured 3.3e-3 apart in a running variance, TensorFlow 3.4e-3, while their
    evaluation losses agreed to 1.5e-4; a running variance 2.1e-3 apart against 1.98e-3 allowed
    on an Intel Xeon with AVX-512, whose float32 drift is larger)."""
    dataset, folders = resnet_runs
    saved = torch.load(folders["torch-single"] / "model.pt")
    ours = {name: tensor.numpy() for name, tensor in saved.items()}
    reference = read_metrics(folders["torch-single"] / "metrics.jsonl")[-2]
    for name in ("tf-w1", "tf-w2"):
        with np.load(folders[name] / "model.npz") as exported:
            theirs = {key: exported[key] for key in exported.files}
        assert theirs.keys() == ours.keys() and "block2.bn1.running_var" in ours
        for key, array in ours.items():
            bound = max(0.01 * np.abs(array).max() + 1e-4, 4 * drifts[1])
            assert np.abs(theirs[key] - array).max() <= bound, (name, key)
        evaluated = read_metrics(folders[name] / "metrics.jsonl")[-2]
        assert evaluated["val_loss"] == pytest.approx(reference["val_loss"], rel=10 * tolerance)
    start = read_metrics(folders["tf-w2"] / "metrics.jsonl")[0]
    assert start["numerics"]["batch_norm"].startswith("global-batch statistics")
    epoch = [r for r in read_metrics(folders["torch-ddp"] / "metrics.jsonl")][-2]
    assert epoch["replicas_in_sync"] is True  # weights and running statistics, every rank


@pytest.mark.parametrize("module", ["torch_impl.train", "tf_impl.train"])
def test_stop_and_resume_equals_an_uninterrupted_run_with_running_statistics(module, tmp_path):
    """The running statistics travel in the checkpoint (DCP buffers; tf.train.Checkpoint
    reaches the on-read variables): the resumed run ends on the same bits, statistics too.
    Stopped inside epoch 2 (10 steps an epoch), on 2 ranks."""
    run = runner(module, tmp_path, warm=True)  # its subject is the resume, not the launch
    settings = ["data.train_limit=640", "data.test_limit=200", "train.epochs=2"]
    settings += ["output.save_model=true", "train.log_every_steps=0"]
    if module.startswith("torch"):
        settings.append("torch.strategy=ddp")
    run("whole", 2, *settings, extra=[*PRESET, "--quiet"], small=False)
    run("parts", 2, *settings, extra=[*PRESET, "--quiet", "--stop-after-step", "13"], small=False)
    run("parts", 2, *settings, extra=[*PRESET, "--quiet", "--resume"], small=False)
    exported = "model.pt" if module.startswith("torch") else "model.npz"

    def load(folder):
        if exported == "model.pt":
            return {name: t.numpy() for name, t in torch.load(folder / exported).items()}
        with np.load(folder / exported) as saved:
            return {key: saved[key] for key in saved.files}

    whole, parts = load(tmp_path / "whole"), load(tmp_path / "parts")
    assert whole.keys() == parts.keys() and "block3.bn2.running_mean" in whole
    for key in whole:
        np.testing.assert_array_equal(whole[key], parts[key], err_msg=key)
