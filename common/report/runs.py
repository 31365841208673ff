"""A run as compare.py reads it back from its metrics file (`RecordedRun`): its records, what it
trained (to decide which runs stand side by side), and its numbers (`RunSummary`).

No plotting and no framework here; `common.report.rows` folds summaries into table rows.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from common.core.config.config import HOW_NOT_WHAT, is_listed
from common.core.config.config_io import flatten
from common.core.config.framework_sections import TfConfig, TorchConfig
from common.core.records.records import (
    Epoch,
    Launch,
    Record,
    Resume,
    RunEnd,
    RunStart,
    Step,
    launches,
)
from common.core.run.recorder import time_to_target
from common.core.run.resume import conflicts, identity
from common.report import launch_history

# What is not compared between runs: how they were launched, recorded or analysed, and the
# framework sections (torch.*, tf.*), which are not compared across frameworks; they tell rows
# apart instead (`row_variant`).
NOT_COMPARED = (*HOW_NOT_WHAT, "torch.", "tf.")
MIB = 1024 * 1024
FRAMEWORK_DEFAULTS = {
    "torch": TorchConfig().model_dump(mode="json"),
    "tf": TfConfig().model_dump(mode="json"),
}


def median_of(values: Iterable[float | None]) -> float | None:
    """The median of the values that are not None; None if there are none."""
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def column(
    header: str, digits: int, note: str = "", fold: str = "median", default: Any = None
) -> Any:
    """A number of one run that is also a column of the report: its header, the digits shown,
    the footnote that says what it measures (if the report's fixed notes do not), and how a
    row folds its repeats (median; interval: median with a 95% interval; row: computed from
    the rows, not the runs). A field of `RunSummary` declared with it is all a column takes:
    `common.report.rows` folds it and `common.report.render.tables` shows it."""
    return field(
        default=default, metadata={"header": header, "digits": digits, "note": note, "fold": fold}
    )


@dataclass(kw_only=True)
class RunSummary:
    """The numbers of one run. Times exclude epoch 1 (warm-up, tracing) when there are more."""

    epoch_s: float | None = column("epoch s", 3, fold="interval")
    samples_s: float | None = column("samples/s", 0, fold="interval")
    eval_s: float | None = column("eval s", 3)
    mfu: float | None = column("MFU %", 1)
    collectives: float | None = column("coll/step", 0)
    """Collectives per training step (the epoch records' traffic)."""
    sent_mb: float | None = column("MB sent/rank/step", 3)
    """MB a ring algorithm makes one rank send per training step."""
    warmup_s: float | None = column("compile s", 2)
    """Epoch 1's first step beyond its median step: tracing, compiling, warm-up."""
    efficiency: float | None = column("scaling eff %", 0, fold="row")
    """samples/s over workers x the 1-worker baseline's samples/s (`rows.add_efficiency`)."""
    peak_mib: float | None = column("peak MiB/rank", 0)
    above_mib: float | None = column("above base MiB/rank", 0)
    state_mib: float | None = column("state MiB/rank", 1)
    final_acc: float | None = column("final acc", 4)
    best_acc: float | None = column("best acc", 4)
    target_s: float | None = column("to target s", 1)
    status: str = column("status", 0, fold="join", default="")
    first_epoch_only: bool = field(default=False, metadata={"fold": "any"})
    peak_counts: str = field(default="", metadata={"fold": "first"})


@dataclass
class RecordedRun:
    """One run read back: its metrics file and its records (every launch of it)."""

    path: str
    records: list[Record]
    start: RunStart = field(init=False)
    epochs: list[Epoch] = field(init=False)
    steps: list[Step] = field(init=False)
    end: RunEnd | None = field(init=False)

    def __post_init__(self) -> None:
        first = self.records[0]
        if not isinstance(first, RunStart):
            raise ValueError(f"{self.path}: the first record is {first.KIND}, not run_start")
        self.start = first
        # A resumed run appends: the last record of each epoch/step and the last run_end count.
        by_epoch = {r.epoch: r for r in self.records if isinstance(r, Epoch)}
        by_step = {r.step: r for r in self.records if isinstance(r, Step)}
        self.epochs = [by_epoch[number] for number in sorted(by_epoch)]
        self.steps = [by_step[number] for number in sorted(by_step)]
        ends = [r for r in self.records if isinstance(r, RunEnd)]
        self.end = ends[-1] if ends else None

    @property
    def label(self) -> str:
        return f"{self.start.framework} {self.start.strategy} x{self.start.world_size}"

    @property
    def layout(self) -> str:
        """nodes x ranks per node and the launcher, e.g. "2x1 slurm": runs of other layouts
        are other measurements (a network between the ranks, or none)."""
        hosts, world = self.start.hosts, self.start.world_size
        per_node = [hosts.count(host) for host in dict.fromkeys(hosts)] if hosts else [world]
        same = len(set(per_node)) == 1
        shape = f"{len(per_node)}x{per_node[0]}" if same else "+".join(map(str, per_node))
        return f"{shape} {self.start.launcher}"

    def shared_cores(self) -> str:
        """How the ranks of a CPU run shared a host's cores when several ran on one host and
        their threads took all its cores (e.g. "2 ranks x 1 thread on 2 cores"): they then split
        the cores a 1-rank run had alone, and a scaling figure measures that, not the strategy.
        "" otherwise (GPUs, one rank per host, or cores to spare)."""
        start = self.start
        threads = start.threads.get("intra_op") if isinstance(start.threads, dict) else None
        if start.device_type != "cpu" or not start.host_cores or not isinstance(threads, int):
            return ""
        hosts = start.hosts or ["?"] * start.world_size
        ranks = max(hosts.count(host) for host in set(hosts))
        if ranks < 2 or ranks * threads < start.host_cores:
            return ""
        plural = "s" if threads > 1 else ""
        return f"{ranks} ranks x {threads} thread{plural} on {start.host_cores} cores"

    @property
    def identity(self) -> tuple[str, str]:
        """(run_id, time of its first start): the same for copies of one run's file."""
        return self.start.run_id, self.start.time

    def comparable(self) -> dict[str, Any]:
        """What the run trained: its config without the NOT_COMPARED keys, plus precision and
        dataset. Runs whose `comparable` are equal may be put side by side."""
        flat = flatten(self.start.config)
        kept = {k: v for k, v in flat.items() if not is_listed(k, NOT_COMPARED)}
        return {"dataset": self.start.dataset, "precision": self.start.precision, **kept}

    def group_key(self) -> dict[str, Any]:
        """The readable part of `comparable`, for a group's heading."""
        flat = self.comparable()
        batch, mode = flat.get("train.batch_size"), flat.get("train.batch_mode")
        params = self.start.model_params
        return {
            "model": self.start.model + (f" ({params / 1e6:.3g}M params)" if params else ""),
            "dataset": self.start.dataset,
            "train samples": flat.get("data.train_limit") or "all",
            "precision": self.start.precision,
            "optimizer": flat.get("optim.name"),
            "epochs": flat.get("train.epochs"),
            "batch": f"{batch} per rank" if mode == "per_rank" else f"{batch} global",
        }

    @property
    def micro_batches(self) -> int:
        """train.accumulation_steps: the micro-batches of each rank's batch."""
        return int(self.start.config.get("train", {}).get("accumulation_steps", 1))

    @property
    def row_label(self) -> str:
        """The label with its variant: one row's name in the projection and memory tables."""
        variant = self.row_variant()
        return f"{self.label} ({variant})" if variant else self.label

    def row_variant(self) -> str:
        """The framework section's settings that differ from their defaults (not the strategy),
        e.g. "cpu_offload=True", train.steps_per_call and train.accumulation_steps when not 1,
        model.activation_checkpointing when on, and the sizes of a run that changed size: runs
        that differ in them get rows of their own."""
        section = self.start.config.get(self.start.framework)
        defaults = FRAMEWORK_DEFAULTS.get(self.start.framework, {})
        said = []
        if isinstance(section, dict):
            said = [
                f"{key}={value}"
                for key, value in sorted(section.items())
                if key != "strategy" and defaults.get(key) != value
            ]
        train = self.start.config.get("train", {})
        for key in ("steps_per_call", "accumulation_steps"):
            said += [f"{key}={train[key]}"] if train.get(key, 1) != 1 else []
        checkpointing = self.start.config.get("model", {}).get("activation_checkpointing", "none")
        said += [f"activation_checkpointing={checkpointing}"] if checkpointing != "none" else []
        sizes = launch_history.resized(self.records)
        return ", ".join(said + ([f"resized {sizes}"] if sizes else []))

    def summary(self, target: float | None = None) -> RunSummary:
        """`target_s`: elapsed time when val accuracy first reached `target` (default: the
        run's own train.target_accuracy), from the epoch records."""
        if target is None:
            target = self.end.target_accuracy if self.end else 1.0
        timed = self.epochs[1:] if len(self.epochs) > 1 else self.epochs
        last = self.epochs[-1] if self.epochs else None
        memory = last.memory if last else []
        above = [m.peak_above_baseline_bytes for m in memory]
        return RunSummary(
            epoch_s=median_of(e.train_time_s for e in timed),
            samples_s=median_of(e.samples_per_s for e in timed),
            eval_s=median_of(e.eval_time_s for e in timed),
            mfu=median_of(e.mfu for e in timed),
            collectives=_per_step(self.epochs, "calls"),
            sent_mb=_per_step(self.epochs, "wire_bytes", 1e6),
            warmup_s=_warmup(self.epochs[0]) if self.epochs else None,
            first_epoch_only=len(self.epochs) == 1,
            peak_mib=max(m.peak_bytes for m in memory) / MIB if memory else None,
            above_mib=max(a for a in above if a is not None) / MIB
            if memory and None not in above
            else None,
            peak_counts=memory[0].peak_counts if memory else "",
            state_mib=max(m.state_bytes for m in memory) / MIB if memory else None,
            final_acc=last.val_accuracy if last else None,
            best_acc=max(e.val_accuracy for e in self.epochs) if self.epochs else None,
            target_s=time_to_target(self.epochs, target),
            status=self.end.status if self.end else "unfinished",
        )


def _per_step(epochs: list[Epoch], key: str, unit: float = 1.0) -> float | None:
    """A training step's traffic summed over its collectives (`key` of each entry), from the
    last epoch record that has it; None for one process or a file written before it."""
    counted = next((epoch.traffic for epoch in reversed(epochs) if epoch.traffic), None)
    if counted is None:
        return None
    total = sum(float(getattr(entry, key)) for entry in counted if entry.phase == "train")
    return total / unit


def _identity(start: RunStart) -> dict[str, Any]:
    return identity(
        framework=start.framework,
        strategy=start.strategy,
        world_size=start.world_size,
        config=start.config,
    )


def _mixed_launch(first: RunStart, launch: Launch) -> str | None:
    """Why `launch` is not one launch of the run `first` started; None when it is. A later
    launch must be the same run and go on from a checkpoint (a resume record before its
    epochs); within one launch epochs and steps only go up (two launches writing at once
    repeat them)."""
    start = launch.start
    if start is not first:
        resumes = any(isinstance(r, Resume) for r in launch.records)
        if start.run_id != first.run_id and not resumes:  # a copied folder resumed keeps it
            return f"run {start.run_id!r} after run {first.run_id!r}"
        # as a resume judges its checkpoint: a launch may change size (and strategy) as it may
        found = conflicts(_identity(first), _identity(start))
        if found:
            return "another config: " + "; ".join(found[:3])
        kinds = [r.KIND for r in launch.records if isinstance(r, (Resume, Epoch))]
        if kinds and kinds[0] != Resume.KIND:
            return "its epochs start again without a resume record"
    for kind, number in ((Epoch, "epoch"), (Step, "step")):
        seen = [getattr(r, number) for r in launch.records if isinstance(r, kind)]
        repeated = next((b for a, b in zip(seen, seen[1:], strict=False) if b <= a), None)
        if repeated is not None:
            return f"{number} {repeated} comes twice in one launch: two launches wrote at once"
    return None


def mixed_runs(records: list[Record], lines: list[int]) -> tuple[int, str] | None:
    """(line, why) of the first launch in a metrics file that is not a launch of the run its
    first run_start began (`_mixed_launch`); None for one run, resumed any number of times."""
    found = launches(records)
    for launch in found:
        why = _mixed_launch(found[0].start, launch)
        if why is not None:
            return lines[launch.index] if lines else launch.index + 1, why
    return None


def _warmup(first_epoch: Epoch) -> float | None:
    """Epoch 1's first step beyond a typical step: tracing, compiling, warm-up."""
    first = first_epoch.first_step_s
    return None if first is None else max(0.0, first - first_epoch.step_time_p50_s)
