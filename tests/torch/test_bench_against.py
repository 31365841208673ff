"""`bench --against REF`: every cell measured on another commit of the suite too, in the same
rounds, and printed beside this tree's rows."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def bench(*options):
    command = [sys.executable, "-m", "common.tools.bench", "--frameworks", "torch"]
    command += ["--models", "mlp", "--pipelines", "tensor", "--train-limit", "640", *options]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the suite as a git checkout")
def test_every_row_is_measured_on_the_other_commit_too():
    done = bench("--strategies", "single", "--repeats", "1", "--against", "HEAD")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout
    assert f"before = HEAD ({commit[:10]})" in out
    assert "round 1: mlp torch single / tensor (before):" in out
    row = re.search(r"^mlp\s+torch single / tensor\s+([\d,]+)\s+([\d,]+)\s+([\d.]+)\s", out, re.M)
    assert row, out
    now, before, ratio = (float(x.replace(",", "")) for x in row.groups())
    assert now > 0 and before > 0 and ratio == pytest.approx(now / before, abs=0.01)


def test_an_unknown_commit_is_refused_before_anything_runs():
    done = bench("--against", "no-such-ref")
    assert done.returncode == 2
    assert "--against no-such-ref: no such commit" in done.stderr
    assert "round" not in done.stdout


def test_an_older_tree_without_timed_passes_is_timed_over_as_many_fresh_starts(tmp_path):
    """A tree from before `--timed` refuses it; its baselines then run --repeats as many times
    (one timed pass after each start), so that both trees' figures are medians of as many."""
    from common.tools import measure

    (tmp_path / "torch_impl").mkdir()
    (tmp_path / "torch_impl" / "__init__.py").write_text("")
    (tmp_path / "torch_impl" / "bench.py").write_text(
        "import argparse, json\n"
        "parser = argparse.ArgumentParser()\n"
        "for option in ('--model', '--train-limit', '--batch', '--device'):\n"
        "    parser.add_argument(option)\n"
        "parser.add_argument('--repeats', type=int)\n"
        "args = parser.parse_args()\n"
        "print(json.dumps({'samples_per_s': {'plain loop': args.repeats}}))\n"
    )
    said = measure.baselines("torch", "mlp", 640, timed=3, root=tmp_path)
    assert said == {"torch plain loop": (3, {})}
