"""The one typed configuration both frameworks read.

Shared sections (`data`, `model`, `optim`, `train`, `dist`, `output`) mean the same thing on both
sides; knobs that exist only in one framework live in `torch` or `tf`. Every section checks its
values when it is built, so a bad preset or `--set` override fails before any process group or
strategy exists. Loading, overrides and hashing are in `common.core.config.config_io`.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StrictBool,
    StrictInt,
    model_validator,
)
from pydantic import StrictStr as Text

from common.checks.rules import Says, require
from common.checks.section import Section
from common.core.config import strategies
from common.core.config.framework_sections import TfConfig, TorchConfig
from common.data.config import DataConfig
from common.models import zoo
from common.models.config import ModelConfig

MAX_RUN_NAME = 200  # bytes; file systems allow 255 for a name, and tools add suffixes
# The longest wait a timeout may ask for: 30 days, longer than any job a scheduler grants.
# Both frameworks turn timeouts into integer milliseconds, which overflow far above it.
MAX_TIMEOUT_S = 30 * 24 * 3600.0
# Seeds feed numpy, torch and TensorFlow alike; numpy's legacy generators take 32 bits.
MAX_SEED = 2**32 - 1

# The config keys that say how a run is launched, recorded or analysed, not what it trains (its
# samples, model, arithmetic and schedule): a resumed launch may change them
# (`common.core.run.resume.MAY_CHANGE`), and runs that differ only in them are repeats of one
# experiment (`common.report.runs.NOT_COMPARED`). "section." stands for the whole section.
HOW_NOT_WHAT = (
    "output.",
    "dist.timeout_s",
    "dist.startup_timeout_s",
    "dist.startup_retries",
    "data.dir",
    "data.stage_dir",
    "data.loader_workers",
    "train.log_every_steps",
    "train.checkpoint_every_epochs",
    "train.checkpoint_every_steps",
    "train.keep_checkpoints",
    "train.target_accuracy",
    "train.eval_batch_size",
    "train.stop_on_divergence",
    "train.steps_per_call",  # the same steps, dispatched otherwise; compare's rows tell it apart
)


def is_listed(key: str, keys: tuple[str, ...]) -> bool:
    """Whether dotted `key` is one of `keys` or in one of their sections ("output.")."""
    return any(key == entry or (entry.endswith(".") and key.startswith(entry)) for entry in keys)


def _number(value: Any) -> Any:
    """A number from any form Python reads ("1e-3", "1E4": YAML 1.1, PyYAML's resolver, reads
    exponents without a dot as strings); finite. Anything else is left for the type's error."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"expected a finite number, got {value!r}")
        return float(value)
    return value


# A float key: a number in any form Python reads, finite; never a boolean.
Number = Annotated[float, BeforeValidator(_number), Field(strict=True)]
Timeout = Annotated[
    Number, Field(gt=0, le=MAX_TIMEOUT_S), Says(f"must be in (0, {MAX_TIMEOUT_S:.0f}] s (30 days)")
]
NO_DIR = "is empty: name the folder for run folders (e.g. output.dir=results)"


def _fits_a_folder_name(name: str) -> str:
    size = len(name.encode())
    if size > MAX_RUN_NAME:
        raise ValueError(
            f"output.run_name is {size} bytes long; at most {MAX_RUN_NAME} fit a folder name"
        )
    return name


# A folder's name: no '/', no leading '.', and its bytes fit a file system's name.
RunName = Annotated[
    Text,
    Field(pattern=r"^([^./][^/]*)?$"),
    Says(f"is a folder name, not a path (no '/', no leading '.'), of at most {MAX_RUN_NAME} bytes"),
    AfterValidator(_fits_a_folder_name),
]


class OptimConfig(Section):
    name: Literal["sgd", "adam", "adadelta"] = "adam"
    """Optimizer; hyper-parameters below map to both frameworks' definitions."""
    lr: Annotated[Number, Field(gt=0)] = 1e-3
    """Learning rate (the peak rate for schedule=onecycle)."""
    momentum: Annotated[Number, Field(ge=0, lt=1)] = 0.0
    """SGD momentum (ignored by adam and adadelta)."""
    weight_decay: Annotated[Number, Field(ge=0)] = 0.0
    """L2 penalty added to the gradient (torch semantics, coupled, not AdamW)."""
    schedule: Literal["none", "step", "onecycle"] = "none"
    """none: constant; step: lr *= gamma every step_epochs epochs; onecycle: per step."""
    gamma: Annotated[Number, Field(gt=0, le=1)] = 0.7
    """Decay factor of the step schedule."""
    step_epochs: Annotated[StrictInt, Field(ge=1)] = 1
    """Epochs between two decays of the step schedule."""


