"""A sweep's repeats are interleaved round-robin (every setup once per round), as the bench's
are, so that the machine's drift over a sweep hits every setup alike."""

import argparse
import importlib.util
from pathlib import Path

SWEEP = Path(__file__).resolve().parents[2] / "slurm" / "sweep.py"


def test_repeats_come_round_robin():
    spec = importlib.util.spec_from_file_location("sweep", SWEEP)
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    args = argparse.Namespace(
        frameworks="torch,tf", strategies="ddp,mwms", tasks="2", sizes="", repeats=3
    )
    order = [(cell["framework"], cell["repeat"]) for cell in sweep.cells(args)]
    assert order == [("torch", 1), ("tf", 1), ("torch", 2), ("tf", 2), ("torch", 3), ("tf", 3)]
