"""The epoch driver (`common.core.train.loop`) with a third, framework-free trainer: a numpy softmax
regression that fills the same contract as torch_impl's and tf_impl's. Its resume, stop rules,
preemption, step records and failures are the driver's, so they are tested here once."""

import json

import numpy as np
import pytest

from common.core.config import config_io
from common.core.config.cli import RunOptions
from common.core.measure import clocks
from common.core.measure.traffic import Call
from common.core.records.entries import StepSplit
from common.core.run import stop_signals
from common.core.train import loop
from common.core.train.optim import learning_rate
from tests.numpy_trainer import NumpyTrainer, driven


def run(tmp_path, name, trainer=None, options=None, *overrides):
    return driven(tmp_path, name, trainer, options, *overrides)


def kinds(records):
    return [r["record"] for r in records]


def test_a_whole_run_writes_every_record(tmp_path):
    status, code, records = run(tmp_path, "whole")
    assert (status, code) == ("success", 0)
    assert kinds(records).count("epoch") == 3 and kinds(records)[0] == "run_start"
    steps = [r["step"] for r in records if r["record"] == "step"]
    assert steps == [3, 6, 9, 12]  # global step numbers across epochs
    assert records[-1]["epochs_completed"] == 3 and records[-1]["error"] is None
    first_epoch = next(r for r in records if r["record"] == "epoch")
    assert first_epoch["flops_per_sample"] == 655_104  # the config's MLP, common.models.weights
    assert first_epoch["peak_flops"] == 1e9  # the one rank's peak_flops()
    assert first_epoch["mfu"] == pytest.approx(first_epoch["samples_per_s"] * 655_104 / 1e9)
    assert first_epoch["memory"] == [
        {
            "rank": 0,
            "peak_counts": "nothing",
            "peak_bytes": 0,
            "param_bytes": 64,
            "grad_bytes": 64,
            "optim_bytes": 0,
            "baseline_bytes": 0,
            "peak_above_baseline_bytes": 0,
            "reserved_peak_bytes": None,  # no caching allocator measured
        }
    ]


def test_stop_then_resume_equals_an_uninterrupted_run(tmp_path):
    run(tmp_path, "whole")
    status, code, _ = run(tmp_path, "parts", None, RunOptions(stop_after_epoch=1))
    assert (status, code) == ("aborted", 0)
    assert not (tmp_path / "parts" / "model.npy").exists()
    status, code, records = run(tmp_path, "parts", None, RunOptions(resume=True))
    assert (status, code) == ("success", 0)
    whole, parts = np.load(tmp_path / "whole/model.npy"), np.load(tmp_path / "parts/model.npy")
    assert np.array_equal(whole, parts)  # the noise generator's state came back too
    ends = [r for r in records if r["record"] == "run_end"]
    assert [e["status"] for e in ends] == ["aborted", "success"]
    assert ends[-1]["epochs_completed"] == 3


def test_sigusr1_checkpoints_the_epoch_and_exits_for_requeue(tmp_path):
    status, code, records = run(tmp_path, "pre", NumpyTrainer(preempt_at_step=2))
    assert (status, code) == ("aborted", stop_signals.PREEMPTED_EXIT)
    assert kinds(records).count("epoch") == 1
    assert "preempted (SIGUSR1): checkpointed epoch 1" in records[-1]["error"]
    assert (tmp_path / "pre" / "checkpoints" / "epoch-0001" / "manifest.json").is_file()
    status, code, records = run(tmp_path, "pre", None, RunOptions(auto_resume=True))
    assert (status, code, records[-1]["epochs_completed"]) == ("success", 0, 3)


def test_resume_without_a_checkpoint_is_refused_and_names_where_it_looked(tmp_path, capsys):
    cfg = config_io.load_config(None, [f"output.dir={tmp_path}", "output.run_name=none"])
    assert loop.execute(cfg, RunOptions(resume=True), NumpyTrainer()) == ("failed", 2)
    assert f"no run folder {tmp_path / 'none'} to go on with" in capsys.readouterr().err
    (tmp_path / "none").mkdir()
    assert loop.execute(cfg, RunOptions(resume=True), NumpyTrainer()) == ("failed", 2)
    expected = f"no complete checkpoint under {tmp_path / 'none' / 'checkpoints'}"
    assert expected in capsys.readouterr().err
    # nothing written but the folder's lock file, left empty: no launch holds it
    assert [(p.name, p.stat().st_size) for p in (tmp_path / "none").iterdir()] == [(".lock", 0)]


def test_a_failing_step_ends_the_run_with_the_trainers_description(tmp_path):
    status, code, records = run(tmp_path, "broken", NumpyTrainer(fail_at_step=6))
    assert (status, code) == ("failed", 1)
    assert kinds(records) == ["run_start", "step", "epoch", "run_end"]
    assert records[-1]["error"] == "rank 0: ValueError: a step broke"


