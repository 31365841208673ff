"""What the later launches of a run did, from its records: restarts and size changes, said in
words (after a report's verdict) and as marks on the step-loss plot."""

from __future__ import annotations

from common.core.records.records import Record, Resume, RunEnd, Step, launches


def history(records: list[Record]) -> list[str]:
    """Each later launch: where it went on from, at which size and strategy, and why the launch
    before it ended."""
    found = launches(records)
    said = []
    for before, launch in zip(found, found[1:], strict=False):
        start = launch.start
        resumed = next((r for r in launch.records if isinstance(r, Resume)), None)
        ended = next((r for r in before.records if isinstance(r, RunEnd)), None)
        why = f"after a launch that ended {ended.status}" if ended else "after a lost launch"
        if resumed is None:
            said.append(f"started again {why}, from the beginning")
            continue
        where = f"step {resumed.step}" if resumed.step else f"epoch {resumed.epoch}"
        was = resumed.world_size_before
        size = f", saved by {was} rank(s)" if was is not None and was != start.world_size else ""
        said.append(f"resumed at {where} as {start.strategy} x{start.world_size}{size}, {why}")
    return said


def marks(records: list[Record]) -> list[tuple[int, str]]:
    """(global step, "restart" or "x4->x2") where each later launch went on; a launch resumed
    at an epoch's end is placed at that epoch's last step."""
    found = launches(records)
    last_step = {r.epoch: r.step for r in records if isinstance(r, Step)}  # of each epoch
    placed = []
    for before, launch in zip(found, found[1:], strict=False):
        resumed = next((r for r in launch.records if isinstance(r, Resume)), None)
        step = None if resumed is None else resumed.step or last_step.get(resumed.epoch)
        if step is None:
            continue
        sizes = (before.start.world_size, launch.start.world_size)
        placed.append((step, f"x{sizes[0]}->x{sizes[1]}" if sizes[0] != sizes[1] else "restart"))
    return placed


def resized(records: list[Record]) -> str:
    """ "x4->x2" where a later launch ran at another world size, else ""."""
    sizes = list(dict.fromkeys(launch.start.world_size for launch in launches(records)))
    return "->".join(f"x{size}" for size in sizes) if len(sizes) > 1 else ""
