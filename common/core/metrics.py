"""One metrics schema for both frameworks: JSON Lines records, validated when written and read.

A run folder holds `metrics.jsonl`, written by the chief only:
  run_start  once: provenance (framework, versions, strategy, world, hosts, devices, config,
             config hash, git commit, seed, time)
  resume     after run_start when a launch goes on from a checkpoint: its epoch and folder
  step       optional, every train.log_every_steps steps: global mean loss
  epoch      once per epoch: global means, timings and what their clocks covered, throughput,
             step-time percentiles, peak memory of every rank and what it counts
  run_end    once: status success|failed|aborted, totals, time to target accuracy
Every record is one `write` of a whole line followed by a flush, so a crash leaves whole lines
(at worst one truncated last line, which the reader reports by file and line number).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
# The sections every resolved config has (common.core.config.Config).
CONFIG_SECTIONS = ("data", "model", "optim", "train", "dist", "output", "torch", "tf")
METRICS_FILENAME = "metrics.jsonl"
STATUSES = ("success", "failed", "aborted")
# A diverged run is a real outcome: its losses may be NaN or infinite; nothing else may.
NON_FINITE_ALLOWED = ("train_loss", "val_loss", "loss")

_NUMBER = (int, float)
_NULLABLE_NUMBER = (int, float, type(None))

# field -> accepted Python types; every field listed is required.
SCHEMA: dict[str, dict[str, tuple[type, ...]]] = {
    "run_start": {
        "schema_version": (int,),
        "time": (str,),
        "run_id": (str,),
        "framework": (str,),
        "framework_version": (str,),
        "versions": (dict,),
        "strategy": (str,),
        "model": (str,),
        "dataset": (str,),
        "precision": (str,),
        "world_size": (int,),
        "global_batch_size": (int,),
        "launcher": (str,),
        "hosts": (list,),
        "device_type": (str,),
        "devices": (list,),
        "config": (dict,),
        "config_hash": (str,),
        "git_commit": (str, type(None)),
        "seed": (int,),
    },
    "resume": {
        "time": (str,),
        "epoch": (int,),
        "checkpoint": (str,),
    },
    "step": {
        "epoch": (int,),
        "step": (int,),
        "loss": _NUMBER,
        "lr": _NUMBER,
    },
    "epoch": {
        "time": (str,),
        "epoch": (int,),
        "train_loss": _NUMBER,
        "val_loss": _NUMBER,
        "val_accuracy": _NUMBER,
        "lr": _NUMBER,
        "steps": (int,),
        "samples": (int,),
        "train_time_s": _NUMBER,
        "train_clock": (str,),
        "eval_time_s": _NUMBER,
        "samples_per_s": _NUMBER,
        "step_time_p50_s": _NUMBER,
        "step_time_p90_s": _NUMBER,
        "elapsed_s": _NUMBER,
        "memory": (list,),
    },
    "run_end": {
        "time": (str,),
        "status": (str,),
        "epochs_completed": (int,),
        "total_time_s": _NUMBER,
        "final_val_accuracy": _NULLABLE_NUMBER,
        "best_val_accuracy": _NULLABLE_NUMBER,
        "target_accuracy": _NUMBER,
        "time_to_target_s": _NULLABLE_NUMBER,
        "error": (str, type(None)),
    },
}

# Fields added after version 1 was published: the suite writes them always, a reader checks
# them where present, so that files written before them stay readable.
ADDED: dict[str, dict[str, tuple[type, ...]]] = {
    "run_start": {"numerics": (dict,), "threads": (dict,), "model_params": (int,)},
    "epoch": {
        "replicas_in_sync": (bool, type(None)),
        "loss_scale": (list, type(None)),
        "skipped_steps": (list, type(None)),
        "first_step_s": _NULLABLE_NUMBER,
        "flops_per_sample": (int,),
        "peak_flops": _NUMBER,
        "mfu": _NULLABLE_NUMBER,
    },
}

MEMORY_ADDED: dict[str, tuple[type, ...]] = {
    "reserved_peak_bytes": (int, type(None)),
    "baseline_bytes": (int,),  # before the model was built (common.core.memory.BASELINE_AT)
    "peak_above_baseline_bytes": (int,),  # peak_bytes - baseline_bytes, at least 0
}

# One entry of an epoch record's "memory" list: one rank's peak and its exact state bytes.
MEMORY_SCHEMA: dict[str, tuple[type, ...]] = {
    "rank": (int,),
    "peak_bytes": (int,),
    "peak_counts": (str,),  # what peak_bytes measures, e.g. "process peak RSS"
    "param_bytes": (int,),  # parameters this rank holds (a shard under FSDP)
    "grad_bytes": (int,),
    "optim_bytes": (int,),  # optimizer state this rank holds
}


class MetricsError(ValueError):
    """A record breaks the schema; the message names file, line and field where known."""


def _type_names(types: tuple[type, ...]) -> str:
    return " or ".join("null" if t is type(None) else t.__name__ for t in types)


def _check_fields(record: dict, spec: dict[str, tuple[type, ...]], where: str) -> None:
    for name, types in spec.items():
        if name not in record:
            raise MetricsError(f"{where}: field '{name}' is missing")
        value = record[name]
        if isinstance(value, bool) and bool not in types:
            raise MetricsError(f"{where}: field '{name}' must be {_type_names(types)}, got bool")
        if not isinstance(value, types):
            raise MetricsError(
                f"{where}: field '{name}' must be {_type_names(types)}, "
                f"got {type(value).__name__} {value!r}"
            )
        if isinstance(value, float) and not math.isfinite(value) and name not in NON_FINITE_ALLOWED:
            raise MetricsError(f"{where}: field '{name}' is {value}, expected a finite number")


def validate(record: Any, where: str = "record") -> None:
    """Raise MetricsError unless `record` is a valid record of a known type."""
    if not isinstance(record, dict):
        raise MetricsError(f"{where}: a record is a JSON object, got {type(record).__name__}")
    kind = record.get("record")
    if kind not in SCHEMA:
        raise MetricsError(
            f"{where}: field 'record' is {kind!r}, expected one of {', '.join(SCHEMA)}"
        )
    _check_fields(record, SCHEMA[kind], f"{where} ({kind})")
    added = {name: types for name, types in ADDED.get(kind, {}).items() if name in record}
    _check_fields(record, added, f"{where} ({kind})")
    if kind == "run_start":
        missing = [
            name for name in CONFIG_SECTIONS if not isinstance(record["config"].get(name), dict)
        ]
        if missing:
            raise MetricsError(
                f"{where}: field 'config' lacks the section(s) {', '.join(missing)}: it is not "
                "a resolved config"
            )
    if kind == "run_start" and record["schema_version"] != SCHEMA_VERSION:
        raise MetricsError(
            f"{where}: field 'schema_version' is {record['schema_version']}, this reader "
            f"understands version {SCHEMA_VERSION}"
        )
    if kind == "run_end" and record["status"] not in STATUSES:
        raise MetricsError(
            f"{where}: field 'status' is {record['status']!r}, expected one of {STATUSES}"
        )
    if kind == "epoch":
        for index, entry in enumerate(record["memory"]):
            if not isinstance(entry, dict):
                raise MetricsError(f"{where}: field 'memory[{index}]' must be an object")
            _check_fields(entry, MEMORY_SCHEMA, f"{where} (epoch) memory[{index}]")
            added = {name: t for name, t in MEMORY_ADDED.items() if name in entry}
            _check_fields(entry, added, f"{where} (epoch) memory[{index}]")


class MetricsWriter:
    """Appends validated records to a JSON Lines file, one whole line per write, flushed."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict) -> dict:
        validate(record, where=str(self.path))
        self._file.write(json.dumps(record, allow_nan=True) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        return record

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass
class ScanResult:
    records: list[dict]
    problems: list[str]  # "file:line: what is wrong", in file order


def scan(path: str | Path) -> ScanResult:
    """Read every valid record of a metrics file and list what is wrong with the rest."""
    path = Path(path)
    if not path.is_file():
        return ScanResult([], [f"{path}: file is missing"])
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as error:
        return ScanResult([], [f"{path}: cannot be read: {error}"])
    records, problems = [], []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        is_last = number == len(lines)  # a last line with no newline was cut mid-write
        try:
            record = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            problems.append(
                f"{path}:{number}: not UTF-8 text ({error.reason} at byte {error.start})"
            )
            continue
        except RecursionError:
            problems.append(f"{path}:{number}: JSON nested too deeply to be a record")
            continue
        except ValueError as error:
            what = "truncated last line (no newline at its end)" if is_last else error
            problems.append(f"{path}:{number}: {what}")
            continue
        try:
            validate(record, where=f"{path}:{number}")
        except MetricsError as error:
            problems.append(str(error))
            continue
        if not records and record["record"] != "run_start":
            problems.append(f"{path}:{number}: first record is {record['record']}, not run_start")
        records.append(record)
    if not records and not problems:
        problems.append(f"{path}: no records")
    return ScanResult(records, problems)


def read_metrics(path: str | Path) -> list[dict]:
    """All records of a metrics file; MetricsError at the first problem."""
    result = scan(path)
    if result.problems:
        raise MetricsError(result.problems[0])
    return result.records


def percentiles(values: Iterable[float], quantiles: Iterable[float]) -> list[float]:
    """Linear-interpolated percentiles (0..100) of `values`; NaN when there are none."""
    ordered = sorted(values)
    out = []
    for q in quantiles:
        if not ordered:
            out.append(float("nan"))
            continue
        position = (len(ordered) - 1) * q / 100.0
        low, high = math.floor(position), math.ceil(position)
        out.append(ordered[low] + (ordered[high] - ordered[low]) * (position - low))
    return out


def time_to_target(epochs: Iterable[dict], target: float) -> float | None:
    """Run time (elapsed_s) at the end of the first epoch whose val accuracy reached target."""
    for record in epochs:
        if record["val_accuracy"] >= target:
            return record["elapsed_s"]
    return None


def console_line(record: dict) -> str:
    """The human line printed from the same record that is written."""
    kind = record["record"]
    if kind == "epoch":
        peak = max((entry["peak_bytes"] for entry in record["memory"]), default=0)
        return (
            f"epoch {record['epoch']:>3} | train loss {record['train_loss']:.4f} | "
            f"val loss {record['val_loss']:.4f} acc {record['val_accuracy']:.4f} | "
            f"train {record['train_time_s']:.2f}s eval {record['eval_time_s']:.2f}s | "
            f"{record['samples_per_s']:,.0f} samples/s | peak {peak / 2**20:,.0f} MiB/rank"
        )
    if kind == "step":
        return f"step {record['step']:>6} | loss {record['loss']:.4f} | lr {record['lr']:.3g}"
    if kind == "run_start":
        return (
            f"run {record['run_id']}: {record['framework']} {record['framework_version']} "
            f"{record['strategy']} x{record['world_size']} on {record['device_type']}, "
            f"{record['model']}, global batch {record['global_batch_size']}, "
            f"config {record['config_hash']}"
        )
    if kind == "resume":
        return f"resume from {record['checkpoint']} (after epoch {record['epoch']})"
    target = record["time_to_target_s"]
    reached = f"{target:.1f}s" if target is not None else "not reached"
    line = (
        f"run {record['status']}: {record['epochs_completed']} epochs in "
        f"{record['total_time_s']:.1f}s, best acc {record['best_val_accuracy']}, "
        f"time to {record['target_accuracy']:.3f}: {reached}"
    )
    return line + (f" | error: {record['error']}" if record["error"] else "")
