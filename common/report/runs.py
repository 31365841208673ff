"""What compare.py computes from validated metrics records: one summary per run, groups of runs
that may be put side by side, one row per framework x strategy x world size, and the tables.

No plotting and no framework here; `common.report.plots` draws from the same rows.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from common.core.config import TfConfig, TorchConfig
from common.core.metrics import time_to_target

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (then 1.96).
T95 = [
    float(value)
    for value in (
        "12.706 4.303 3.182 2.776 2.571 2.447 2.365 2.306 2.262 2.228 2.201 2.179 2.160 2.145 "
        "2.131 2.120 2.110 2.101 2.093 2.086 2.080 2.074 2.069 2.064 2.060 2.056 2.052 2.048 "
        "2.045 2.042"
    ).split()
]
# Config keys that say how a run was launched, recorded or analysed, not what it trained: runs
# that differ only in these are repeats of one experiment. The framework sections (torch.*,
# tf.*) are not compared across frameworks; they tell rows apart instead (`row_variant`).
NOT_COMPARED = (
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
    "torch.",
    "tf.",
)
MIB = 1024 * 1024
FRAMEWORK_DEFAULTS = {"torch": asdict(TorchConfig()), "tf": asdict(TfConfig())}


@dataclass
class Run:
    path: str
    records: list[dict]
    start: dict = field(init=False)
    epochs: list[dict] = field(init=False)
    steps: list[dict] = field(init=False)
    end: dict | None = field(init=False)

    def __post_init__(self) -> None:
        self.start = self.records[0]
        # A resumed run appends: the last record of each epoch/step and the last run_end count.
        by_epoch = {r["epoch"]: r for r in self.records if r["record"] == "epoch"}
        by_step = {r["step"]: r for r in self.records if r["record"] == "step"}
        self.epochs = [by_epoch[number] for number in sorted(by_epoch)]
        self.steps = [by_step[number] for number in sorted(by_step)]
        ends = [r for r in self.records if r["record"] == "run_end"]
        self.end = ends[-1] if ends else None

    @property
    def label(self) -> str:
        return f"{self.start['framework']} {self.start['strategy']} x{self.start['world_size']}"

    @property
    def layout(self) -> str:
        """nodes x ranks per node and the launcher, e.g. "2x1 slurm": runs of other layouts
        are other measurements (a network between the ranks, or none)."""
        hosts, world = self.start["hosts"], self.start["world_size"]
        per_node = [hosts.count(host) for host in dict.fromkeys(hosts)] if hosts else [world]
        shape = (
            f"{len(per_node)}x{per_node[0]}"
            if len(set(per_node)) == 1
            else "+".join(map(str, per_node))
        )
        return f"{shape} {self.start['launcher']}"

    @property
    def identity(self) -> tuple[str, str]:
        """(run_id, time of its first start): the same for copies of one run's file."""
        return self.start["run_id"], self.start["time"]

    def comparable(self) -> dict:
        """What the run trained: its config without the NOT_COMPARED keys, plus precision and
        dataset. Runs whose `comparable` are equal may be put side by side."""
        flat = flatten(self.start["config"])
        kept = {k: v for k, v in flat.items() if not k.startswith(NOT_COMPARED)}
        return {"dataset": self.start["dataset"], "precision": self.start["precision"], **kept}

    def group_key(self) -> dict:
        """The readable part of `comparable`, for a group's heading."""
        flat = self.comparable()
        batch, mode = flat.get("train.batch_size"), flat.get("train.batch_mode")
        params = self.start.get("model_params")
        return {
            "model": self.start["model"] + (f" ({params / 1e6:.3g}M params)" if params else ""),
            "dataset": self.start["dataset"],
            "train samples": flat.get("data.train_limit") or "all",
            "precision": self.start["precision"],
            "optimizer": flat.get("optim.name"),
            "epochs": flat.get("train.epochs"),
            "batch": f"{batch} per rank" if mode == "per_rank" else f"{batch} global",
        }

    def row_variant(self) -> str:
        """The framework section's settings that differ from their defaults (not the strategy),
        e.g. "cpu_offload=True": runs that differ in them get rows of their own."""
        section = self.start["framework"]
        used = self.start["config"].get(section)
        defaults = FRAMEWORK_DEFAULTS.get(section, {})
        if not isinstance(used, dict):
            return ""
        return ", ".join(
            f"{key}={value}"
            for key, value in sorted(used.items())
            if key != "strategy" and defaults.get(key) != value
        )

    def summary(self, target: float | None = None) -> dict:
        """Numbers of this run. Times exclude epoch 1 (warm-up, tracing) when there are more.
        `target_s`: elapsed time when val accuracy first reached `target` (default: the run's
        own train.target_accuracy), from the epoch records."""
        if target is None:
            target = self.end["target_accuracy"] if self.end else 1.0
        timed = self.epochs[1:] if len(self.epochs) > 1 else self.epochs
        last = self.epochs[-1] if self.epochs else None
        memory = last["memory"] if last else []
        return {
            "epoch_s": statistics.median(e["train_time_s"] for e in timed) if timed else None,
            "samples_s": statistics.median(e["samples_per_s"] for e in timed) if timed else None,
            "eval_s": statistics.median(e["eval_time_s"] for e in timed) if timed else None,
            "mfu": median_of(e.get("mfu") for e in timed),
            "warmup_s": _warmup(self.epochs[0]) if self.epochs else None,
            "first_epoch_only": len(self.epochs) == 1,
            "peak_mib": max(m["peak_bytes"] for m in memory) / MIB if memory else None,
            "above_mib": max(m["peak_above_baseline_bytes"] for m in memory) / MIB
            if memory and "peak_above_baseline_bytes" in memory[0]
            else None,
            "peak_counts": memory[0]["peak_counts"] if memory else "",
            "state_mib": max(m["param_bytes"] + m["grad_bytes"] + m["optim_bytes"] for m in memory)
            / MIB
            if memory
            else None,
            "final_acc": last["val_accuracy"] if last else None,
            "best_acc": max(e["val_accuracy"] for e in self.epochs) if self.epochs else None,
            "target_s": time_to_target(self.epochs, target),
            "status": self.end["status"] if self.end else "unfinished",
        }