def test_checkpoint_cadence(tmp_path):
    run(tmp_path, "every2", None, RunOptions(), "train.checkpoint_every_epochs=2")
    saved = sorted(p.parent.name for p in (tmp_path / "every2").glob("checkpoints/*/manifest.json"))
    assert saved == ["epoch-0002"]


class LikeCheckpointException(BaseException):
    """torch.distributed.checkpoint's CheckpointException derives from BaseException too."""


def test_a_failure_outside_exception_still_ends_with_run_end(tmp_path):
    broken = NumpyTrainer(fail_at_step=2, failure=LikeCheckpointException("shard truncated"))
    status, code, records = run(tmp_path, "base", broken)
    assert (status, code) == ("failed", 1)
    assert records[-1]["record"] == "run_end"
    assert records[-1]["error"] == "rank 0: LikeCheckpointException: shard truncated"


def test_a_new_run_refuses_a_used_folder_and_leaves_it_as_it_was(tmp_path, capsys):
    run(tmp_path, "taken")
    before = (tmp_path / "taken" / "metrics.jsonl").read_bytes()
    status, code = loop.execute(
        config_io.load_config(None, [f"output.dir={tmp_path}", "output.run_name=taken"]),
        RunOptions(),
        NumpyTrainer(),
    )
    assert (status, code) == ("failed", 2)
    assert "already exists and holds another run" in capsys.readouterr().err
    assert (tmp_path / "taken" / "metrics.jsonl").read_bytes() == before


def test_resume_writes_a_resume_record_and_counts_the_earlier_launch(tmp_path):
    _, _, first = run(tmp_path, "two", None, RunOptions(stop_after_epoch=2))
    _, _, records = run(tmp_path, "two", None, RunOptions(resume=True))
    resumed = [r for r in records if r["record"] == "resume"]
    assert [r["epoch"] for r in resumed] == [2]
    assert resumed[0]["checkpoint"].endswith("checkpoints/epoch-0002")
    saved = json.loads((tmp_path / "two/checkpoints/epoch-0002/manifest.json").read_text())
    assert records[-1]["total_time_s"] > saved["run_time_s"] > 0


