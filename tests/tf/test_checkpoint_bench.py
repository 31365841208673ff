"""TensorFlow's checkpoint bench (`tf_impl.checkpoint_bench`), small, on 2 real workers: the
synchronous save timed against none, and the asynchronous one timed or its failure said."""

import re
import subprocess
import sys

import pytest


@pytest.mark.scaling  # a measurement: make test-scaling
def test_the_bench_times_each_way_or_says_why_not():
    command = [
        *[sys.executable, "-m", "common.launch", "--nproc", "2", "--", sys.executable],
        *["-m", "tf_impl.checkpoint_bench", "--hidden", "64", "--steps", "10", "--every", "5"],
        *["--repeats", "1"],
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.removeprefix("[rank 0] ") for line in done.stdout.splitlines()]
    timed = {
        m[1]: float(m[2]) for line in lines if (m := re.match(r"(\w+) +([\d.]+) ms/step", line))
    }
    assert {"none", "sync"} <= set(timed) and all(ms > 0 for ms in timed.values())
    failed = [line for line in lines if line.startswith("async  fails: ")]
    assert ("async" in timed) != bool(failed)  # timed, or its failure said
