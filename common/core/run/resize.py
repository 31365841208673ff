"""What a checkpoint may load into besides its own world size and strategy: another world size
where the strategy reshards, another strategy where the new one loads the old one's checkpoints
(`Strategy.reshards`, `Strategy.loads_from`), and never another global batch."""

from __future__ import annotations

from typing import Any

from common.core.config import strategies

# How the parameters are laid out over the ranks: free to change where the checkpoint loads
# into the new layout (`changes`: another world size, a strategy of `Strategy.loads_from`).
LAYOUT = ("torch.strategy", "torch.hsdp_shard_size")


def changes(
    saved: dict[str, Any], current: dict[str, Any], old: dict[str, Any], new: dict[str, Any]
) -> list[str]:
    """Why a checkpoint may not load into another strategy or at another world size; empty
    where it may (`Strategy.loads_from`, `Strategy.reshards`, a global batch that stays)."""
    framework = current["framework"]
    was, now = saved.get("strategy"), current["strategy"]
    entry = strategies.of(framework).get(now)
    found = []
    if was != now and (entry is None or was not in entry.loads_from):
        pairs = [
            f"{s.name} from {', '.join(s.loads_from)}"
            for s in strategies.STRATEGIES
            if s.loads_from
        ]
        found.append(
            f"strategy: {was!r} in the checkpoint, {now!r} now (a checkpoint loads into "
            "another strategy only where DCP holds the same whole tensors under the same "
            f"names: {'; '.join(pairs)})"
        )
    before, after = saved.get("world_size"), current["world_size"]
    if before == after:
        return found
    if entry is not None and not entry.reshards:
        found.append(
            f"world_size: {before!r} in the checkpoint, {after!r} now ({framework}.strategy="
            f"{now} runs one process; resume with a strategy that reshards, e.g. ddp)"
        )
    if new.get("train.batch_mode") == "per_rank" or old.get("train.batch_mode") == "per_rank":
        size = new.get("train.batch_size")
        found.append(
            f"world_size: {before!r} in the checkpoint, {after!r} now with "
            f"train.batch_mode=per_rank: the global batch would go from {size} x {before} to "
            f"{size} x {after}, and the loss of a step would mean another thing; a run that "
            "changes size keeps its global batch (train.batch_mode=global)"
        )
    return found