def _warmup(first_epoch: dict) -> float | None:
    """Epoch 1's first step beyond a typical step: tracing, compiling, warm-up."""
    first = first_epoch.get("first_step_s")
    return None if first is None else max(0.0, first - first_epoch["step_time_p50_s"])


def median_of(values) -> float | None:
    """The median of the values that are not None; None if there are none."""
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def group_runs(runs: list[Run]) -> tuple[list[tuple[dict, list[Run]]], list[str]]:
    """Runs that trained the same thing (equal `Run.comparable`), largest group first. Each
    group's key is its readable summary plus every config key in which the groups differ; one
    note per extra group says how it differs from the first."""
    groups: dict[str, tuple[dict, list[Run]]] = {}
    for run in runs:
        comparable = run.comparable()
        key = json.dumps(comparable, sort_keys=True, default=str)
        groups.setdefault(key, (comparable, []))[1].append(run)
    ordered = sorted(groups.values(), key=lambda group: -len(group[1]))
    names = sorted({name for comparable, _ in ordered for name in comparable})
    differing = [name for name in names if len({repr(c.get(name)) for c, _ in ordered}) > 1]
    keyed = [
        ({**members[0].group_key(), **{n: comparable.get(n) for n in differing}}, members)
        for comparable, members in ordered
    ]
    notes = []
    first = ordered[0][0] if ordered else {}
    for comparable, members in ordered[1:]:
        differs = ", ".join(
            f"{name} {comparable.get(name)} vs {first.get(name)}"
            for name in differing
            if comparable.get(name) != first.get(name)
        )
        notes.append(
            f"{len(members)} run(s) ({', '.join(r.label for r in members)}) are not "
            f"put beside the first group: {differs}"
        )
    return keyed, notes


