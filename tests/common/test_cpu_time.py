"""The chief's CPU over an epoch (`common.core.measure.cpu_time`): the quota's counts read from
cpu.stat as the kernel writes it, a real process held by a real CPU quota seen as throttled,
and the epoch driver's records of both."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.core.config import devices
from common.core.measure import cpu_time
from tests.numpy_trainer import NumpyTrainer, driven

GROUPS = Path("/sys/fs/cgroup/cpu")
# in the group `argv[1]` names, half a second of CPU: the fraction of the quota's periods it
# was throttled in, as cpu_time measures it
BURN = """
import sys, time
from pathlib import Path
from common.core.measure import cpu_time
sys.stdin.readline()  # moved into the group
before = cpu_time.read(Path(sys.argv[1]))
while time.process_time() - before.cpu_s < 0.5:
    pass
spent = cpu_time.spent(before, cpu_time.read(Path(sys.argv[1])))
print(spent.cpu_s, spent.throttled)
"""


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        ("nr_periods 120\nnr_throttled 90\nthrottled_time 5\n", (120, 90)),  # v1
        ("usage_usec 9\nnr_periods 7\nnr_throttled 0\nthrottled_usec 0\n", (7, 0)),  # v2
        ("usage_usec 9\nuser_usec 5\n", None),  # v2 without the cpu controller's lines
        (None, None),  # no file: nothing made up
    ],
)
def test_the_quota_counts_are_read_from_cpu_stat(tmp_path, text, counts):
    if text is not None:
        (tmp_path / "cpu.stat").write_text(text)
    assert cpu_time.quota_counts(tmp_path) == counts


def test_what_went_between_two_readings():
    before = cpu_time.Reading(1.0, 100, 10)
    assert cpu_time.spent(before, cpu_time.Reading(1.5, 200, 85)) == cpu_time.Spent(0.5, 0.75)
    assert cpu_time.spent(before, cpu_time.Reading(1.5, 100, 10)).throttled is None  # idle
    unquoted = cpu_time.Reading(1.0, None, None)
    assert cpu_time.spent(unquoted, cpu_time.Reading(2.0, None, None)) == cpu_time.Spent(1.0, None)


@pytest.mark.skipif(
    os.geteuid() != 0 or not (GROUPS / "cpu.cfs_quota_us").exists(),
    reason="a CPU quota of its own needs root and cgroup v1's cpu controller",
)
def test_a_process_held_by_a_cpu_quota_is_seen_throttled():
    """A tenth of a core, 1 ms a 10 ms period: half a second of CPU spends most periods out of
    quota."""
    group = GROUPS / f"dist-mnist-test-{os.getpid()}"
    group.mkdir()
    child = None
    try:
        (group / "cpu.cfs_period_us").write_text("10000")
        (group / "cpu.cfs_quota_us").write_text("1000")
        command = [sys.executable, "-c", BURN, str(group)]
        child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        (group / "cgroup.procs").write_text(str(child.pid))
        out, _ = child.communicate("go\n", timeout=60)
        cpu_s, throttled = out.split()
        assert float(cpu_s) >= 0.5 and float(throttled) > 0.5
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        group.rmdir()


class Burning(NumpyTrainer):
    """Each step spends 25 ms of this process's CPU."""

    def train_step(self, batch, lr):
        spent = time.process_time()
        while time.process_time() - spent < 0.025:
            pass
        return super().train_step(batch, lr)


def test_each_epoch_records_the_chiefs_cpu_while_it_trained(tmp_path):
    """cpu_time_s: the process's CPU seconds over the epoch's training (4 steps of 25 ms
    each); quota_throttled follows the process's own cgroup (a number where it holds a CPU
    quota, null without one)."""
    _, _, records = driven(tmp_path, "burning", Burning())
    epochs = [r for r in records if r["record"] == "epoch"]
    quota = devices.cpu_quota()
    for epoch in epochs:
        assert 0.1 <= epoch["cpu_time_s"] <= (os.cpu_count() or 1) * epoch["train_time_s"] + 0.01
        if quota is None:
            assert epoch["quota_throttled"] is None
        else:
            assert 0 <= epoch["quota_throttled"] <= 1
