"""Decisions the chief takes for every rank (`on_chief`): the run's folder, the checkpoint to go
on from. Its result, or the error it met, reaches every rank, and the ranks that only heard of
an error leave after the chief, so that a launcher names the rank that found it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from common.core.run import checkpoint_folders, resume
from common.core.train.contract import Trainer
from common.launch import exchanges

# How long a rank that only heard of the chief's error waits before it leaves with it. A launcher
# names the first rank it finds failed (it polls every common.launch.local.POLL_S), so a
# follower that left first would be named instead of the chief that found the error.
FOLLOW_S = 1.0
# What a decision on the chief may raise, so that every rank raises it too.
SHARED_ERRORS: dict[str, type[Exception]] = {
    error.__name__: error
    for error in (resume.RunRefused, checkpoint_folders.CheckpointError, RuntimeError)
}


def exchange(trainer: Trainer) -> dict[str, Any]:
    """The keyword arguments of `common.launch.exchanges` for this trainer's ranks."""
    spec = trainer.spec
    return {
        "rank": spec.rank,
        "world_size": spec.world_size,
        "all_reduce_sum": trainer.all_reduce_sum,
    }


def on_chief(trainer: Trainer, decide: Callable[[], Any]) -> Any:
    """`decide()` on the chief; its JSON-able result on every rank (collective). An error the
    chief meets in it is raised on every rank, with the chief's message."""
    outcome: dict[str, Any] = {}
    if trainer.spec.is_chief:
        try:
            outcome = {"result": decide()}
        except tuple(SHARED_ERRORS.values()) as error:
            outcome = {"error": type(error).__name__, "message": str(error)}
    outcome = json.loads(exchanges.broadcast_text(json.dumps(outcome), **exchange(trainer)))
    if "error" in outcome:
        if not trainer.spec.is_chief:  # let the chief, which found it, leave first
            time.sleep(FOLLOW_S)
        raise SHARED_ERRORS.get(outcome["error"], RuntimeError)(outcome["message"])
    return outcome["result"]