def flatten(config: object, prefix: str = "") -> dict:
    """{"train": {"epochs": 3}} -> {"train.epochs": 3}; whatever the file holds."""
    if not isinstance(config, dict):
        return {prefix.rstrip("."): config} if prefix else {}
    flat: dict = {}
    for key, value in config.items():
        flat.update(
            flatten(value, f"{prefix}{key}.")
            if isinstance(value, dict)
            else {f"{prefix}{key}": value}
        )
    return flat


def interval(values: list[float]) -> tuple[float | None, float | None, float | None, int]:
    """(median, low, high, n used) with a 95% t-interval of the mean; from 5 values on the
    fastest and slowest are dropped first (as MLPerf does). One value: no interval."""
    values = sorted(v for v in values if v is not None)
    if len(values) >= 5:
        values = values[1:-1]
    if not values:
        return None, None, None, 0
    middle = statistics.median(values)
    if len(values) < 2:
        return middle, None, None, len(values)
    mean, spread = statistics.mean(values), statistics.stdev(values) / math.sqrt(len(values))
    t = T95[len(values) - 2] if len(values) - 1 <= len(T95) else 1.96
    # Throughputs and times are positive: a wide interval is cut at 0, not shown below it.
    return middle, max(0.0, mean - t * spread), mean + t * spread, len(values)


def rows_for(runs: list[Run], target: float | None = None) -> list[dict]:
    """One row per framework x strategy x world size x layout (1-worker baseline first within
    each framework); repeats are folded into medians. `target`: the accuracy for `target_s`.
    Where one framework x strategy x world ran in several layouts, the strategy names it."""
    cells: dict[tuple, list[Run]] = {}
    for run in runs:
        start = run.start
        strategy = start["strategy"] + (f" ({run.row_variant()})" if run.row_variant() else "")
        cell = (start["framework"], strategy, start["world_size"], run.layout)
        cells.setdefault(cell, []).append(run)
    shared = {cell[:3] for cell in cells if sum(other[:3] == cell[:3] for other in cells) > 1}
    rows = []
    for (framework, strategy, world, layout), members in sorted(
        cells.items(), key=lambda item: (item[0][0], item[0][2], item[0][1], item[0][3])
    ):
        summaries = [run.summary(target) for run in members]
        if (framework, strategy, world) in shared:
            strategy = f"{strategy} [{layout}]"
        row = {"framework": framework, "strategy": strategy, "world": world, "runs": len(members)}
        row["layout"] = layout
        row["folders"] = [str(Path(run.path).parent) for run in members]
        for name in ("epoch_s", "samples_s"):
            middle, low, high, used = interval([s[name] for s in summaries])
            row.update({name: middle, f"{name}_low": low, f"{name}_high": high})
        kept = (
            "eval_s",
            "mfu",
            "warmup_s",
            "peak_mib",
            "above_mib",
            "state_mib",
            "final_acc",
            "best_acc",
            "target_s",
        )
        for name in kept:
            values = [s[name] for s in summaries if s[name] is not None]
            row[name] = statistics.median(values) if values else None
        row["peak_counts"] = summaries[0]["peak_counts"]
        row["first_epoch_only"] = any(s["first_epoch_only"] for s in summaries)
        row["status"] = ",".join(sorted({s["status"] for s in summaries}))
        rows.append(row)
    add_efficiency(rows)
    return rows


def add_efficiency(rows: list[dict]) -> None:
    """Scaling efficiency S_N / (N * S_1) against the same framework's 1-worker row (the same
    strategy if it ran on one worker, else that framework's other 1-worker run). With a global
    batch this is strong scaling; with a per-rank batch, weak scaling."""
    for row in rows:
        ones = [r for r in rows if r["framework"] == row["framework"] and r["world"] == 1]
        same = [r for r in ones if r["strategy"] == row["strategy"]]
        base = (same or ones or [None])[0]
        ok = base and base["samples_s"] and row["samples_s"]
        row["efficiency"] = row["samples_s"] / (row["world"] * base["samples_s"]) if ok else None
        row["baseline"] = f"{base['strategy']} x1" if ok else ""
