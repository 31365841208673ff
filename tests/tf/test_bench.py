"""The benchmark driver end to end, small: both sides' baselines in their own processes and
real launches, one table."""

import re
import subprocess
import sys

import pytest

ROW = re.compile(
    r"^mlp\s+(.+?)\s+(\d)\s+([\d,]+)\s+(\d+%|-)\s+([\d.]+|-)\s+([\d.]+|-)\s+([\d.]+%|-)\s+([\d.]+%|-)$",
    re.M,
)


def bench(*options: str) -> str:
    command = [
        sys.executable,
        "-m",
        "common.tools.bench",
        "--models",
        "mlp",
        "--strategies",
        "single,mwms",
        "--pipelines",
        "tensor",
        "--train-limit",
        "640",
        *options,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.scaling  # a benchmark of five loops, twice: make test-scaling, with the cores
def test_the_benchmark_measures_both_frameworks_with_median_and_spread():
    out = bench("--repeats", "2")
    rows = {match[1].strip(): match.groups()[1:] for match in ROW.finditer(out)}
    assert set(rows) == {
        "torch plain loop",
        "torch seed-style loop",
        "torch single / tensor",
        "tf plain loop",
        "tf mwms / tensor",
    }, out
    assert rows["tf mwms / tensor"][0] == "2" and rows["torch single / tensor"][0] == "1"
    assert all(float(speed.replace(",", "")) > 0 for _, speed, *_ in rows.values())
    assert all(spread.endswith("%") and ratio != "-" for _, _, spread, ratio, *_ in rows.values())
    assert rows["tf plain loop"][3] == rows["torch plain loop"][3] == "1.00"
    # step by step: the plain loops' own median steps against the launched runs' records
    assert rows["tf plain loop"][4] == rows["torch plain loop"][4] == "1.00"
    assert float(rows["tf mwms / tensor"][4]) > 0 and rows["torch seed-style loop"][4] == "-"
    # MFU from the launched runs' records; the baselines record nothing
    assert rows["torch single / tensor"][5].endswith("%") and rows["tf plain loop"][5] == "-"
    assert rows["tf mwms / tensor"][6].endswith("%") and rows["torch plain loop"][6] == "-"
    assert out.count("round 2:") == 5
    per_line = re.search(r"progress: ([\d.]+) us per line, ([\d.]+)% of the time", out)
    assert per_line and float(per_line[2]) < 1.0


def test_a_single_pass_prints_no_ratio_and_no_spread():
    out = bench("--frameworks", "torch", "--repeats", "1")
    rows = {match[1].strip(): match.groups()[1:] for match in ROW.finditer(out)}
    assert len(rows) == 3 and all(row[2:4] == ("-", "-") for row in rows.values()), out
    # a step's median is a median of one epoch's steps: shown from one repeat on
    assert float(rows["torch single / tensor"][4]) > 0 and rows["torch plain loop"][4] == "1.00"


def test_an_unknown_framework_is_refused():
    command = [sys.executable, "-m", "common.tools.bench", "--frameworks", "torch,jax"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown ['jax']; choose from torch,tf" in done.stderr
