"""TensorFlow's preemption handler against the suite's vote (`tf_impl.preemption_bench`), small:
two real workers, every way timed, and a signal to worker 1 saved on both."""

import json
import subprocess
import sys

import pytest


@pytest.mark.scaling  # a measurement: make test-scaling
@pytest.mark.parametrize(("latency", "after"), [("vote", 0), ("sigterm", 1)])
def test_the_bench_times_each_way_and_a_signal_until_saved(latency, after):
    command = [
        *[sys.executable, "-m", "common.launch", "--nproc", "2", "--", sys.executable],
        *["-m", "tf_impl.preemption_bench", "--steps", "20", "--repeats", "1"],
        *["--latency", latency, "--signal-at", "5"],
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("[rank 0] {")]
    result = json.loads(line.removeprefix("[rank 0] "))
    assert set(result["ms_per_step"]) == {"plain", "vote", "handler"}
    assert all(ms > 0 for ms in result["ms_per_step"].values())
    # the vote saves at the boundary it sees the signal; the handler one call later
    assert result["steps_after_signal"] == after
    assert 0 < result["signal_to_saved_s"] < 30
