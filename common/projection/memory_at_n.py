"""Memory at the projected worker counts (`compare.py --project 8,64 --device-memory 80GiB`):
what one rank of each run holds at N, whether that fits the device, and what it is made of.

A rank's whole peak is three parts, each carried to N by what it scales with: the tensors
(torch's memory trackers over a fake process group of N ranks, `torch_impl.memory_plan`, run in
a subprocess; a TensorFlow MWMS run priced as DDP's replica of its model), the base (the run's
measured `baseline_bytes`, unchanged), and what the run's measured peak held above both (the
allocator's cache, the collective library's buffers, Python's objects: unchanged, since it does
not follow the tensors; docs/communication.md, "The whole rank"). "fits" keeps MARGIN spare.
At the run's own size the total is its measured peak.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from common.report.runs import RecordedRun

UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
UNITS |= {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
TIMEOUT_S = 600  # a run's worker counts; a 100M-parameter model steps in seconds
MARGIN = 0.15  # "fits": the total and this share more, the measured rule's error and then some


def device_bytes(text: str) -> int:
    """'80GiB' -> bytes; ValueError naming the accepted form."""
    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B|B)\s*", text)
    if not found or found.group(2) not in UNITS or float(found.group(1)) <= 0:
        raise ValueError(
            f"--device-memory takes a size such as 80GiB, 40GB or 512MiB, got {text!r}"
        )
    return int(float(found.group(1)) * UNITS[found.group(2)])


@dataclass(frozen=True)
class MemoryRow:
    label: str
    world: int
    batch: int | None  # per rank at `world`
    state_bytes: int | None  # parameters, gradients and optimizer state at the peak
    peak_bytes: int | None  # every tensor at the step's peak (the tracker's total)
    base_bytes: int  # the run's measured base, carried unchanged
    total_bytes: int | None  # base + peak + above: the whole rank
    fits: bool | None  # the total and MARGIN more within the device's memory
    refused: str = ""  # why this world is not priced
    params: int | None = None  # the run's model's parameters (its place on the size axis)
    above_bytes: int | None = None  # measured above the tensors and the base, carried
    measured_bytes: int | None = None  # the run's measured peak (at its own size only)


@dataclass(frozen=True)
class LargestFit:
    """Of one strategy's runs at several model sizes: the largest that fits at `world`."""

    label: str
    world: int
    params: int | None  # the largest measured size that fits; None: none of them does
    total_bytes: int | None  # what a rank of that size holds at `world`
    next_params: int | None  # the smallest measured size above it, which does not fit


def _strategy(run: RecordedRun) -> str:
    """The torch strategy whose tracker figure prices the run (MWMS: DDP's replica)."""
    if run.start.framework == "torch":
        return run.start.strategy
    return "ddp" if run.start.world_size > 1 else "single"


