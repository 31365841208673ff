"""What to change when a run does not fit the device at N (`compare.py --project N
--device-memory G`): the memory levers a user reaches for first, each priced by the same plan
as the run (`memory_at_n.plan_run` with the change set), in the order of what they cost in
speed, and the first that fits named.

The levers, for a torch run (the plan follows torch's trackers):
- activation checkpointing of the model's blocks (model.activation_checkpointing=blocks),
  where the model has blocks and the run is fully sharded (the plan follows checkpointing under
  fully_shard only, `torch_impl.memory_plan.untracked`);
- fully_shard (torch.strategy=fsdp2), where the run holds a whole replica;
- both.
Each keeps the run's base and what its measured peak held above the tensors (as memory_at_n
carries them). Gradient accumulation is not among them: the plan does not price k > 1 (torch's
MemTracker refuses several forwards in a step). A lever's samples/s at N is the projection's
for a run of the results made with that change (same model, that strategy and checkpointing),
where there is one; it is not derived from the run that does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.models import zoo
from common.models.config import ModelConfig
from common.projection import memory_at_n, step_model
from common.report.runs import RecordedRun

CHECKPOINTING = "model.activation_checkpointing=blocks"
SHARDED = "torch.strategy=fsdp2"
FULLY_SHARDED = ("fsdp2", "hsdp")


@dataclass(frozen=True)
class Lever:
    label: str  # the run that does not fit
    world: int
    change: str  # the settings, as --set takes them, space-separated
    total_bytes: int | None  # a rank's whole memory with the change, as memory_at_n's total
    fits: bool | None
    refused: str = ""  # why the plan does not price it
    samples_s: tuple[float, float] | None = None  # projected (no overlap, full) from a run of it


def _model(run: RecordedRun) -> ModelConfig:
    return ModelConfig.model_validate(run.start.config.get("model", {}))


def candidates(run: RecordedRun) -> list[list[str]]:
    """The changes to price for `run`, cheapest in speed first; none for TensorFlow (its MWMS
    holds a whole replica on every worker, and the plan prices it as DDP's replica)."""
    if run.start.framework != "torch":
        return []
    model = _model(run)
    blocks = bool(zoo.blocks(zoo.describe(model))) and model.activation_checkpointing == "none"
    sharded = run.start.strategy in FULLY_SHARDED
    found = []
    if blocks and sharded:
        found.append([CHECKPOINTING])
    if not sharded:
        found.append([SHARDED])
        if blocks:
            found.append([SHARDED, CHECKPOINTING])
    return found


def _made_with(run: RecordedRun, change: list[str], runs: list[RecordedRun]) -> RecordedRun | None:
    """A run of `runs` made as `run` with `change`: torch, the same model, the strategy and
    checkpointing the change sets."""
    strategy = "fsdp2" if SHARDED in change else run.start.strategy
    wanted = _model(run).model_copy(
        update={"activation_checkpointing": "blocks" if CHECKPOINTING in change else "none"}
    )
    for other in runs:
        if (other.start.framework, other.start.strategy) == ("torch", strategy):
            if _model(other) == wanted:
                return other
    return None


def speed_of(
    run: RecordedRun,
    change: list[str],
    world: int,
    runs: list[RecordedRun],
    projected: list[step_model.Projected],
) -> tuple[float, float] | None:
    """The projected samples/s (no overlap, full) at `world` of a run made as `run` with
    `change`, where the results hold one and the projection priced it."""
    made = _made_with(run, change, runs)
    for row in projected:
        if made is not None and row.label == made.label and row.world == world:
            return row.samples_s_low, row.samples_s_high
    return None


def levers(
    runs: list[RecordedRun],
    rows: list[memory_at_n.MemoryRow],
    scaling: str | None,
    device: int,
    projected: list[step_model.Projected],
) -> list[Lever]:
    """Every candidate change of every run with a row that does not fit `device` bytes, at
    those rows' worker counts."""
    found = []
    for run in runs:
        short = {row.world: row for row in rows if row.label == run.label and row.fits is False}
        if not short:
            continue
        for change in candidates(run):
            planned = memory_at_n.plan_run(
                run, sorted(short), scaling or memory_at_n.own_scaling(run), change
            )
            for entry in planned:
                row = short.get(entry["world"])
                if row is None:
                    continue
                peak = entry.get("peak")
                total = None if peak is None else row.base_bytes + peak + (row.above_bytes or 0)
                speed = speed_of(run, change, row.world, runs, projected)
                found.append(
                    Lever(
                        label=run.label,
                        world=row.world,
                        change=" ".join(change),
                        total_bytes=total,
                        fits=None if total is None else memory_at_n.fits(total, device),
                        refused=entry.get("refused", ""),
                        samples_s=speed,
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
                f"{lever.samples_s[0]:,.0f} .. {lever.samples_s[1]:,.0f} samples/s projected"
                if lever.samples_s
                else "samples/s: no projected run of it among the results"
            )
            size = f"{lever.total_bytes / 2**20:,.1f} MiB"
            out.append(f"    --set {lever.change}: {size}, {verdict}; {speed}")
        if first is None:
            out.append("    none of them fits: more workers, or a smaller per-rank batch")
    out.append(
        "  * gradient accumulation is not priced: torch's MemTracker refuses several forwards "
        "in one step; TensorFlow runs get no lever (MWMS holds a whole replica everywhere)"
    )
    return out
