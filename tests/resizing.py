"""Runs that change size, for the resize tests of both frameworks: one uninterrupted run that
checkpoints at a step inside its second epoch, a copy of its folder as a launch that died right
after that checkpoint, and the tolerance a resumed run's losses are held to."""

from pathlib import Path

import numpy as np

from common.core.run.checkpoint_folders import folder_name
from common.tools.failure_cost import cut_back
from tests.records import read_metrics
from tests.rounding import float32_drifts

STEPS_PER_EPOCH = 20
AT = 25  # the checkpoint: 5 steps into epoch 2
# MLP, Adam (optimizer state to reshard), no dropout (the masks are per rank), global batch 64
SETTINGS = [
    f"data.train_limit={64 * STEPS_PER_EPOCH}",
    "data.test_limit=500",
    "train.batch_size=64",
    "train.eval_batch_size=500",
    "train.epochs=2",
    "dist.timeout_s=30",
    "model.name=mlp",
    "model.dropout=false",
    "optim.name=adam",
    "optim.lr=0.001",
    "train.log_every_steps=1",
    f"train.checkpoint_every_steps={AT}",
    "train.keep_checkpoints=0",
    "output.save_model=true",
]


def died_after_checkpoint(whole: Path, to: Path) -> Path:
    """A copy of the run folder `whole` as its launch would have left it had it died right
    after the checkpoint of step AT (`common.tools.failure_cost.cut_back`)."""
    return cut_back(whole, folder_name(AT // STEPS_PER_EPOCH, AT % STEPS_PER_EPOCH), to)


def step_losses(folder: Path) -> np.ndarray:
    """The loss of every global step, the last record of each (a resumed launch's own)."""
    losses = {}
    for record in read_metrics(folder / "metrics.jsonl"):
        if record["record"] == "step":
            losses[record["step"]] = record["loss"]
    return np.array([losses[step] for step in sorted(losses)])


def tolerance() -> tuple[float, float]:
    """How far a resumed run may stray from the uninterrupted run: (its step losses,
    relative; its final weights, absolute). The same rule as the suite's other cross-world
    checks (tests/rounding.py): 4 x float32's own drift from float64 over these steps
    (another world size sums in another order), at least 1e-6."""
    overrides = [s for s in SETTINGS if s.split("=")[0].startswith(("model.", "optim.", "data.t"))]
    losses, weights = float32_drifts([*overrides, "train.batch_size=64"], 2 * STEPS_PER_EPOCH)
    return max(4 * float(losses.max()), 1e-6), max(4 * weights, 1e-6)