class TrainConfig(Section):
    epochs: Annotated[StrictInt, Field(ge=1)] = 1
    """Passes over the training set."""
    batch_size: Annotated[StrictInt, Field(ge=1)] = 64
    """Batch size; what it counts is set by batch_mode."""
    batch_mode: Literal["global", "per_rank"] = "global"
    """global: batch_size is split over the ranks (strong scaling); per_rank: each rank takes
    batch_size samples, so the global batch grows with the world (weak scaling)."""
    eval_batch_size: Annotated[StrictInt, Field(ge=0)] = 0
    """Global evaluation batch, split over the ranks; 0: the framework's fastest on the
    device (`common.core.config.devices.EVAL_BATCH`: torch 100 and TensorFlow 1000 on the CPU,
    measured; 1000 on GPUs). Loss and accuracy do not depend on it."""
    seed: Annotated[StrictInt, Field(ge=0, le=MAX_SEED), Says(f"must be in 0..{MAX_SEED}")] = 0
    """Seeds the initial weights, the shuffle order and dropout."""
    target_accuracy: Annotated[Number, Field(gt=0, le=1), Says("is a fraction in (0, 1]")] = 0.98
    """Validation accuracy whose first crossing is reported as time to target."""
    log_every_steps: Annotated[StrictInt, Field(ge=0)] = 0
    """Write a `step` metrics record every N steps (0 = epoch records only)."""
    checkpoint_every_epochs: Annotated[StrictInt, Field(ge=0)] = 0
    """Save a checkpoint every N epochs (0 = never)."""
    checkpoint_every_steps: Annotated[StrictInt, Field(ge=0)] = 0
    """Save a checkpoint every N global optimizer steps, inside epochs too (0 = never). With it,
    a stop signal (SIGUSR1, SIGTERM under SLURM) is acted on at the next step boundary rather
    than at the epoch's end: the ranks vote on it after every call into the framework, one
    small all-reduce outside the step clock."""
    keep_checkpoints: Annotated[StrictInt, Field(ge=0)] = 2
    """How many of the newest complete checkpoints a run keeps (0 = all)."""
    stop_on_divergence: StrictBool = False
    """End the run (status diverged) after the first epoch whose train or val loss is NaN or
    infinite, instead of training on to train.epochs (status diverged as well)."""
    steps_per_call: Annotated[StrictInt, Field(ge=1)] = 1
    """Optimizer steps per call into the framework: TensorFlow runs them in one tf.function
    call (as Keras's steps_per_execution), torch one after another with the losses read once
    per call. The steps, their losses and the records are the same as at 1; the per-step
    dispatch and the host's wait are paid once per call. Step times are the call's time shared
    out. An epoch's last call takes what is left. compare puts runs of another value in rows
    of their own."""

    accumulation_steps: Annotated[StrictInt, Field(ge=1)] = 1
    """Micro-batches per optimizer step (gradient accumulation): each rank's batch is split
    into this many equal parts, each part's gradient is added up, and the optimizer steps once.
    The global batch keeps its meaning (the samples of one optimizer step); the gradients are
    exchanged once per step where the strategy allows it (DDP's no_sync, FSDP's gradient-sync
    switch, MultiWorkerMirroredStrategy's one apply_gradients), while FSDP still all-gathers
    its parameters for every micro-batch. Must divide the per-rank batch. Batch normalization
    sees a micro-batch's statistics."""

    def global_batch_size(self, world_size: int) -> int:
        """The number of samples in one optimizer step across all ranks."""
        if self.batch_mode == "per_rank":
            return self.batch_size * world_size
        if self.batch_size % world_size:
            raise ValueError(
                f"train.batch_size={self.batch_size} (global) does not split evenly over "
                f"{world_size} ranks; choose a multiple of {world_size} or set "
                "train.batch_mode=per_rank"
            )
        return self.batch_size

    def per_rank_batch_size(self, world_size: int) -> int:
        return self.global_batch_size(world_size) // world_size

    def micro_batch_size(self, world_size: int) -> int:
        """The samples of one micro-batch on one rank; ValueError where
        train.accumulation_steps does not divide the per-rank batch."""
        per_rank, parts = self.per_rank_batch_size(world_size), self.accumulation_steps
        if per_rank % parts:
            divisors = [d for d in range(1, per_rank + 1) if per_rank % d == 0]
            raise ValueError(
                f"train.accumulation_steps={parts} does not divide the per-rank batch of "
                f"{per_rank} (train.batch_size={self.batch_size}, {self.batch_mode}, over "
                f"{world_size} rank(s)); choose one of {divisors[:12]}"
                f"{' ...' if len(divisors) > 12 else ''}"
            )
        return per_rank // parts


