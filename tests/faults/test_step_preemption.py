"""A SIGUSR1 in the middle of a long epoch, with a step cadence: the ranks agree on it at a step
boundary (torch: the suite's vote after every call; TensorFlow: its own
PreemptionCheckpointHandler, through the coordination service), checkpoint there and leave with
exit 75; the resumed run ends with the weights of a run that was never stopped, bit for bit."""

import re
import signal
import subprocess
import time

import numpy as np
import pytest

from tests.faults.test_restarts import weights
from tests.launching import runner, train_command
from tests.records import read_metrics

STEPS = 200  # an epoch: 12,800 samples, global batch 64
SETTINGS = [
    "data.train_limit=12800",
    "data.test_limit=500",
    "train.epochs=2",
    "model.name=mlp",
    "model.dropout=false",
    "optim.name=adam",
    "train.log_every_steps=1",
    "train.checkpoint_every_steps=1000",  # none due: only the stop checkpoints
    "output.save_model=true",
    "dist.timeout_s=30",
]


def steps_written(metrics_file) -> int:
    """The step records in the file (a line being written is not one yet)."""
    if not metrics_file.is_file():
        return 0
    lines = metrics_file.read_text().splitlines()
    return sum(line.startswith('{"record": "step"') for line in lines)


@pytest.mark.parametrize("module", ["torch_impl.train", "tf_impl.train"])
def test_sigusr1_mid_epoch_checkpoints_at_a_step_and_resumes_bitwise(module, tmp_path):
    settings = [*SETTINGS, *(["torch.strategy=ddp"] if module.startswith("torch") else [])]
    run = runner(module, tmp_path, warm=True)
    _, whole = run("whole", 2, *settings, small=False)
    command = train_command(
        module, 2, [*settings, f"output.dir={tmp_path}", "output.run_name=cut"], ["--quiet"]
    )
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics_file, deadline = tmp_path / "cut" / "metrics.jsonl", time.monotonic() + 120
    while steps_written(metrics_file) < 20:
        assert time.monotonic() < deadline, "training never started"
        time.sleep(0.05)
    seen = steps_written(metrics_file)
    launcher.send_signal(signal.SIGUSR1)
    _, stderr = launcher.communicate(timeout=180)
    assert launcher.returncode == 75, stderr
    stopped_at = re.search(r"checkpointed step (\d+)", read_metrics(metrics_file)[-1]["error"])
    assert stderr.strip().splitlines()[-1] == (
        f"[launch] preempted: checkpointed at step {stopped_at and stopped_at[1]}, resume with "
        "--resume (exit 75)"
    )
    end = read_metrics(metrics_file)[-1]
    stopped = re.search(r"checkpointed step (\d+) \(epoch 1\)", end["error"])
    assert stopped, end["error"]
    assert seen <= int(stopped[1]) < STEPS, (seen, end["error"])  # inside the first epoch
    how = (
        "TensorFlow's PreemptionCheckpointHandler"
        if module == "tf_impl.train"
        else "the suite's vote"
    )
    assert end["error"].endswith(f"(agreed through {how})"), end["error"]
    run("cut", 2, *settings, small=False, extra=["--resume"])
    ours, theirs = weights(tmp_path / "cut", module), weights(whole, module)
    assert ours.keys() == theirs.keys()
    for key in theirs:
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