def test_an_output_dir_that_cannot_hold_folders_is_refused(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    cfg = config_io.load_config(None, [f"output.dir={blocker}", "output.run_name=r"])
    assert loop.execute(cfg, RunOptions(), NumpyTrainer()) == ("failed", 2)
    assert f"cannot create the run folder {blocker / 'r'}" in capsys.readouterr().err


def test_progress_comes_from_the_driver_and_quiet_silences_it(tmp_path, capsys):
    run(tmp_path, "loud", None, RunOptions(progress_every_s=0))
    out = capsys.readouterr().out
    assert out.count("| step ") == 12 and "epoch 3/3 | step 4/4 |" in out
    run(tmp_path, "quiet", None, RunOptions(progress=False))
    assert "| step " not in capsys.readouterr().out


class GpuLikeTrainer(NumpyTrainer):
    """A trainer whose steps return before the 'device' is done, as on a GPU: it hands the
    driver a clock that does not wait per step, and counts the driver's waits."""

    def __init__(self):
        super().__init__()
        self.waits = 0

    def synchronize(self):
        self.waits += 1

    def step_clock(self):
        return clocks.EpochMeanStepClock()


def test_a_clock_without_per_step_waits_gives_the_epoch_mean_and_waits_per_epoch(tmp_path):
    trainer = GpuLikeTrainer()
    status, _, records = run(tmp_path, "gpu-like", trainer)
    epochs = [r for r in records if r["record"] == "epoch"]
    assert status == "success" and len(epochs) == 3
    for epoch in epochs:  # every step took the mean: the percentiles are equal
        mean = epoch["train_time_s"] / epoch["steps"]
        assert epoch["step_time_p50_s"] == epoch["step_time_p90_s"] == pytest.approx(mean)
    assert trainer.waits == 3 * 3  # each epoch's start, end and evaluation; none per step (4)
    host = clocks.HostStepClock(trainer.synchronize)
    before = trainer.waits
    for _ in range(5):
        host.step_started()
        host.step_done()
    assert trainer.waits - before == 5 and len(host.step_times(1.0)) == 5


def test_several_steps_per_call_take_the_same_steps_and_write_the_same_records(tmp_path):
    one = NumpyTrainer()
    _, _, alone = run(tmp_path, "one", one)
    three = NumpyTrainer()
    status, _, grouped = run(tmp_path, "three", three, None, "train.steps_per_call=3")
    assert status == "success"
    # 4 steps an epoch: calls of 3 then the 1 left; the run's config hash changes with it
    assert three.calls == [3, 3, 3] and three.steps_taken == one.steps_taken == 12

    def same(records):
        kept = ("record", "epoch", "step", "loss", "lr", "train_loss", "val_loss", "val_accuracy")
        return [{k: r[k] for k in kept if k in r} for r in records if r["record"] != "run_start"]

    assert same(grouped) == same(alone)  # bitwise: the same steps in the same order
    epoch = next(r for r in grouped if r["record"] == "epoch")
    assert epoch["steps"] == 4 and epoch["step_time_p50_s"] > 0
    assert grouped[0]["config"]["train"]["steps_per_call"] == 3
    assert grouped[0]["config_hash"] != alone[0]["config_hash"]


class RateLog(NumpyTrainer):
    """The numpy trainer, noting the rate it is handed at each step."""

    def __init__(self):
        super().__init__()
        self.rates = []

    def train_step(self, batch, lr):
        self.rates.append(lr)
        return super().train_step(batch, lr)


@pytest.mark.parametrize("per_call", [1, 3])
def test_each_step_gets_its_scheduled_rate_and_the_records_say_it(tmp_path, per_call):
    """The driver works out an epoch's rates before its clock starts: every step still gets
    the schedule's rate for it, and the step and epoch records name the rate of their step."""
    trainer = RateLog()
    overrides = ("optim.schedule=onecycle", f"train.steps_per_call={per_call}")
    status, _, records = run(tmp_path, "rates", trainer, None, *overrides)
    assert status == "success"
    optim = config_io.load_config(None, ["optim.schedule=onecycle", "optim.lr=0.05"]).optim
    scheduled = [learning_rate(optim, step // 4, step % 4, 4, 3) for step in range(12)]
    assert trainer.rates == scheduled and len(set(scheduled)) == 12
    for record in records:
        if record["record"] == "step":
            assert record["lr"] == scheduled[record["step"] - 1]
        if record["record"] == "epoch":  # the rate of its last step
            assert record["lr"] == scheduled[4 * record["epoch"] - 1]


def test_calls_group_the_steps_and_leave_the_counted_step_alone():
    from common.core.train.epoch import calls

    assert list(calls(10, 4)) == [(0, 4), (4, 4), (8, 2)]
    assert list(calls(10, 4, alone=1)) == [(0, 1), (1, 1), (2, 4), (6, 4)]
    assert list(calls(3, 1, alone=1)) == [(0, 1), (1, 1), (2, 1)]
    assert list(calls(1, 8, alone=0)) == [(0, 1)]
    # output.split_steps=3: the counted step and the two after it are profiled, a call each
    assert list(calls(10, 4, alone=1, apart=3)) == [(0, 1), (1, 1), (2, 1), (3, 1), (4, 4), (8, 2)]


class Profiled(NumpyTrainer):
    """Each counted call's split as a profiler would give it: wall times from `walls`."""

    def __init__(self, walls):
        super().__init__()
        self.walls, self.profiled = list(walls), []

    def count_calls(self, work):
        result = work()
        wall = self.walls[len(self.profiled)]
        self.profiled.append(
            StepSplit(
                compute_s=wall / 4, optimizer_s=0.0, framework_s=0.0, collectives_s=wall / 2,
                wall_s=wall, source="a test's",
            )
        )  # fmt: skip
        return result, [Call("all_reduce", 64, 2)] * len(self.profiled)

    def step_split(self):
        return self.profiled[-1]


@pytest.mark.parametrize(
    ("split_steps", "walls", "kept"), [(1, [0.5], 0.5), (3, [0.5, 0.1, 0.3], 0.3)]
)
def test_the_epoch_keeps_the_split_of_the_median_profiled_step(split_steps, walls, kept):
    """One profiled step is one noisy sample (a core lent away stretches it): with
    output.split_steps=N the counted step and the N - 1 after it are profiled, the calls of the
    first alone are counted, and the split of the step of median wall time is kept."""
    from common.core.train.epoch import train_epoch
    from common.core.train.progress import Progress

    cfg = config_io.load_config(None, [f"output.split_steps={split_steps}"])
    trainer = Profiled(walls)
    trainer.build()
    counted = []
    quiet = Progress(enabled=False, epochs=1, steps_per_epoch=4, global_batch=16)
    result = train_epoch(cfg, trainer, 0, None, quiet, counted)
    assert len(trainer.profiled) == split_steps
    assert result.step_split is not None and result.step_split.wall_s == kept
    assert counted == [Call("all_reduce", 64, 2)]  # the first profiled step's calls only
    assert result.steps == 4 and trainer.steps_taken == 4