class DistConfig(Section):
    device: Literal["auto", "cpu", "gpu"] = "auto"
    """auto: a GPU when the framework sees one, else the CPU."""
    timeout_s: Timeout = 120.0
    """Longest wait in one collective before the run fails instead of hanging."""
    startup_timeout_s: Timeout = 120.0
    """Longest wait for all workers to join at start-up: the whole start-up, on both frameworks,
    whatever startup_retries says (a rank gives up a few seconds after it)."""
    startup_retries: Annotated[StrictInt, Field(ge=1)] = 3
    """How many times within dist.startup_timeout_s the chief names the workers still missing
    (TensorFlow's rendezvous, in equal parts of the timeout); the last time it gives up."""
    tf32: StrictBool = False
    """TF32 for fp32 matmuls and convolutions on GPUs that have it (Ampere on), set on both
    sides: TensorFlow enables it by default and torch only for convolutions, so leaving each
    side's default would compare different arithmetic."""
    deterministic: StrictBool = False
    """Deterministic kernels on both sides (torch.use_deterministic_algorithms with cuDNN's
    deterministic algorithms and CUBLAS_WORKSPACE_CONFIG; TensorFlow's op determinism), so that
    a run repeats, and resumes, bit for bit on a GPU too, at a cost in speed there. On the CPU,
    where both sides' kernels repeat bit for bit already, torch's results do not change and
    TensorFlow's move by float32 rounding (its deterministic reductions sum in another order)."""


class OutputConfig(Section):
    dir: Annotated[Text, Field(pattern=r"\S"), Says(NO_DIR)] = "results"
    """Parent folder of run folders."""
    run_name: RunName = ""
    """Run folder name under dir; empty means <framework>-<strategy>-<model>-w<world>-<time>."""
    save_model: StrictBool = False
    """Export the final model once, unsharded, into the run folder."""
    tensorboard: StrictBool = False
    """Write TensorBoard scalars into the run folder while the run goes (the chief, as each
    record is written): tensorboard --logdir results/ then shows the runs live. Needs
    tensorboardX (the 'tensorboard' extra)."""
    profile_steps: Annotated[StrictInt, Field(ge=0)] = 0
    """Trace this many steps of each launch's first epoch on every rank, with the framework's
    profiler, into the run folder's traces/ (torch: a Chrome trace per rank; TensorFlow: an
    XSpace per rank for TensorBoard's Profile tab); 0: none."""
    split_steps: Annotated[StrictInt, Field(ge=1)] = 1
    """Steps profiled for the step split (each epoch record's step_split, multi-rank runs on
    the CPU) in each launch's first epoch, from its second step, each a call of its own; the
    split of the one of median wall time is recorded. One step is one sample of a noisy clock
    (a core lent away, a peer late); each more step costs its profiler's processing. torch
    only: TensorFlow profiles one."""


class Config(Section):
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    dist: DistConfig = Field(default_factory=DistConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    torch: TorchConfig = Field(default_factory=TorchConfig)
    tf: TfConfig = Field(default_factory=TfConfig)

    def net(self) -> zoo.Net:
        """The model this config trains, for its dataset (`common.models.zoo.describe`)."""
        return zoo.describe(self.model, self.data.name)

    @model_validator(mode="after")
    def _valid(self) -> Any:
        """What each framework's strategy refuses of the other sections, before anything
        starts (what depends on the number of ranks is checked at launch)."""
        for framework in ("torch", "tf"):
            name = getattr(self, framework).strategy
            if name != strategies.AUTO:
                reasons = strategies.refusals(strategies.get(framework, name), self)
                require(not reasons, "; ".join(reasons))
        return self
