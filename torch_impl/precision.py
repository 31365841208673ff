"""Mixed precision on every torch strategy, loss scaling under fp16, and TF32.

A strategy's registry entry (`common.core.config.strategies`) says how it casts: single and ddp
by `torch.autocast` around the forward (fp32 parameters and gradients); fully_shard and FSDP1 by
their wrapper's policy (fp32 shards gathered in the low precision, gradients reduced in fp32).
Under fp16 every rank must skip the same steps: `torch.amp.GradScaler` sees DDP's gradients
already all-reduced, and all-reduces the found-inf flag itself for DTensor gradients (fsdp2,
hsdp; pytorch PR 132816); FSDP1's flat parameters take `ShardedGradScaler`, which all-reduces it
over the process group. The scaler's state is in every checkpoint.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import torch
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

from common.core.config.config import Config
from common.core.config.strategies import Strategy
from common.core.measure import precision

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def apply_tf32(enabled: bool) -> dict[str, str]:
    """TF32 for fp32 matmuls and cuDNN convolutions, on or off; the settings, for run_start.
    torch 2.13 keeps matmul TF32 off and conv TF32 on by default, unlike TensorFlow (on for
    both), so dist.tf32 sets both explicitly. The `fp32_precision` attributes replace
    `allow_tf32` from torch 2.9 on (docs: notes/cuda.html, "TensorFloat-32 (TF32) on Ampere
    (and later) devices"); they are plain flags on a machine without CUDA."""
    setting = "tf32" if enabled else "ieee"
    conv = torch.backends.cudnn.conv  # type: ignore[attr-defined]  # set up at import
    torch.backends.cuda.matmul.fp32_precision = setting
    conv.fp32_precision = setting
    return {"matmul": torch.backends.cuda.matmul.fp32_precision, "conv": conv.fp32_precision}


def apply_determinism(enabled: bool) -> dict[str, Any]:
    """dist.deterministic: deterministic kernels, or torch's defaults; the settings, for
    run_start. Called before CUDA starts: cuBLAS reads CUBLAS_WORKSPACE_CONFIG when it creates
    its handle (torch docs: notes/randomness.html, "Reproducibility"); a value set by the user
    is kept. Kernels without a deterministic implementation raise instead of running."""
    if enabled:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # only when it changes the setting: the call imports torch._inductor, which every rank's
    # start would pay for in runs that leave the default (docs/frameworks.md)
    if enabled != torch.are_deterministic_algorithms_enabled():
        torch.use_deterministic_algorithms(enabled)
    torch.backends.cudnn.deterministic = enabled
    torch.backends.cudnn.benchmark = False
    return determinism_settings()


def settle_vector_math() -> None:
    """Run torch's vectorized unary math once on this thread alone, after the threads are set
    and before any parallel region runs it.

    Why: in a few fresh processes, the main thread's share of every elementwise op of Adam's
    update came out inexact for the whole process when the pool's first parallel call set up
    the math library on both threads at once. That broke bitwise resume and torch-TF parity on
    the CPU now and then. The measurements are in docs/frameworks.md ("A fresh process's first
    vector math")."""
    one = torch.ones(8)  # small: runs on this thread, outside any parallel region
    for op in (torch.sqrt, torch.rsqrt, torch.exp, torch.log, torch.tanh, torch.sigmoid):
        op(one)


def determinism_settings() -> dict[str, Any]:
    """What decides whether torch's kernels repeat bit for bit, as set now."""
    return {
        "algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG", ""),
    }


NO_CAST = contextlib.nullcontext()  # reusable; made once, not at every step


class Amp:
    """Autocast and the gradient scaler of one run, and its count of skipped steps."""

    def __init__(self, cfg: Config, strategy: Strategy, device: torch.device):
        self.device_type = device.type
        self.dtype = DTYPES.get(cfg.torch.mixed_precision)
        self.autocast = self.dtype is not None and strategy.precision_by == "autocast"
        self.scaler: torch.amp.GradScaler | None = None
        if cfg.torch.mixed_precision == "fp16":
            flat = strategy.parameters == "flat"
            kind = ShardedGradScaler if flat else torch.amp.GradScaler
            self.scaler = kind(
                device.type,
                init_scale=precision.LOSS_SCALE_INIT,
                growth_interval=precision.LOSS_SCALE_GROWTH_INTERVAL,
            )
        self.sharded = strategy.shards
        self.skips = precision.SkippedSteps()  # this launch's steps, and the optimizer's

    def watch(self, optimizer: torch.optim.Optimizer) -> None:
        """Count the optimizer's real steps under fp16 loss scaling: GradScaler.step skips
        `optimizer.step` on overflow. Without a scaler every step is applied and nothing reads
        the count, so no hook runs at each step."""
        if self.scaler is None:
            return
        skips = self.skips
        optimizer.register_step_post_hook(lambda *_: setattr(skips, "applied", skips.applied + 1))

    def forward_context(self):
        if self.autocast:
            return torch.autocast(device_type=self.device_type, dtype=self.dtype)
        return NO_CAST

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """What backward starts from: the loss, times the scale under fp16 loss scaling."""
        self.skips.taken += 1
        if self.scaler is None:
            return loss
        return self.scaler.scale(loss)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer's step; under fp16, the scaler's: unscale, skip on inf/NaN, update."""
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()

    def loss_scaling(self) -> tuple[float, int] | None:
        """(the scale now, steps skipped since the last call); None without loss scaling."""
        if self.scaler is None:
            return None
        return float(self.scaler.get_scale()), self.skips.new_since_last()

    def save(self, folder: Path, rank: int) -> None:
        if self.scaler is not None:
            torch.save(self.scaler.state_dict(), folder / f"grad-scaler-rank{rank}.pt")

    def load(self, folder: Path, rank: int) -> None:
        """This rank's scaler; rank 0's where no rank `rank` saved one (a run resumed at a larger
        world size: every rank's scale and its growth tracker are the same)."""
        if self.scaler is not None:
            own = folder / f"grad-scaler-rank{rank}.pt"
            saved = own if own.is_file() else folder / "grad-scaler-rank0.pt"
            self.scaler.load_state_dict(torch.load(saved))
