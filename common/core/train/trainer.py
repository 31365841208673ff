"""`TrainerBase`: the half of the `Trainer` contract (`common.core.train.contract`) that both
frameworks fill the same way, by calling their `dist`, `memory`, `checkpoint` and `gemm`
modules; each side's `train.py` adds only what its framework alone knows: building the model,
one step, evaluation, and what its errors mean.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from common.core.config import strategies
from common.core.config.config import Config
from common.core.config.expected_traffic import Unit
from common.core.measure import peak, precision
from common.core.measure.clocks import HostStepClock, StepClock
from common.core.measure.memory import MemoryUse
from common.core.records.entries import StepSplit
from common.core.run import failures
from common.core.train.contract import (
    Checkpoints,
    DataSource,
    Dist,
    Gemm,
    Memory,
    StopAgreement,
)
from common.core.train.mid_epoch import Vote
from common.models import weights


class TrainerBase:
    """The calls every Trainer makes into its framework's modules, which the subclass names as
    class attributes. `info` is its framework's `dist.DistInfo`; the subclass's `build` sets
    `data` (its `data.build_dataset`), `model`, `optimizer` and, through
    `take_memory_baseline`, `memory_baseline`."""

    dist: Dist
    memory: Memory
    checkpoint: Checkpoints
    gemm: Gemm
    framework: str
    """Set by the subclass; what `build` sets:"""
    data: DataSource
    model: Any
    optimizer: Any
    precision: str
    memory_baseline: int
    train_step: Callable[[Any, float], Any]
    """Set by the subclass as a method: one optimizer step (`contract.Trainer.train_step`)."""

    def __init__(self, cfg: Config, info: Any):
        self.cfg, self.info, self.spec = cfg, info, info.spec
        self.device_type, self.device_name = info.device_type, info.device_name
        section = getattr(cfg, self.framework)
        self.strategy = strategies.get(self.framework, section.strategy)
        self.dims = self.strategy.dims(self.spec.world_size, self.spec.local_world_size, cfg)

    @property
    def steps_per_epoch(self) -> int:
        return self.data.steps_per_epoch

    @property
    def global_batch(self) -> int:
        return self.data.plan.global_batch

    def train_batches(self, epoch: int, start: int = 0) -> Iterable[Any]:
        return self.data.train_batches(epoch, start)

    def train_steps(self, batches: list[Any], lrs: list[float]) -> list[Any]:
        """Several steps in one call (train.steps_per_call): here one after another, their
        losses left as the framework returned them (read once, by the caller)."""
        return [self.train_step(batch, lr) for batch, lr in zip(batches, lrs, strict=True)]

    def threads(self) -> dict[str, int]:
        return {name: int(count) for name, count in self.info.threads.items()}

    def versions(self) -> dict[str, str]:
        return self.dist.versions(self.info)

    def step_clock(self) -> StepClock:
        return HostStepClock(self.synchronize)

    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
        return self.dist.all_reduce_sum(values, self.info)

    def barrier(self) -> None:
        self.dist.barrier(self.info)

    def synchronize(self) -> None:
        self.dist.synchronize(self.info)

    def reset_peak_memory(self) -> None:
        self.memory.reset_peak(self.info.device)

    def take_memory_baseline(self) -> None:
        """Call in build() after the data and before the model
        (`common.core.measure.memory.BASELINE_AT`)."""
        self.memory_baseline = self.memory.baseline(self.info.device)

    def memory_use(self) -> MemoryUse:
        return self.memory.memory_use(
            self.info.device, self.model, self.optimizer, self.memory_baseline
        )

    def shared_numerics(self, *, loss_scaling: bool) -> dict[str, Any]:
        """What both sides record of their arithmetic (`common.core.measure.precision.numerics`),
        the
        strategy's gradient exchange and mesh, and how batch normalization computes."""
        section = getattr(self.cfg, self.framework)
        return {
            **precision.numerics(
                precision=section.mixed_precision,
                tf32=self.cfg.dist.tf32,
                loss_scaling=loss_scaling,
                device_type=self.device_type,
            ),
            "gradient_sync": self.strategy.gradient_sync,
            "mesh": {"replicate": self.dims.replicate, "shard": self.dims.shard},
            "batch_norm": precision.batch_norm(self.cfg.net()),
            "deterministic": self.cfg.dist.deterministic,
        }

    def peak_flops(self, fresh: bool = False) -> float:
        tf32 = "+tf32" if self.cfg.dist.tf32 and self.device_type == "gpu" else ""
        flops, _ = peak.peak_flops(
            device=f"{self.device_type}:{self.device_name}",
            precision=self.precision + tf32,
            threads=self.info.threads.get("intra_op", 0),
            measure=lambda: self.gemm.gemm_flops(self.info.device, self.precision),
            fresh=fresh,
        )
        return flops

    def save_checkpoint(self, folder: Path) -> None:
        held = {"model": self.model, "optimizer": self.optimizer, "info": self.info}
        self.checkpoint.save_checkpoint(folder, **held)

    def load_checkpoint(self, folder: Path) -> None:
        held = {"model": self.model, "optimizer": self.optimizer, "info": self.info}
        self.checkpoint.load_checkpoint(folder, **held)

    def export_model(self, run_dir: Path) -> Path:
        return self.checkpoint.export_model(self.model, run_dir, self.info)

    def step_split(self) -> StepSplit | None:
        """Where the time of the last work `count_calls` counted went; None where the
        framework's profiler does not tell (TensorFlow; a GPU, whose kernels run beside the
        host's profile)."""
        return None

    def traffic_units(self) -> list[Unit]:
        """What the wrapper gathers and reduces together: the whole model, as one unit (a
        sharding side names its units)."""
        shapes = weights.parameter_shapes(self.cfg.net())
        return [Unit(tuple(shape for held in shapes.values() for shape in held), root=True)]

    def stop_agreement(self, requested: Callable[[], bool]) -> StopAgreement:
        return Vote(self.all_reduce_sum, requested)

    def lost_peer(self, failure: BaseException) -> str | None:
        """What `failure` says of a lost peer, when it is the framework's sign of one (a
        collective that failed or timed out); None for a failure of this rank's own."""
        return None

    def describe_failure(self, failure: BaseException) -> str:
        """run_end's error: this rank, then the root cause first (`common.core.run.failures`)."""
        cause = failures.describe(failure)
        lost = self.lost_peer(failure)
        if lost is None:
            return f"rank {self.spec.rank}: {cause}"
        return (
            f"rank {self.spec.rank}: {lost}: a peer died or did not answer within "
            f"dist.timeout_s={self.cfg.dist.timeout_s:g} s: {cause}"
        )

    def leave_together(self) -> None:
        self.dist.leave_together(self.info, self.cfg.dist.timeout_s)