def _ranks_per_node(run: RecordedRun) -> int:
    hosts = run.start.hosts or []
    return max(1, len(hosts) // max(1, len(set(hosts)))) if hosts else run.start.world_size


def _measured(run: RecordedRun) -> tuple[int, int | None]:
    """(base, whole peak) of the rank whose whole peak was the largest, in the last epoch that
    measured one; the whole peak is the caching allocator's reservation where recorded (a GPU),
    else the peak; (0, None) without memory records."""
    for epoch in reversed(run.epochs):
        entries = [entry for entry in epoch.memory if entry.baseline_bytes is not None]
        if entries:
            top = max(entries, key=lambda entry: entry.reserved_peak_bytes or entry.peak_bytes)
            return int(top.baseline_bytes or 0), int(top.reserved_peak_bytes or top.peak_bytes)
    return 0, None


def own_scaling(run: RecordedRun) -> str:
    """How the run's batch goes to other worker counts: weak for a per-rank batch, else strong."""
    per_rank = run.start.config.get("train", {}).get("batch_mode") == "per_rank"
    return "weak" if per_rank else "strong"


def fits(total: int, device: int) -> bool:
    """The total and MARGIN more within the device."""
    return total * (1 + MARGIN) <= device


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """One run's plan: its worker counts, its scaling, and each set of changes to plan too."""

    run: RecordedRun
    counts: list[int]
    scaling: str
    variants: Sequence[Sequence[str]] = ()


def plan_runs(requests: Sequence[PlanRequest]) -> list[list[dict[str, Any]]]:
    """The tracker's rows of each request (`torch_impl.memory_plan --requests`), all in one
    process: one torch start for a whole report. With variants, each row's "variant" is its
    changes space-separated (`common.projection.levers`). RuntimeError naming the tool's last
    line when it fails."""
    if not requests:
        return []
    with tempfile.TemporaryDirectory() as folder:
        lines = []
        for index, request in enumerate(requests):
            config = Path(folder) / f"config-{index}.yaml"
            config.write_text(yaml.safe_dump(request.run.start.config))
            asked = {
                "config": str(config),
                "overrides": [f"torch.strategy={_strategy(request.run)}"],
                "world": request.counts,
                "scaling": request.scaling,
                "run_world": request.run.start.world_size,
                "local_world": _ranks_per_node(request.run),
            }
            if request.variants:
                asked["variants"] = [" ".join(variant) for variant in request.variants]
            lines.append(json.dumps(asked))
        asked_file = Path(folder) / "requests.jsonl"
        asked_file.write_text("\n".join(lines) + "\n")
        command = [sys.executable, "-m", "torch_impl.memory_plan", "--requests", str(asked_file)]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=TIMEOUT_S * len(requests)
        )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        labels = ", ".join(request.run.label for request in requests)
        raise RuntimeError(f"memory at N for {labels} failed: {last}")
    found: list[list[dict[str, Any]]] = [[] for _ in requests]
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            found[row.pop("request")].append(row)
    return found


def memory_rows(
    runs: list[RecordedRun], counts: list[int], scaling: str | None, device: int | None
) -> list[MemoryRow]:
    """Every run at every count; `device`: the memory of one device in bytes (None: no
    verdict). `scaling` None takes each run's own batch mode (strong for a global batch)."""
    rows = []
    requests = [
        PlanRequest(run, sorted(set(counts) | {run.start.world_size}), scaling or own_scaling(run))
        for run in runs
    ]
    for run, planned in zip(runs, plan_runs(requests), strict=True):
        base, whole = _measured(run)
        world = run.start.world_size
        at_own = next((found.get("peak") for found in planned if found["world"] == world), None)
        # never below 0: a peak under base + tensors is a transient the mark missed
        above = None if whole is None or at_own is None else max(0, whole - base - at_own)
        for found in (found for found in planned if found["world"] in counts):
            peak = found.get("peak")
            state = None if peak is None else found["params"] + found["grads"] + found["optimizer"]
            total = None if peak is None else base + peak + (above or 0)
            rows.append(
                MemoryRow(
                    label=run.row_label,
                    world=found["world"],
                    batch=found.get("batch"),
                    state_bytes=state,
                    peak_bytes=peak,
                    base_bytes=base,
                    total_bytes=total,
                    fits=None if total is None or device is None else fits(total, device),
                    refused=found.get("refused", ""),
                    params=run.start.model_params,
                    above_bytes=above,
                    measured_bytes=whole if found["world"] == world else None,
                )
            )
    return rows


def largest_fitting(rows: list[MemoryRow]) -> list[LargestFit]:
    """For each strategy (a run label: framework, strategy, its workers) measured at two model
    sizes or more, and each worker count: the largest size that fits the device, and the
    smallest that does not. Sizes come only from the runs (the model-size axis,
    common.tools.sizes): nothing is extrapolated."""
    groups: dict[tuple[str, int], list[MemoryRow]] = {}
    for row in rows:
        if row.fits is not None and row.params is not None:
            groups.setdefault((row.label, row.world), []).append(row)
    found = []
    for (label, world), members in groups.items():
        if len({row.params for row in members}) < 2:
            continue
        fitting = [row for row in members if row.fits]
        best = max(fitting, key=lambda row: row.params or 0) if fitting else None
        floor = (best.params or 0) if best else 0
        above = [row.params for row in members if not row.fits and (row.params or 0) > floor]
        found.append(
            LargestFit(
                label=label,
                world=world,
                params=best.params if best else None,
                total_bytes=best.total_bytes if best else None,
                next_params=min((p for p in above if p is not None), default=None),
            )
        )
    return found


