"""The failure-cost bench end to end for one case (a measurement: make test-scaling): rank 1
killed after step 50, every figure of its row measured and plausible."""

import subprocess
import sys

import pytest

from common.report import lost_rank_table


@pytest.mark.scaling
def test_the_failure_cost_of_torch_ddp_is_measured(tmp_path):
    command = [sys.executable, "-m", "common.tools.failure_cost", "--cases", "torch-ddp"]
    done = subprocess.run(
        [*command, "--out", str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    row = done.stdout.strip().splitlines()[-1].strip("| ").split(" | ")
    case, launcher, ranks, step, save, per_step, notice, recover, lost, load, resharded, to = row
    assert (case, launcher, ranks, lost, to) == ("torch-ddp", "local", "2", "10", "1")
    (written,) = lost_rank_table.read(tmp_path / "failure_cost-local.json").rows
    assert written["notice_s"] == pytest.approx(float(notice), abs=0.01)
    assert 0 < float(notice) < 30 and 0 < float(recover) < 120  # dist.timeout_s=30
    assert all(float(value) > 0 for value in (step, save, per_step, load, resharded))


def test_bad_cases_are_refused_with_one_line():
    command = [sys.executable, "-m", "common.tools.failure_cost", "--cases", "torch-hsdp"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--cases: unknown torch-hsdp; choose from torch-ddp, torch-fsdp2, tf-mwms" in done.stderr
