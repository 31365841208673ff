"""The benchmark driver end to end, small: both sides' baselines in their own processes and
real launches, one table."""

import re
import subprocess
import sys


def test_the_benchmark_measures_both_frameworks():
    command = [
        sys.executable,
        "-m",
        "common.bench",
        "--models",
        "mlp",
        "--strategies",
        "single",
        "--pipelines",
        "tensor",
        "--train-limit",
        "640",
        "--repeats",
        "1",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {
        match[1].strip(): (int(match[2]), float(match[3].replace(",", "")))
        for match in re.finditer(r"^mlp\s+(.+?)\s+(\d)\s+([\d,]+)\s+[\d.]+$", done.stdout, re.M)
    }
    assert set(rows) == {
        "torch plain loop",
        "torch seed-style loop",
        "torch single / tensor",
        "tf plain loop",
        "tf mwms / tensor",
    }, done.stdout
    assert rows["tf mwms / tensor"][0] == 2 and rows["torch single / tensor"][0] == 1
    assert all(speed > 0 for _, speed in rows.values())


def test_an_unknown_framework_is_refused():
    command = [sys.executable, "-m", "common.bench", "--frameworks", "torch,jax"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown ['jax']; choose from torch,tf" in done.stderr
