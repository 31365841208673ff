"""A run whose loss became NaN or infinite ends with status diverged, not success, on both
frameworks; train.stop_on_divergence ends it at that epoch; compare's verdict says so."""

import json
import os
import subprocess
import sys

import pytest

from tests.launching import runner

NAN = ["data.train_limit=1280", "data.test_limit=500", "optim.name=sgd", "optim.lr=1e4"]


def last(run_dir):
    return json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])


@pytest.mark.parametrize("module", ["torch_impl.train", "tf_impl.train"])
def test_a_diverged_run_says_so_and_may_stop_there(module, tmp_path):
    run = runner(module, tmp_path, warm=True)
    done, trained_on = run("on", 0, *NAN, "train.epochs=3", small=False)
    end = last(trained_on)
    assert (end["status"], end["epochs_completed"], end["diverged_at_epoch"]) == ("diverged", 3, 1)
    assert end["error"].startswith("the loss diverged at epoch 1 (train loss nan")
    _, stopped = run(
        "stop", 0, *NAN, "train.epochs=3", "train.stop_on_divergence=true", small=False
    )
    end = last(stopped)
    assert (end["status"], end["epochs_completed"], end["diverged_at_epoch"]) == ("diverged", 1, 1)
    assert "stopped there (train.stop_on_divergence)" in end["error"]
    shown = subprocess.run(
        [sys.executable, "compare.py", str(trained_on)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )
    assert shown.returncode == 0, shown.stderr
    assert "diverged (its loss became NaN or infinite)" in shown.stdout
