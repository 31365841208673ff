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
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    model_validator,
)
from pydantic import StrictStr as Text

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
    "train.keep_checkpoints",
    "train.target_accuracy",
    "train.eval_batch_size",
    "train.stop_on_divergence",
    "train.steps_per_call",  # the same steps, dispatched otherwise; compare's rows tell it apart
)


def is_listed(key: str, keys: tuple[str, ...]) -> bool:
    """Whether dotted `key` is one of `keys` or in one of their sections ("output.")."""
    return any(key == entry or (entry.endswith(".") and key.startswith(entry)) for entry in keys)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


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
# Every section: unknown keys refused, values frozen, field docstrings are the descriptions.
SECTION = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class OptimConfig(BaseModel):
    model_config = SECTION

    name: Literal["sgd", "adam", "adadelta"] = "adam"
    """Optimizer; hyper-parameters below map to both frameworks' definitions."""
    lr: Number = 1e-3
    """Learning rate (the peak rate for schedule=onecycle)."""
    momentum: Number = 0.0
    """SGD momentum (ignored by adam and adadelta)."""
    weight_decay: Number = 0.0
    """L2 penalty added to the gradient (torch semantics, coupled, not AdamW)."""
    schedule: Literal["none", "step", "onecycle"] = "none"
    """none: constant; step: lr *= gamma every step_epochs epochs; onecycle: per step."""
    gamma: Number = 0.7
    """Decay factor of the step schedule."""
    step_epochs: StrictInt = 1
    """Epochs between two decays of the step schedule."""

    @model_validator(mode="after")
    def _valid(self) -> Any:
        _require(self.lr > 0, f"optim.lr must be greater than 0, got {self.lr}")
        _require(0 <= self.momentum < 1, f"optim.momentum must be in [0, 1), got {self.momentum}")
        _require(self.weight_decay >= 0, "optim.weight_decay must be >= 0")
        _require(0 < self.gamma <= 1, f"optim.gamma must be in (0, 1], got {self.gamma}")
        _require(self.step_epochs >= 1, "optim.step_epochs must be >= 1")
        return self


class TrainConfig(BaseModel):
    model_config = SECTION

    epochs: StrictInt = 1
    """Passes over the training set."""
    batch_size: StrictInt = 64
    """Batch size; what it counts is set by batch_mode."""
    batch_mode: Literal["global", "per_rank"] = "global"
    """global: batch_size is split over the ranks (strong scaling); per_rank: each rank takes
    batch_size samples, so the global batch grows with the world (weak scaling)."""
    eval_batch_size: StrictInt = 0
    """Global evaluation batch, split over the ranks; 0: the framework's fastest on the
    device (`common.core.measure.devices.EVAL_BATCH`: torch 100 and TensorFlow 1000 on the CPU,
    measured; 1000 on GPUs). Loss and accuracy do not depend on it."""
    seed: StrictInt = 0
    """Seeds the initial weights, the shuffle order and dropout."""
    target_accuracy: Number = 0.98
    """Validation accuracy whose first crossing is reported as time to target."""
    log_every_steps: StrictInt = 0
    """Write a `step` metrics record every N steps (0 = epoch records only)."""
    checkpoint_every_epochs: StrictInt = 0
    """Save a checkpoint every N epochs (0 = never)."""
    keep_checkpoints: StrictInt = 2
    """How many of the newest complete checkpoints a run keeps (0 = all)."""
    stop_on_divergence: StrictBool = False
    """End the run (status diverged) after the first epoch whose train or val loss is NaN or
    infinite, instead of training on to train.epochs (status diverged as well)."""
    steps_per_call: StrictInt = 1
    """Optimizer steps per call into the framework: TensorFlow runs them in one tf.function
    call (as Keras's steps_per_execution), torch one after another with the losses read once
    per call. The steps, their losses and the records are the same as at 1; the per-step
    dispatch and the host's wait are paid once per call. Step times are the call's time shared
    out. An epoch's last call takes what is left. compare puts runs of another value in rows
    of their own."""

    @model_validator(mode="after")
    def _valid(self) -> Any:
        _require(self.epochs >= 1, f"train.epochs must be >= 1, got {self.epochs}")
        _require(
            self.steps_per_call >= 1,
            f"train.steps_per_call must be >= 1, got {self.steps_per_call}",
        )
        _require(self.batch_size >= 1, f"train.batch_size must be >= 1, got {self.batch_size}")
        _require(self.eval_batch_size >= 0, "train.eval_batch_size must be >= 0 (0: auto)")
        _require(
            0 <= self.seed <= MAX_SEED, f"train.seed must be in 0..{MAX_SEED}, got {self.seed}"
        )
        _require(
            0 < self.target_accuracy <= 1,
            f"train.target_accuracy is a fraction in (0, 1], got {self.target_accuracy}",
        )
        _require(self.log_every_steps >= 0, "train.log_every_steps must be >= 0")
        _require(self.checkpoint_every_epochs >= 0, "train.checkpoint_every_epochs must be >= 0")
        _require(self.keep_checkpoints >= 0, "train.keep_checkpoints must be >= 0 (0 keeps all)")
        return self

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


class DistConfig(BaseModel):
    model_config = SECTION

    device: Literal["auto", "cpu", "gpu"] = "auto"
    """auto: a GPU when the framework sees one, else the CPU."""
    timeout_s: Number = 120.0
    """Longest wait in one collective before the run fails instead of hanging."""
    startup_timeout_s: Number = 120.0
    """Longest wait for all workers to join at start-up."""
    startup_retries: StrictInt = 3
    """Start-up attempts before giving up and naming the unreachable workers."""
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

    @model_validator(mode="after")
    def _valid(self) -> Any:
        for key in ("timeout_s", "startup_timeout_s"):
            value = getattr(self, key)
            _require(
                0 < value <= MAX_TIMEOUT_S,
                f"dist.{key} must be greater than 0 and at most {MAX_TIMEOUT_S:.0f} s "
                f"(30 days), got {value:g}",
            )
        _require(self.startup_retries >= 1, "dist.startup_retries must be >= 1")
        return self


class OutputConfig(BaseModel):
    model_config = SECTION

    dir: Text = "results"
    """Parent folder of run folders."""
    run_name: Text = ""
    """Run folder name under dir; empty means <framework>-<strategy>-<model>-w<world>-<time>."""
    save_model: StrictBool = False
    """Export the final model once, unsharded, into the run folder."""
    tensorboard: StrictBool = False
    """Write TensorBoard scalars into the run folder while the run goes (the chief, as each
    record is written): tensorboard --logdir results/ then shows the runs live. Needs
    tensorboardX (the 'tensorboard' extra)."""

    @model_validator(mode="after")
    def _valid(self) -> Any:
        _require(
            bool(self.dir.strip()),
            "output.dir is empty: name the folder for run folders (e.g. output.dir=results)",
        )
        _require(
            "/" not in self.run_name and not self.run_name.startswith("."),
            "output.run_name is a folder name, not a path (no '/', no leading '.')",
        )
        _require(
            len(self.run_name.encode()) <= MAX_RUN_NAME,
            f"output.run_name is {len(self.run_name.encode())} bytes long; at most "
            f"{MAX_RUN_NAME} fit a folder name",
        )
        return self


class Config(BaseModel):
    model_config = SECTION

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
                if reasons:
                    raise ValueError("; ".join(reasons))
        return self
