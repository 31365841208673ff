"""The metrics schema: one pydantic model per record of a run's `metrics.jsonl`, JSON Lines
written by the chief only.

  RunStart  once per launch: provenance (framework, versions, strategy, world, hosts, devices,
            config and its hash, git commit, seed, numerics, threads)
  Resume    after run_start when a launch goes on from a checkpoint
  Step      every train.log_every_steps steps, optional: the global mean loss
  Epoch     once per epoch: means, timings, throughput, step-time percentiles, every rank's
            memory, replica agreement, MFU
  RunEnd    once per launch: status, totals, time to target accuracy

Each field says what it means and its unit (`doc`); the JSON Schema (docs/metrics.schema.json)
and the reader's checks are generated from these classes. A field marked `added` came after
version 1: the suite always writes it, and a reader accepts files written before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import StrictFloat, StrictInt

from common.core.config import strategies
from common.core.records.entries import CallSize, StepSplit, TrafficEntry
from common.core.records.fields import Fields, doc

SCHEMA_VERSION = 1
METRICS_FILENAME = "metrics.jsonl"
Status = Literal["success", "failed", "aborted", "diverged"]
STATUSES: tuple[str, ...] = Status.__args__  # type: ignore[attr-defined]
if TYPE_CHECKING:
    StrategyName = str
else:  # the registry's names, for the schema's enum: a new strategy needs no edit here
    StrategyName = Literal[strategies.names()]


class RunStart(Fields):
    KIND: ClassVar[str] = "run_start"
    schema_version: int = doc("version of this schema")
    time: str = doc("UTC time the record was written, ISO 8601 with milliseconds")
    run_id: str = doc("the run's name, also its folder's name")
    framework: str = doc('"torch" or "tf"')
    framework_version: str = doc("version of torch or tensorflow")
    versions: dict[str, str] = doc(
        "versions of python, numpy and the framework's libraries (CUDA, NCCL, Keras ...)"
    )
    strategy: StrategyName = doc(
        "the strategy that ran (common.core.config.strategies)", choice=True
    )
    model: str = doc("the model's name (common.models)")
    dataset: str = doc("mnist, or synthetic (data.name)")
    precision: str = doc("fp32, bf16 or fp16")
    precision_emulated: bool | None = doc(
        "true when the CPU lacks instructions for the precision and the framework emulates it "
        "(its timings measure the emulation); null on GPUs",
        added=True,
    )
    processor: str | None = doc(
        "the chief's CPU: model name, family and model number (/proc/cpuinfo)", added=True
    )
    host_cores: int | None = doc("logical CPUs of the chief's machine (os.cpu_count)", added=True)
    cpu_quota_cores: float | None = doc(
        "the cores the chief's cgroup CPU quota allows (a node of fixed size, as the SLURM test "
        "cluster's --node-cpu makes it); null without a quota",
        added=True,
    )
    world_size: int = doc("ranks (processes) in the run")
    global_batch_size: int = doc("samples per optimizer step, over all ranks")
    launcher: str = doc("single, local, torchrun, slurm, tf_config or trainjob")
    hosts: list[str] = doc("host of every rank, in rank order")
    device_type: str = doc("cpu or gpu")
    devices: list[str] = doc("node:device type:device name of every rank, in rank order")
    config: dict[str, Any] = doc("the resolved config, every section and key")
    config_hash: str = doc("first 12 hex digits of the SHA-256 of the canonical config JSON")
    git_commit: str | None = doc("the suite's commit, '-dirty' when changed; null outside git")
    seed: int = doc("train.seed")
    numerics: dict[str, Any] | None = doc(
        "what the precision means here: param_dtype, compute_dtype, grad_reduce_dtype, "
        "optimizer_state_dtype, loss_scaling, tf32 (asked) and tf32_effective (on a GPU), how",
        added=True,
    )
    threads: dict[str, int] | None = doc(
        "the chief's intra_op and inter_op thread counts (the same rule on both sides: the "
        "rank's share of its cores, common.core.config.devices)",
        added=True,
    )
    model_params: int | None = doc(
        "parameters of the whole model (weights and biases, common.models)", added=True
    )


class Resume(Fields):
    KIND: ClassVar[str] = "resume"
    time: str = doc("UTC time the record was written, ISO 8601 with milliseconds")
    epoch: int = doc("the epoch of the checkpoint the launch went on from")
    checkpoint: str = doc("folder of the checkpoint the launch went on from")
    step: int | None = doc(
        "global optimizer step the checkpoint was taken after: inside an epoch with "
        "train.checkpoint_every_steps or --stop-after-step",
        added=True,
    )
    world_size_before: int | None = doc(
        "world size of the launch that saved the checkpoint; where it differs from run_start's "
        "world_size, the run changed size here",
        added=True,
    )
    load_s: float | None = doc(
        "seconds the ranks took to load the checkpoint (the chief's clock; resharded where the "
        "world size changed)",
        added=True,
    )


class Step(Fields):
    KIND: ClassVar[str] = "step"
    epoch: int = doc("epoch number, from 1")
    step: int = doc("global optimizer step, from 1")
    loss: float = doc(
        "training loss of the step, mean over the global batch (cross-entropy, nats)",
        diverges=True,
    )
    lr: float = doc("learning rate of the step")


class MemoryEntry(Fields):
    rank: int = doc("the rank")
    peak_bytes: int = doc("peak memory of the rank, bytes, as peak_counts says")
    peak_counts: str = doc("what peak_bytes measures")
    param_bytes: int = doc("bytes of parameters the rank holds (a shard under FSDP)")
    grad_bytes: int = doc("bytes of gradients the rank holds")
    optim_bytes: int = doc("bytes of optimizer state the rank holds")
    reserved_peak_bytes: int | None = doc(
        "peak bytes the GPU caching allocator reserved (torch on CUDA); null where not "
        "measured (CPU, TensorFlow)",
        added=True,
        nullable=True,
    )
    baseline_bytes: int | None = doc(
        "what the rank held before the model was built, in peak_counts' measure", added=True
    )
    peak_above_baseline_bytes: int | None = doc(
        "peak_bytes less baseline_bytes: what the model, its training and evaluation added",
        added=True,
    )

    @property
    def state_bytes(self) -> int:
        """Parameters, gradients and optimizer state this rank holds."""
        return self.param_bytes + self.grad_bytes + self.optim_bytes


class Epoch(Fields):
    KIND: ClassVar[str] = "epoch"
    time: str = doc("UTC time the record was written, ISO 8601 with milliseconds")
    epoch: int = doc("epoch number, from 1")
    train_loss: float = doc(
        "mean training loss over the epoch's global batches (nats)", diverges=True
    )
    val_loss: float = doc("mean validation loss over the test set (nats)", diverges=True)
    val_accuracy: float = doc("validation accuracy, a fraction in [0, 1]")
    lr: float = doc("learning rate of the epoch's last step")
    steps: int = doc("optimizer steps in the epoch")
    samples: int = doc("training samples in the epoch (steps x global batch)")
    train_time_s: float = doc("seconds the train clock read (see train_clock)")
    train_clock: str = doc("what train_time_s covers on this framework")
    eval_time_s: float = doc("seconds of evaluation")
    samples_per_s: float = doc("samples / train_time_s")
    step_time_p50_s: float = doc("median step time, seconds")
    step_time_p90_s: float = doc("90th percentile step time, seconds")
    elapsed_s: float = doc("seconds of the run's epoch loop so far, earlier launches included")
    memory: list[MemoryEntry] = doc("one entry per rank")
    replicas_in_sync: bool | None = doc(
        "every rank holds the same weights after the epoch (integer sums of the weights' bit "
        "patterns equal); null where ranks hold shards (FSDP)",
        added=True,
        nullable=True,
    )
    loss_scale: list[StrictFloat] | None = doc(
        "every rank's fp16 loss scale after the epoch; null without loss scaling",
        added=True,
        nullable=True,
    )
    skipped_steps: list[StrictInt] | None = doc(
        "every rank's optimizer steps skipped on overflow in the epoch; null without loss scaling",
        added=True,
        nullable=True,
    )
    first_step_s: float | None = doc(
        "seconds of the epoch's first step; in epoch 1 it holds tracing, compiling "
        "(torch.compile, XLA) and warm-up, which compare reports as its excess over the median "
        "step",
        added=True,
        nullable=True,
    )
    flops_per_sample: int | None = doc(
        "FLOPs of one training sample, 6 x the forward multiply-accumulates of the conv and "
        "dense layers (common.models)",
        added=True,
    )
    peak_flops: float | None = doc(
        "FLOP/s: the sum over ranks of each rank's measured GEMM peak at the run's precision "
        "(common.core.measure.peak, cached per host)",
        added=True,
    )
    mfu: float | None = doc(
        "model FLOPs utilization: samples_per_s x flops_per_sample / peak_flops",
        added=True,
        nullable=True,
    )
    traffic: list[TrafficEntry] | None = doc(
        "the collectives the chief issued, by phase and kind, counted from the framework's own "
        "calls in one real training step (the second of the launch's first epoch, whose time "
        "then holds the profiler's) and that epoch's evaluation pass (torch: its profiler's "
        "c10d ops; TensorFlow: the collective ops of the graphs it ran), beside what the "
        "strategy registry expects; the same in every epoch record of the launch; null for "
        "one process",
        added=True,
        nullable=True,
    )
    step_split: StepSplit | None = doc(
        "where the time of the step whose traffic was counted went (the framework's profiler; "
        "with output.split_steps=N, torch, the one of median wall time among it and the N - 1 "
        "after it): math, the sharding wrapper's work and collectives, which the projection "
        "scales apart; the same in every epoch record of the launch; null for one process and "
        "on a GPU (its kernels run beside the host's profile)",
        added=True,
        nullable=True,
    )
    cpu_time_s: float | None = doc(
        "CPU seconds the chief's process used (every thread: the backend's collective threads "
        "too) while the epoch trained, its pauses included: over train_time_s, the cores it "
        "kept busy",
        added=True,
        nullable=True,
    )
    quota_throttled: float | None = doc(
        "of the periods of the chief's cgroup CPU quota (cpu_quota_cores; on the SLURM test "
        "cluster its node's) in which the group ran while the epoch trained, the fraction in "
        "which it ran out of quota (cpu.stat): near 1, the CPU held the step, not the links; "
        "null without a quota",
        added=True,
        nullable=True,
    )


class RunEnd(Fields):
    KIND: ClassVar[str] = "run_end"
    time: str = doc("UTC time the record was written, ISO 8601 with milliseconds")
    status: Status = doc(
        "success; failed; aborted (stopped on purpose: a signal, --stop-after-epoch, "
        "preemption); diverged (a train or val loss became NaN or infinite: the run went on to "
        "its end, or stopped there with train.stop_on_divergence)",
        choice=True,
    )
    epochs_completed: int = doc("epochs with a record, earlier launches included")
    total_time_s: float = doc(
        "seconds of the run, earlier launches up to their checkpoint included"
    )
    final_val_accuracy: float | None = doc("val_accuracy of the last epoch, a fraction")
    best_val_accuracy: float | None = doc("the highest val_accuracy, a fraction")
    target_accuracy: float = doc("train.target_accuracy, a fraction")
    time_to_target_s: float | None = doc(
        "elapsed_s when val_accuracy first reached target_accuracy; null if never"
    )
    error: str | None = doc("why the run failed or stopped; null on success")
    diverged_at_epoch: int | None = doc(
        "the first epoch whose train or val loss was NaN or infinite; null if none", added=True
    )


Record = RunStart | Resume | Step | Epoch | RunEnd
KINDS: dict[str, type[Record]] = {
    kind.KIND: kind for kind in (RunStart, Resume, Step, Epoch, RunEnd)
}
# The records' entries (objects in their lists), each a definition of the JSON Schema.
ENTRIES: tuple[type[Fields], ...] = (MemoryEntry, TrafficEntry, CallSize, StepSplit)
# The sections every resolved config has (common.core.config.config.Config).
CONFIG_SECTIONS = ("data", "model", "optim", "train", "dist", "output", "torch", "tf")


@dataclass(frozen=True, slots=True)
class Launch:
    """One launch's records in a metrics file: its run_start, then what it wrote up to the
    next launch's (a resumed run holds several)."""

    start: RunStart
    index: int  # of the run_start among the file's records
    records: list[Record]  # the run_start first


def launches(records: list[Record]) -> list[Launch]:
    """The launches a file's records hold, in file order; records before the first run_start
    (none in a valid file) belong to none."""
    starts = [(i, record) for i, record in enumerate(records) if isinstance(record, RunStart)]
    ends = [i for i, _ in starts[1:]] + [len(records)]
    return [
        Launch(start=start, index=i, records=records[i:end])
        for (i, start), end in zip(starts, ends, strict=True)
    ]
