"""Mixed precision on every torch strategy, on 2 real gloo ranks: fp16 loss scaling that skips
the same steps everywhere (an overflow forced on one rank), its state across a resume, bf16
under autocast and FSDP, and TF32 set and recorded."""

import pytest
import torch

from common.core.measure.precision import FORCE_OVERFLOW_VARIABLE, LOSS_SCALE_INIT
from tests.records import read_metrics
from torch_impl.precision import apply_tf32

FP16 = ["torch.mixed_precision=fp16", "train.log_every_steps=1"]
OVERFLOW_ON_RANK_1 = {FORCE_OVERFLOW_VARIABLE: "1:3"}


def records(run_dir, kind):
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if r["record"] == kind]


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2", "fsdp1"])
def test_an_overflow_on_one_rank_is_skipped_by_every_rank(run_torch, strategy):
    """ddp: the overflow reaches both ranks through the gradient all-reduce. fsdp: it lands in
    rank 1's gradient shard only; the scaler must tell rank 0 (a plain GradScaler on fsdp1
    left rank 0 at 32768 with 0 skips, measured)."""
    _, run_dir = run_torch(strategy, 2, f"torch.strategy={strategy}", *FP16, env=OVERFLOW_ON_RANK_1)
    first, second = records(run_dir, "epoch")
    assert first["skipped_steps"] == [1, 1] and second["skipped_steps"] == [0, 0]
    assert first["loss_scale"] == [LOSS_SCALE_INIT / 2] * 2
    assert first["replicas_in_sync"] is (True if strategy == "ddp" else None)
    assert records(run_dir, "run_end")[0]["status"] == "success"
    numerics = records(run_dir, "run_start")[0]["numerics"]
    assert numerics["compute_dtype"] == "fp16" and numerics["loss_scaling"].startswith("dynamic")


def test_the_loss_scale_survives_a_resume(run_torch):
    settings = ["torch.strategy=ddp", *FP16, "train.epochs=3", "output.save_model=true"]
    _, whole = run_torch("whole", 2, *settings, env=OVERFLOW_ON_RANK_1)
    _, parts = run_torch(
        "parts", 2, *settings, extra=["--stop-after-epoch", "1"], env=OVERFLOW_ON_RANK_1
    )
    assert (parts / "checkpoints" / "epoch-0001" / "grad-scaler-rank1.pt").is_file()
    run_torch("parts", 2, *settings, extra=["--resume"])
    assert [r["loss_scale"] for r in records(parts, "epoch")] == [
        r["loss_scale"] for r in records(whole, "epoch")
    ]
    final = torch.load(whole / "model.pt"), torch.load(parts / "model.pt")
    assert all(torch.equal(final[0][name], final[1][name]) for name in final[0])


def test_bf16_trains_on_every_strategy_and_ddp_equals_fsdp2(run_torch):
    """autocast (ddp) and fully_shard's MixedPrecisionPolicy (fsdp2) cast the same weights to
    bf16 for the same matmuls; measured: the same weights, bit for bit."""
    bf16 = ["torch.mixed_precision=bf16", "output.save_model=true", "model.dropout=false"]
    weights = {}
    for strategy, nproc in (("single", 0), ("ddp", 2), ("fsdp2", 2)):
        _, run_dir = run_torch(strategy, nproc, f"torch.strategy={strategy}", *bf16)
        first, second = records(run_dir, "epoch")
        assert second["train_loss"] < first["train_loss"] and second["val_accuracy"] > 0.8
        numerics = records(run_dir, "run_start")[0]["numerics"]
        assert (numerics["param_dtype"], numerics["compute_dtype"]) == ("fp32", "bf16")
        assert numerics["grad_reduce_dtype"] == "fp32" and numerics["loss_scaling"] == "none"
        weights[strategy] = torch.load(run_dir / "model.pt")
        assert all(t.dtype == torch.float32 for t in weights[strategy].values())
    assert all(torch.equal(weights["ddp"][n], weights["fsdp2"][n]) for n in weights["ddp"])


@pytest.mark.parametrize("enabled, setting", [(False, "ieee"), (True, "tf32")])
def test_tf32_is_set_on_both_kinds_of_kernel_and_recorded(run_torch, enabled, setting):
    try:
        assert apply_tf32(enabled) == {"matmul": setting, "conv": setting}
        assert torch.backends.cuda.matmul.fp32_precision == setting
        assert torch.backends.cudnn.conv.fp32_precision == setting
    finally:
        apply_tf32(False)
    _, run_dir = run_torch("tf32", 0, f"dist.tf32={str(enabled).lower()}", "train.epochs=1")
    numerics = records(run_dir, "run_start")[0]["numerics"]
    assert numerics["tf32"] is enabled and numerics["tf32_effective"] is False  # no GPU here
    assert numerics["tf32_settings"] == {"matmul": setting, "conv": setting}
