"""tests/cpu_census.py counts a process's CPU time under the test it was started for, ended
processes included, and exits as its command did."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# 1 s of CPU, then a rest of 3 of the census's intervals (0.25 s): a process is counted as last
# seen, and one that ended while burning would be seen up to an interval short of its CPU
BURN = (
    "import time\ncpu = time.process_time()\nwhile time.process_time() - cpu < 1.0:\n    pass\n"
    "time.sleep(0.75)\n"
)
# a command that starts a child as pytest names its test, lets it burn 1 s of CPU, exits 3
COMMAND = f"""
import os, subprocess, sys
env = {{**os.environ, "PYTEST_CURRENT_TEST": "tests/x/test_y.py::test_z (call)"}}
subprocess.run([sys.executable, "-c", {BURN!r}], env=env, check=True)
sys.exit(3)
"""


def test_an_ended_childs_cpu_time_is_counted_under_its_test(tmp_path):
    census = [sys.executable, "tests/cpu_census.py", "--keep", str(tmp_path / "seen.jsonl")]
    done = subprocess.run(
        [*census, "--", sys.executable, "-c", COMMAND],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    files = {
        line.split()[-1]: float(line.split()[0])
        for line in done.stdout.splitlines()
        if line.strip().endswith(".py")
    }
    assert 0.9 <= files["tests/x/test_y.py"] < 2, done.stdout
    kept = [json.loads(line) for line in (tmp_path / "seen.jsonl").read_text().splitlines()]
    (child,) = [p for p in kept if p["test"] == "tests/x/test_y.py::test_z"]
    assert child["cpu_s"] >= 0.9 and child["argv"][1] == "-c"


def test_a_missing_command_is_refused_with_the_form_to_use():
    done = subprocess.run(
        [sys.executable, "tests/cpu_census.py"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 2 and "after --, e.g. -- make test" in done.stderr
