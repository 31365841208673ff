"""The contracts between the epoch driver (`common.core.train.loop`) and a framework, in types: what
a framework's trainer hands the driver (`Trainer`), and what the modules each framework writes
once per side provide (`Dist`, `Memory`, `Checkpoints`, `Gemm`: torch_impl's and tf_impl's
`dist`, `memory`, `checkpoint` and `gemm` modules, checked against these by mypy in make lint),
and its data (`DataSource`). `common.core.train.trainer.TrainerBase` fills the trainer's half that
is the same on both sides by calling the modules.

Framework objects (a device, a model, an optimizer, a framework's DistInfo) are `Any` here:
common/ imports neither framework.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, SupportsFloat, TypeVar

import numpy as np

from common.core.config.expected_traffic import Unit
from common.core.config.strategies import ParallelDims, Strategy
from common.core.measure.clocks import StepClock
from common.core.measure.memory import MemoryUse
from common.core.measure.peak import Probe
from common.core.measure.traffic import Call
from common.core.records.entries import StepSplit
from common.data.shard import TrainPlan
from common.launch.cluster import ClusterSpec

T = TypeVar("T")


class Dist(Protocol):
    """A framework's `dist` module: collectives and versions of one rank (`info`: its
    DistInfo)."""

    def versions(self, info: Any) -> dict[str, str]: ...

    def all_reduce_sum(self, values: np.ndarray, info: Any) -> np.ndarray: ...

    def barrier(self, info: Any) -> None: ...

    def synchronize(self, info: Any) -> None: ...

    def leave_together(self, info: Any, timeout_s: float) -> None: ...


class Memory(Protocol):
    """A framework's `memory` module: the rank's peak and the exact bytes it holds."""

    def baseline(self, device: Any) -> int: ...

    def reset_peak(self, device: Any) -> None: ...

    def memory_use(
        self, device: Any, model: Any, optimizer: Any, baseline_bytes: int
    ) -> MemoryUse: ...


class Checkpoints(Protocol):
    """A framework's `checkpoint` module: the state into and out of a checkpoint folder, and
    the final weights in the canonical layout."""

    def save_checkpoint(self, folder: Path, *, model: Any, optimizer: Any, info: Any) -> None: ...

    def load_checkpoint(self, folder: Path, *, model: Any, optimizer: Any, info: Any) -> None: ...

    def export_model(self, model: Any, run_dir: Path, info: Any) -> Path: ...


class Gemm(Protocol):
    """A framework's `gemm` module: the rate of a GEMM on the rank's device."""

    def gemm_flops(self, device: Any, precision: str) -> Probe: ...


class DataSource(Protocol):
    """A framework's data of one rank (torch_impl.data.TorchData, tf_impl.data.TfData)."""

    plan: TrainPlan

    @property
    def steps_per_epoch(self) -> int: ...

    def train_batches(self, epoch: int, start: int = 0) -> Iterable[Any]: ...


class StopAgreement(Protocol):
    """How the ranks agree, at a step boundary inside an epoch, that a stop (SIGUSR1) reached
    one of them: the suite's vote (`common.core.train.mid_epoch.Vote`) or the framework's own
    mechanism (TensorFlow's `tf_impl.preemption`)."""

    how: str
    """What agreed, as the preempted run's run_end names it."""

    def at_boundary(self, checkpoint: Callable[[], None]) -> bool:
        """Collective, after every call into the framework: True when the ranks stop here,
        having run `checkpoint()` (this boundary's checkpoint) first."""


class Trainer(Protocol):
    """What one framework hands the driver. Every method marked collective is called by every
    rank, in the same order."""

    framework: str
    """"torch" or "tf", as the run_start record names it."""
    framework_version: str
    strategy: Strategy
    """The strategy's registry entry (`common.core.config.strategies.Strategy`); `.name` is its
    name."""
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
        """This rank's intra-op and inter-op threads (`common.core.config.devices` decides
        them)."""

    def numerics(self) -> dict[str, Any]:
        """What `precision` means on this side (`common.core.measure.precision.numerics`, and
        how)."""

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

    def train_batches(self, epoch: int, start: int = 0) -> Iterable[Any]:
        """This rank's batches of `epoch` (0-based) from the shared shard plan, from step
        `start` on (a launch resumed inside the epoch)."""

    def step_clock(self) -> StepClock:
        """A fresh clock for one epoch's steps (`common.core.measure.clocks`)."""

    def train_step(self, batch: Any, lr: float) -> SupportsFloat:
        """Collective: one optimizer step at learning rate `lr`. Returns this rank's share of
        the global batch's mean loss (the shares of all ranks add up to it); `float()` of it
        may wait for the device."""

    def train_steps(self, batches: list[Any], lrs: list[float]) -> list[Any]:
        """Collective: len(batches) optimizer steps in one call (train.steps_per_call), the
        same steps as that many `train_step` calls; their loss shares, in step order."""

    def evaluate(self) -> tuple[float, float]:
        """Collective: (mean loss, accuracy) over the whole test set."""

    def loss_scaling(self) -> tuple[float, int] | None:
        """(this rank's loss scale, steps it skipped since the last call); None without loss
        scaling."""

    def replica_digest(self) -> float | None:
        """The integer sum of the bit patterns of this rank's fp32 weights, modulo
        `common.core.measure.replicas.DIGEST_MODULUS`: equal on every rank of a replicated
        strategy exactly
        when their weights are (barring a collision); None where the ranks hold shards."""

    def reset_peak_memory(self) -> None: ...

    def memory_use(self) -> MemoryUse: ...

    def peak_flops(self, fresh: bool = False) -> float:
        """This rank's peak FLOP/s at the run's precision (`common.core.measure.peak`: cached or
        measured; `fresh`: measured again)."""

    def save_checkpoint(self, folder: Path) -> None:
        """Collective: the state, into `folder` (each rank writes its own part)."""

    def load_checkpoint(self, folder: Path) -> None:
        """Collective: restore the state saved into `folder`."""

    def export_model(self, run_dir: Path) -> Path:
        """Collective: the final weights in the canonical layout; the chief writes them."""

    def leave_together(self) -> None:
        """Collective: return once no rank needs this one any more (the last thing it does)."""

    def describe_failure(self, failure: BaseException) -> str:
        """One line for run_end's `error`: which rank, and what a framework error means."""

    def count_calls(self, work: Callable[[], T]) -> tuple[T, list[Call]]:
        """work()'s result and the collectives it issued on this rank, counted from the
        framework's own calls (`common.core.measure.traffic`)."""
        ...

    def step_split(self) -> StepSplit | None:
        """Where the time of the last work `count_calls` counted went, by the framework's
        profiler (`common.core.records.entries.StepSplit`); None where it does not tell."""
        ...

    def traffic_units(self) -> list[Unit]:
        """The groups of parameters the wrapper gathers and reduces together."""
        ...

    def tracing(self, folder: Path) -> AbstractContextManager[None]:
        """The framework's profiler over what runs inside, its trace written into `folder`
        at the end (`common.core.train.tracing`)."""
        ...

    def stop_agreement(self, requested: Callable[[], bool]) -> StopAgreement:
        """How this launch's ranks agree on a stop inside an epoch; `requested()`: whether a
        stop reached this rank. Made once per launch, when a step cadence is set."""
        ...

    def lost_peer(self, failure: BaseException) -> str | None:
        """What `failure` says of a lost peer, when it is the framework's sign of one."""
