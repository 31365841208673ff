"""What a framework hands the epoch driver (`common.core.loop`): the `Trainer` contract, and
`TrainerBase`, the half of it that both frameworks fill the same way.

torch_impl and tf_impl each have `dist`, `memory` and `checkpoint` modules with the same public
names and parameters (tests/tf/test_mirror.py checks it), so the calls into them are written
once here; each side's `train.py` adds only what its framework alone knows: building the
model, one step, evaluation, versions, and what its errors mean.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, SupportsFloat

import numpy as np

from common.core import peak, precision, strategies
from common.core.clocks import HostStepClock, StepClock
from common.core.config import Config
from common.core.memory import MemoryUse
from common.core.strategies import ParallelDims
from common.launch.cluster import ClusterSpec


class Trainer(Protocol):
    """What one framework hands the driver. Every method marked collective is called by every
    rank, in the same order."""

    framework: str
    """"torch" or "tf", as the run_start record names it."""
    framework_version: str
    strategy: str
    """The strategy's name (`common.core.strategies`)."""
    dims: ParallelDims
    """How the ranks divide the work; the global batch is split over `dims.dp_size` ranks."""
    precision: str
    train_clock: str
    """What `train_time_s` covers on this framework (written into every epoch record)."""
    spec: ClusterSpec
    device_type: str
    """"cpu" or "gpu"."""
    device_name: str

    def versions(self) -> dict[str, str]:
        """Library versions beyond python and numpy (CUDA, NCCL, cuDNN, Keras ...)."""

    def threads(self) -> dict[str, int]:
        """This rank's intra-op and inter-op threads (`common.core.devices` decides them)."""

    def numerics(self) -> dict:
        """What `precision` means on this side (`common.core.precision.numerics`, and how)."""

    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
        """Collective: the float64 sum of `values` over the ranks, on every rank."""

    def barrier(self) -> None:
        """Collective: return once every rank has arrived."""

    def synchronize(self) -> None:
        """Wait for this rank's queued device work, so that a clock reading means what it says."""

    def build(self) -> None:
        """Data, model and optimizer; called once the run folder exists."""

    @property
    def steps_per_epoch(self) -> int: ...

    @property
    def global_batch(self) -> int: ...

    def train_batches(self, epoch: int) -> Iterable[Any]:
        """This rank's batches of `epoch` (0-based) from the shared shard plan."""

    def step_clock(self) -> StepClock:
        """A fresh clock for one epoch's steps (`common.core.clocks`)."""

    def train_step(self, batch: Any, lr: float) -> SupportsFloat:
        """Collective: one optimizer step at learning rate `lr`. Returns this rank's share of
        the global batch's mean loss (the shares of all ranks add up to it); `float()` of it
        may wait for the device."""

    def evaluate(self) -> tuple[float, float]:
        """Collective: (mean loss, accuracy) over the whole test set."""

    def loss_scaling(self) -> tuple[float, int] | None:
        """(this rank's loss scale, steps it skipped since the last call); None without loss
        scaling."""

    def replica_digest(self) -> float | None:
        """The integer sum of the bit patterns of this rank's fp32 weights, modulo
        `common.core.precision.DIGEST_MODULUS`: equal on every rank of a replicated strategy exactly
        when their weights are (barring a collision); None where the ranks hold shards."""

    def reset_peak_memory(self) -> None: ...

    def memory_use(self) -> MemoryUse: ...

    def shared_numerics(self, *, loss_scaling: bool) -> dict[str, Any]:
        """What both sides record of their arithmetic (`common.core.precision.numerics`), the
        strategy's gradient exchange and mesh, and how batch normalization computes."""
        section = getattr(self.cfg, self.framework)
        return {
            **precision.numerics(
                precision=section.mixed_precision,
                tf32=self.cfg.dist.tf32,
                loss_scaling=loss_scaling,
                device_type=self.device_type,
            ),
            "gradient_sync": self.parallel.gradient_sync,
            "mesh": {"replicate": self.dims.replicate, "shard": self.dims.shard},
            "batch_norm": precision.batch_norm(self.cfg.net()),
        }

    def peak_flops(self) -> float:
        """This rank's peak FLOP/s at the run's precision (`common.core.peak`: cached or
        measured)."""

    def save_checkpoint(self, folder: Path) -> None:
        """Collective: the state, into `folder` (each rank writes its own part)."""

    def load_checkpoint(self, folder: Path) -> None:
        """Collective: restore the state saved into `folder`."""

    def export_model(self, run_dir: Path) -> Path:
        """Collective: the final weights in the canonical layout; the chief writes them."""

    def leave_together(self) -> None:
        """Collective: return once no rank needs this one any more (the last thing it does)."""

    def describe_failure(self, failure: Exception) -> str:
        """One line for run_end's `error`: which rank, and what a framework error means."""


class TrainerBase:
    """The calls every Trainer makes into its framework's `dist`, `memory` and `checkpoint`
    modules, which the subclass names as class attributes. `info` is its framework's
    `dist.DistInfo`; the subclass's `build` sets `data` (its `data.build_dataset`), `model` and
    `optimizer`."""

    dist: ModuleType
    memory: ModuleType
    checkpoint: ModuleType
    gemm: ModuleType

    framework: str

    def __init__(self, cfg: Config, info: Any):
        self.cfg, self.info, self.spec = cfg, info, info.spec
        self.device_type, self.device_name = info.device_type, info.device_name
        section = getattr(cfg, self.framework)
        self.parallel = strategies.get(self.framework, section.strategy)
        self.strategy = self.parallel.name
        self.dims = self.parallel.dims(self.spec.world_size, self.spec.local_world_size, cfg)

    @property
    def steps_per_epoch(self) -> int:
        return self.data.steps_per_epoch

    @property
    def global_batch(self) -> int:
        return self.data.plan.global_batch

    def train_batches(self, epoch: int) -> Iterable[Any]:
        return self.data.train_batches(epoch)

    def threads(self) -> dict[str, int]:
        return dict(self.info.threads)

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
        (`common.core.memory.BASELINE_AT`)."""
        self.memory_baseline = self.memory.baseline(self.info.device)

    def memory_use(self) -> MemoryUse:
        return self.memory.memory_use(
            self.info.device, self.model, self.optimizer, self.memory_baseline
        )

    def shared_numerics(self, *, loss_scaling: bool) -> dict[str, Any]:
        """What both sides record of their arithmetic (`common.core.precision.numerics`), the
        strategy's gradient exchange and mesh, and how batch normalization computes."""
        section = getattr(self.cfg, self.framework)
        return {
            **precision.numerics(
                precision=section.mixed_precision,
                tf32=self.cfg.dist.tf32,
                loss_scaling=loss_scaling,
                device_type=self.device_type,
            ),
            "gradient_sync": self.parallel.gradient_sync,
            "mesh": {"replicate": self.dims.replicate, "shard": self.dims.shard},
            "batch_norm": precision.batch_norm(self.cfg.net()),
        }

    def peak_flops(self) -> float:
        tf32 = "+tf32" if self.cfg.dist.tf32 and self.device_type == "gpu" else ""
        flops, _ = peak.peak_flops(
            device=f"{self.device_type}:{self.device_name}",
            precision=self.precision + tf32,
            threads=self.info.threads.get("intra_op", 0),
            measure=lambda: self.gemm.gemm_flops(self.info.device, self.precision),
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

    def leave_together(self) -> None:
        self.dist.leave_together(self.info, self.cfg.dist.timeout_s)
