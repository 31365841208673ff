"""Start the real training programs the way users do, for the multi-process tests."""

import subprocess
import sys
from pathlib import Path

import pytest

# Small and fast, real MNIST: 2,048 training and 1,000 test samples.
SMALL = ["data.train_limit=2048", "data.test_limit=1000", "train.batch_size=64",
         "train.eval_batch_size=500", "train.epochs=2", "dist.timeout_s=30"]  # fmt: skip


def train_command(module: str, nproc: int, overrides: list[str], extra: list[str]) -> list[str]:
    """`python -m <module>` with --set overrides, under common.launch (nproc 0: bare)."""
    command = [sys.executable, "-m", module]
    for override in overrides:
        command += ["--set", override]
    command += extra
    if nproc == 0:  # no launcher at all: one plain process
        return command
    return [sys.executable, "-m", "common.launch", "--nproc", str(nproc), "--", *command]


def runner(module: str, root: Path):
    """run(name, nproc, *overrides, extra=(), check=True, small=True) -> (process, run folder)."""

    def run(name: str, nproc: int, *overrides: str, extra=(), check=True, small=True):
        settings = [*(SMALL if small else []), f"output.dir={root}",
                    f"output.run_name={name}", *overrides]  # fmt: skip
        done = subprocess.run(
            train_command(module, nproc, settings, list(extra)),
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if check and done.returncode != 0:
            output = f"{done.stdout}\n{done.stderr}"
            pytest.fail(f"training {name} failed ({done.returncode}):\n{output}")
        return done, Path(root) / name

    return run