def largest_lines(found: list[LargestFit]) -> list[str]:
    """One sentence per strategy and worker count: where FSDP wins on memory."""
    out = []
    for fit in found:
        where = f"{fit.label} at {fit.world} workers"
        above = f"; {fit.next_params / 1e6:,.1f}M does not" if fit.next_params else ""
        if fit.params is None:
            out.append(f"{where}: none of the measured sizes fits{above}")
        else:
            held = f"{(fit.total_bytes or 0) / 2**20:,.1f} MiB a rank"
            last = "" if above else " (the largest measured)"
            out.append(f"{where}: {fit.params / 1e6:,.1f}M parameters fit{last} ({held}){above}")
    return out


def lines(rows: list[MemoryRow], device: int | None) -> list[str]:
    """The table of `rows`, in MiB, with the verdict against `device` bytes."""
    size = "" if not device else f"{device / 2**30:,.1f} GiB"
    if device and device < 2**30:
        size = f"{device / 2**20:,.1f} MiB"
    against = f" (device {size})" if size else ""
    out = [f"== memory per rank at N{against}: the whole rank, in parts"]
    header = ["run", "params", "workers", "batch", "state", "tensors", "+ base", "+ above"]
    header += ["= total", "measured", "fits"]
    wide = max([28, *(len(row.label) for row in rows)])
    out.append(
        (f"{{:>{wide}}}  {{:>8}}  {{:>7}}  {{:>5}}" + "  {:>8}" * 6 + "  {:>4}").format(*header)
    )
    for row in rows:
        params = "-" if row.params is None else f"{row.params / 1e6:,.1f}M"
        lead = f"{row.label:>{wide}}  {params:>8}  {row.world:>7}"
        if row.refused or None in (row.state_bytes, row.peak_bytes, row.total_bytes):
            out.append(f"{lead}  not priced: {row.refused}")
            continue
        fits = "-" if row.fits is None else ("yes" if row.fits else "NO")
        mib = [row.state_bytes, row.peak_bytes, row.base_bytes, row.above_bytes, row.total_bytes]
        mib.append(row.measured_bytes)
        figures = "  ".join(
            "       -" if size is None else f"{size / 2**20:>8,.1f}" for size in mib
        )
        out.append(f"{lead}  {row.batch:>5}  {figures}  {fits:>4}")
    out.append(
        "  * MiB per rank. state: parameters, gradients and optimizer state at the step's peak; "
        "tensors: every tensor there (gathered units, collective buffers, activations), "
        "torch's trackers (TensorFlow MWMS as DDP's replica, torch_impl.memory_plan); base: "
        "the run's, before the model; above: the run's measured peak less both at its own "
        "size (allocator slack, the collective library, the runtime), carried unchanged; "
        "total: the whole rank, the run table's peak MiB/rank at the run's own size "
        "(measured)"
    )
    out.append(
        f"  * fits: the total and {MARGIN:.0%} more within the device, the spare for the "
        "rule's error (docs/communication.md); on a GPU the CUDA context and NCCL's buffers "
        "lie outside the allocator's figures and so outside this total"
    )
    out.append(
        "  * the peak is a real rank's while its collectives keep pace; one whose peer lags "
        "holds a collective still in flight as well (fsdp2: up to a unit's buffers more; "
        "torch_impl.memory_check measures it), so leave that much spare"
    )
    largest = largest_lines(largest_fitting(rows))
    if largest:
        out.append("== the largest model size that fits, per strategy (of the sizes run)")
        out += [f"  {line}" for line in largest]
    return out
