"""The verdict's "where the step goes": each run's profiled parts in percent of its step, from
the step_split its epochs recorded, and the part that makes the difference between the runs."""

from common.core.records.entries import StepSplit
from common.core.records.metrics import MetricsWriter
from common.report import step_parts
from common.report.inputs import load_runs
from tests.records import changed, epoch, start

TF = StepSplit(
    compute_s=0.004,
    optimizer_s=0.001,
    framework_s=0.0,
    collectives_s=0.004,
    input_s=0.0,
    wall_s=0.010,
    source="TensorFlow profiler via xprof, CPU",
)
TORCH = StepSplit(
    compute_s=0.004,
    optimizer_s=0.001,
    framework_s=0.0005,
    collectives_s=0.0005,
    wall_s=0.006,
    source="torch profiler, CPU",
)


def run_with(path, split, strategy):
    first = start(path.parent.name)
    first = changed(first, strategy=strategy, framework="tf" if strategy == "mwms" else "torch")
    with MetricsWriter(path) as writer:
        writer.write(first)
        writer.write(changed(epoch(1, 0.9, 1.0), step_split=split))


def test_each_run_in_parts_and_the_part_that_makes_the_difference(tmp_path):
    run_with(tmp_path / "tf" / "metrics.jsonl", TF, "mwms")
    run_with(tmp_path / "torch" / "metrics.jsonl", TORCH, "ddp")
    runs, problems, _ = load_runs([str(tmp_path)])
    assert not problems
    first, difference = step_parts.sentences(runs)
    assert (
        "tf mwms x2: compute 40%, optimizer 10%, collectives 40%, the rest 10% of a 10 ms" in first
    )
    assert (
        "torch ddp x2: compute 67%, optimizer 17%, sharding wrapper 8%, collectives 8% of a 6 ms"
        in first
    )
    assert difference == (
        "The part that makes the difference: collectives, 4 ms a step in tf mwms x2 against "
        "0.5 ms in torch ddp x2 (their profiled steps differ by 4 ms)."
    )


def test_runs_without_a_split_say_nothing(tmp_path):
    run_with(tmp_path / "a" / "metrics.jsonl", None, "ddp")
    runs, _, _ = load_runs([str(tmp_path)])
    assert step_parts.sentences(runs) == []
