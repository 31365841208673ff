"""dist.deterministic on the CPU, for either framework's program: a default run, a run with
the mode on, and the latter stopped after epoch 1 and resumed. Each side's test says how the
two runs may differ there."""

import json
from dataclasses import dataclass
from pathlib import Path

from tests.launching import runner

SETTINGS = [
    "data.train_limit=1280",
    "data.test_limit=500",
    "train.epochs=2",
    "train.checkpoint_every_epochs=1",
    "model.dropout=true",
    "dist.device=cpu",
]
STRICT = "dist.deterministic=true"


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def curve(run_dir: Path) -> list[tuple[float, float, float]]:
    """Every epoch's (train loss, val loss, val accuracy)."""
    epochs = {r["epoch"]: r for r in records(run_dir) if r["record"] == "epoch"}
    return [(e["train_loss"], e["val_loss"], e["val_accuracy"]) for _, e in sorted(epochs.items())]


@dataclass
class Runs:
    default: Path
    strict: Path  # dist.deterministic=true, uninterrupted
    resumed: Path  # the same, stopped after epoch 1 and resumed


def default_strict_and_resumed(module: str, root: Path) -> Runs:
    run = runner(module, root, warm=True)
    _, default = run("default", 0, *SETTINGS, small=False)
    _, strict = run("strict", 0, *SETTINGS, STRICT, small=False)
    run("parts", 0, *SETTINGS, STRICT, small=False, extra=["--stop-after-epoch", "1"])
    _, resumed = run("parts", 0, *SETTINGS, STRICT, small=False, extra=["--resume"])
    return Runs(default=default, strict=strict, resumed=resumed)


def modes(runs: Runs) -> list[dict]:
    """run_start.numerics of the default and the strict run."""
    return [records(folder)[0]["numerics"] for folder in (runs.default, runs.strict)]
