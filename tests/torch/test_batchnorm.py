"""Batch normalization over the global batch (torch_impl.layers.GlobalBatchNorm): 2 real gloo
ranks holding half a batch each compute, in float64, the gradients and running statistics of
one process holding all of it."""

import json
import subprocess
import sys
from pathlib import Path

PROBE = Path(__file__).with_name("batchnorm_probe.py")


def test_two_ranks_compute_the_gradient_and_statistics_of_the_whole_batch():
    command = [sys.executable, "-m", "common.launch", "--nproc", "2", "--"]
    done = subprocess.run(
        [*command, sys.executable, str(PROBE)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("[rank 0] APART "))
    apart = json.loads(line.removeprefix("[rank 0] APART "))
    assert {"block2.shortcut_bn.running_var", "conv1.weight", "fc.bias"} <= set(apart)
    # float64 with the sums in another order: 1e-12 relative is rounding; a per-rank statistic
    # (each rank normalizing by its own half) would be off by percents.
    assert max(apart.values()) < 1e-10, apart
