"""Checkpoints and stops inside an epoch (`common.core.train.mid_epoch`), with the numpy trainer
of tests/common/test_loop.py: a stop after a step, a cadence of steps, SIGUSR1 at the next step
boundary, and a resume inside the epoch equal, bit for bit, to a run that never stopped."""

import json

import numpy as np

from common.core.config.cli import RunOptions
from common.core.run import stop_signals
from common.core.train.epoch import calls
from tests.numpy_trainer import NumpyTrainer, driven


def run(tmp_path, name, trainer=None, options=None, *overrides):
    """3 epochs of 4 steps of the numpy trainer: global steps 1 to 12, each recorded, every
    checkpoint kept."""
    every = ["train.log_every_steps=1", "train.keep_checkpoints=0"]
    return driven(tmp_path, name, trainer, options, *every, *overrides)


def of(records, kind):
    return [record for record in records if record["record"] == kind]


def saved(tmp_path, name):
    return sorted(p.parent.name for p in (tmp_path / name).glob("checkpoints/*/manifest.json"))


def test_a_stop_after_a_step_resumes_inside_the_epoch_bitwise(tmp_path):
    _, _, whole = run(tmp_path, "whole")
    status, code, first = run(tmp_path, "parts", None, RunOptions(stop_after_step=6))
    assert (status, code) == ("aborted", 0)
    assert first[-1]["error"] == "stopped after step 6 (--stop-after-step); --resume"
    assert [r["step"] for r in of(first, "step")] == [1, 2, 3, 4, 5, 6]
    assert saved(tmp_path, "parts") == ["epoch-0001-step-0000002"]
    status, code, records = run(tmp_path, "parts", None, RunOptions(resume=True))
    assert (status, code) == ("success", 0)
    (resumed,) = of(records, "resume")
    assert (resumed["epoch"], resumed["step"], resumed["world_size_before"]) == (1, 6, 1)
    # every step once, and the same numbers as the run that never stopped
    assert [r["step"] for r in of(records, "step")] == list(range(1, 13))
    assert [r["loss"] for r in of(records, "step")] == [r["loss"] for r in of(whole, "step")]
    assert [e["train_loss"] for e in of(records, "epoch")] == [
        e["train_loss"] for e in of(whole, "epoch")
    ]
    assert [e["steps"] for e in of(records, "epoch")] == [4, 2, 4]  # trained in each launch
    model = np.load(tmp_path / "parts/model.npy")
    assert np.array_equal(model, np.load(tmp_path / "whole/model.npy"))


def test_a_cadence_of_steps_checkpoints_inside_and_at_the_end_of_epochs(tmp_path):
    run(tmp_path, "every3", None, None, "train.checkpoint_every_steps=3")
    assert saved(tmp_path, "every3") == [
        "epoch-0000-step-0000003",
        "epoch-0001-step-0000002",
        "epoch-0002-step-0000001",
        "epoch-0003",
    ]
    manifest = json.loads(
        (tmp_path / "every3/checkpoints/epoch-0001-step-0000002/manifest.json").read_text()
    )
    assert (manifest["epoch"], manifest["step"], len(manifest["loss_sums"])) == (1, 2, 1)
    assert len(manifest["epoch_records"]) == 1


def test_sigusr1_is_acted_on_at_the_next_step_boundary(tmp_path):
    _, _, whole = run(tmp_path, "whole")
    cadence = "train.checkpoint_every_steps=100"  # none due: the vote runs after every step
    status, code, records = run(tmp_path, "pre", NumpyTrainer(preempt_at_step=6), None, cadence)
    assert (status, code) == ("aborted", stop_signals.PREEMPTED_EXIT)
    assert "preempted (SIGUSR1): checkpointed step 6 (epoch 2)" in records[-1]["error"]
    assert saved(tmp_path, "pre") == ["epoch-0001-step-0000002"]
    status, code, records = run(tmp_path, "pre", None, RunOptions(auto_resume=True), cadence)
    assert (status, code, records[-1]["epochs_completed"]) == ("success", 0, 3)
    model = np.load(tmp_path / "pre/model.npy")
    assert np.array_equal(model, np.load(tmp_path / "whole/model.npy"))


def test_a_stop_on_an_epochs_last_step_is_the_epochs_checkpoint(tmp_path):
    status, _, records = run(tmp_path, "at4", None, RunOptions(stop_after_step=4))
    assert status == "aborted" and len(of(records, "epoch")) == 1
    assert records[-1]["error"] == "stopped after step 4 (--stop-after-step); --resume"
    assert saved(tmp_path, "at4") == ["epoch-0001"]


def test_calls_end_where_a_checkpoint_falls_and_start_where_a_launch_resumed():
    assert list(calls(10, 4, None, 0, [3, 6])) == [(0, 3), (3, 3), (6, 4)]
    assert list(calls(10, 4, None, 5, [6])) == [(5, 1), (6, 4)]
    assert list(calls(10, 4, 6, 5, [])) == [(5, 1), (6, 1), (7, 3)]
