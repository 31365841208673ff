import subprocess
import sys
from pathlib import Path

import pytest

# Small and fast, real MNIST: 2,048 training and 1,000 test samples.
SMALL = ["data.train_limit=2048", "data.test_limit=1000", "train.batch_size=64",
         "train.eval_batch_size=500", "train.epochs=2", "dist.timeout_s=30"]  # fmt: skip


def train_command(nproc: int, overrides: list[str], extra: list[str]) -> list[str]:
    command = [sys.executable, "-m", "torch_impl.train"]
    for override in overrides:
        command += ["--set", override]
    command += extra
    if nproc == 0:  # no launcher at all: one plain process
        return command
    return [sys.executable, "-m", "common.launch", "--nproc", str(nproc), "--", *command]


@pytest.fixture
def run_torch(tmp_path):
    """Run torch_impl.train for real; return (completed process, run folder)."""

    def run(name: str, nproc: int, *overrides: str, extra=(), check=True, small=True):
        settings = [*(SMALL if small else []), f"output.dir={tmp_path}",
                    f"output.run_name={name}", *overrides]  # fmt: skip
        done = subprocess.run(
            train_command(nproc, settings, list(extra)),
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if check and done.returncode != 0:
            pytest.fail(
                f"training {name} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
            )
        return done, Path(tmp_path) / name

    return run
