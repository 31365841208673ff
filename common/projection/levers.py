"""What to change when a run does not fit the device at N (`compare.py --project N
--device-memory G`): the levers a user reaches for first, each priced by the same plan as the
run (`memory_at_n.plan_runs` with the change set), cheapest in speed first, and the first that
fits named: gradient accumulation (2, then 4 micro-batches) where the run holds a replica;
checkpointing the model's blocks where it is fully sharded; fully_shard where a torch run holds
a replica; fully_shard with checkpointing. Each keeps the run's base and what its peak held
above the tensors. A lever's samples/s at N comes from a run of the results made with the
change, else from the run's own projection with what the lever changes
(`common.projection.lever_speed`); `speed_from` says which.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.models import zoo
from common.projection import lever_speed, memory_at_n, step_model
from common.report.runs import RecordedRun

ACCUMULATION = lever_speed.ACCUMULATION
CHECKPOINTING = lever_speed.CHECKPOINTING
SHARDED = "torch.strategy=fsdp2"
FULLY_SHARDED = ("fsdp2", "hsdp")
REPLICAS = ("single", "ddp", "mwms")
MICRO_BATCHES = (2, 4)


@dataclass(frozen=True)
class Lever:
    label: str  # the run that does not fit
    world: int
    change: str  # the settings, as --set takes them, space-separated
    total_bytes: int | None  # a rank's whole memory with the change, as memory_at_n's total
    fits: bool | None
    refused: str = ""  # why the plan does not price it
    samples_s: tuple[float, float] | None = None  # projected (no overlap, full)
    speed_from: str = ""  # where samples_s comes from, or why there is none


def candidates(run: RecordedRun) -> list[list[str]]:
    """The changes to price for `run`, cheapest in speed first: accumulation on a replica
    (its collectives stay once per optimizer step), then checkpointing and fully_shard, for a
    torch run (TensorFlow has no sharding strategy, and the plan follows checkpointing under
    fully_shard only)."""
    model = lever_speed.model_of(run)
    found = []
    if run.start.strategy in REPLICAS and run.micro_batches == 1:
        found += [[f"{ACCUMULATION}{k}"] for k in MICRO_BATCHES]
    if run.start.framework != "torch":
        return found
    blocks = bool(zoo.blocks(zoo.describe(model))) and model.activation_checkpointing == "none"
    sharded = run.start.strategy in FULLY_SHARDED
    if blocks and sharded:
        found.append([CHECKPOINTING])
    if not sharded:
        found.append([SHARDED])
        if blocks:
            found.append([SHARDED, CHECKPOINTING])
    return found


def _made_with(run: RecordedRun, change: list[str], runs: list[RecordedRun]) -> RecordedRun | None:
    """A run of `runs` made as `run` with `change`: its framework, model and global batch, with
    the strategy, checkpointing and micro-batches the change sets (else `run`'s)."""
    strategy = "fsdp2" if SHARDED in change else run.start.strategy
    model = lever_speed.model_of(run)
    if CHECKPOINTING in change:
        model = model.model_copy(update={"activation_checkpointing": "blocks"})
    micro = next(
        (int(c.removeprefix(ACCUMULATION)) for c in change if c.startswith(ACCUMULATION)),
        run.micro_batches,
    )
    wanted = (run.start.framework, strategy, model, micro, run.start.global_batch_size)
    for other in runs:
        start = other.start
        if (
            start.framework,
            start.strategy,
            lever_speed.model_of(other),
            other.micro_batches,
            start.global_batch_size,
        ) == wanted:
            return other
    return None


def speed_of(
    run: RecordedRun,
    change: list[str],
    world: int,
    runs: list[RecordedRun],
    projected: list[step_model.Projected],
    profile_of: lever_speed.ProfileOf | None = None,
    scaling: str | None = None,
) -> tuple[tuple[float, float] | None, str]:
    """The projected samples/s (no overlap, full) at `world` of `run` with `change`, and where
    it comes from: a run of the results made with it, as projected; else `run`'s projection
    with the change (`lever_speed.priced`) where a profile is given; (None, why) otherwise."""
    made = _made_with(run, change, runs)
    for row in projected:
        if made is not None and row.label == made.row_label and row.world == world:
            return (row.samples_s_low, row.samples_s_high), f"projected from {made.row_label}"
    if profile_of is None:
        return None, "no projected run of it among the results"
    found, said = lever_speed.priced(run, change, world, scaling, runs, profile_of)
    return found, (f"priced from {run.label}: {said}" if found else f"not priced: {said}")


def levers(
    runs: list[RecordedRun],
    rows: list[memory_at_n.MemoryRow],
    scaling: str | None,
    device: int,
    projected: list[step_model.Projected],
    profile_of: lever_speed.ProfileOf | None = None,
) -> list[Lever]:
    """Every candidate change of every run with a row that does not fit `device` bytes, at
    those rows' worker counts; `profile_of`: the link profile that prices each run."""
    found = []
    wanted = []  # (run, its rows that do not fit, its changes)
    for run in runs:
        short = {row.world: row for row in rows if row.label == run.row_label and row.fits is False}
        changes = candidates(run) if short else []
        if changes:
            wanted.append((run, short, changes))
    requests = [
        memory_at_n.PlanRequest(
            run, sorted(short), scaling or memory_at_n.own_scaling(run), changes
        )
        for run, short, changes in wanted
    ]
    for (run, short, changes), planned in zip(wanted, memory_at_n.plan_runs(requests), strict=True):
        for change in changes:
            for entry in (entry for entry in planned if entry["variant"] == " ".join(change)):
                row = short.get(entry["world"])
                if row is None:
                    continue
                peak = entry.get("peak")
                total = None if peak is None else row.base_bytes + peak + (row.above_bytes or 0)
                speed, source = speed_of(
                    run, change, row.world, runs, projected, profile_of, scaling
                )
                found.append(
                    Lever(
                        label=run.row_label,
                        world=row.world,
                        change=" ".join(change),
                        total_bytes=total,
                        fits=None if total is None else memory_at_n.fits(total, device),
                        refused=entry.get("refused", ""),
                        samples_s=speed,
                        speed_from=source,
                    )
                )
    return found


def lines(found: list[Lever], rows: list[memory_at_n.MemoryRow]) -> list[str]:
    """Per run and worker count that does not fit: each lever's total, and the first that fits."""
    if not found:
        return []
    out = ["== memory levers where a run does not fit: each change priced by the same plan"]
    for row in rows:
        mine = [lever for lever in found if (lever.label, lever.world) == (row.label, row.world)]
        if not mine:
            continue
        total = (row.total_bytes or 0) / 2**20
        out.append(f"{row.label} at {row.world} workers: {total:,.1f} MiB a rank does not fit")
        first = next((lever for lever in mine if lever.fits), None)
        for lever in mine:
            if lever.refused or lever.total_bytes is None:
                out.append(f"    --set {lever.change}: not priced: {lever.refused}")
                continue
            verdict = "fits" if lever.fits else "does not fit"
            if lever is first:
                verdict += " (the smallest change that fits)"
            speed = (
                f"{lever.samples_s[0]:,.0f} .. {lever.samples_s[1]:,.0f} samples/s "
                f"({lever.speed_from})"
                if lever.samples_s
                else f"samples/s: {lever.speed_from}"
            )
            size = f"{lever.total_bytes / 2**20:,.1f} MiB"
            out.append(f"    --set {lever.change}: {size}, {verdict}; {speed}")
        if first is None:
            out.append("    none of them fits: more workers, or a smaller per-rank batch")
    out.append(
        "  * accumulation keeps the global batch: k micro-batches a rank, the gradients "
        "exchanged once per optimizer step; fully_shard's all-gathers come once per micro-batch"
    )
    return out
