"""A bench among the results (`python -m common.tools.bench --out DIR/bench.json`): the verdict
sets each framework's harness ratio beside the framework comparison at one worker, and the
plain loops' own comparison with it; a file that is not the bench's is a problem, by name."""

import json

import pytest

import compare
from common.core.config import strategies
from common.launch.cluster import local_spec
from common.report import measured_files
from common.tools.bench_table import Tally, rows
from tests import records


class OneRank(records.RecordedTrainer):
    spec = local_spec(1, master_port=1, tf_ports=(2,), launch_id="t")


class TfOneRank(OneRank):
    framework, framework_version = "tf", "2.21.0"
    strategy = strategies.get("tf", "mwms")

    def versions(self):
        return {"tensorflow": "2.21.0"}


def write_run(path, trainer, speed, steps=10):
    with records.MetricsWriter(path) as writer:
        start = records.recorder.run_start(
            records.CFG, trainer, run_id=path.parent.name, devices=["cpu"], hosts=[]
        )
        writer.write(start)
        written = []
        for number, accuracy in ((1, 0.88), (2, 0.93)):
            epoch = records.changed(records.epoch(number, accuracy, 2.0 * number), memory=[])
            epoch = records.changed(epoch, samples_per_s=speed, steps=steps, samples=steps * 64)
            written.append(writer.write(epoch))
        end = records.recorder.run_end(
            records.CFG, status="success", epochs=written, total_time_s=4.5, error=None
        )
        writer.write(end)


def bench_rows(speeds, steps=None, paired=None):
    """The rows the bench writes, from its own tally, for these medians ({variant: samples/s},
    3 repeats each), median steps ({variant: seconds}) and paired steps ({variant: plain step /
    the suite's})."""
    tally = Tally()
    for variant, speed in speeds.items():
        figures = {"step_s": (steps or {}).get(variant), "paired": (paired or {}).get(variant)}
        for repeat in (0.99, 1.0, 1.01):
            tally.add(("mlp", variant), 1, speed * repeat, figures)
    return rows(tally)


def write_rounds(results, variants, rounds):
    """bench.json as the bench writes it after these rounds (each a samples/s per variant)."""
    tally = Tally()
    for speeds in rounds:
        for variant, speed in zip(variants, speeds, strict=True):
            tally.add(("mlp", variant), 1, speed, {})
    measured_files.write(results / "bench.json", rows(tally), ["python -m bench"])


@pytest.fixture
def results(tmp_path):
    write_run(tmp_path / "torch-single" / "metrics.jsonl", OneRank(), 86_000.0)
    write_run(tmp_path / "tf-mwms" / "metrics.jsonl", TfOneRank(), 72_000.0)
    return tmp_path


def verdict(results, capsys):
    code = compare.main([str(results), "--format", "markdown"])
    return code, capsys.readouterr()


def test_the_verdict_gives_both_harness_ratios_beside_the_framework_comparison(results, capsys):
    speeds = {
        "torch plain loop": 90_000.0,
        "torch single / tensor": 86_000.0,
        "tf plain loop": 80_000.0,
        "tf mwms x1 / tensor": 72_000.0,
        "tf mwms x1 / loader": 20_000.0,  # another pipeline than the runs': not this group's
        "torch suite's step, paired": 90_500.0,
    }
    # torch's steps timed (0.98x) and paired (1.01x), TensorFlow's not, nor its rounds' ratios
    # written (rows of a bench file from before either)
    steps = {"torch plain loop": 0.000700, "torch single / tensor": 0.000714}
    paired = {"torch suite's step, paired": 1.006}
    written = [
        row if row["variant"].startswith("torch") else dict(row, vs_plain_by_round=None)
        for row in bench_rows(speeds, steps, paired)
    ]
    measured_files.write(results / "bench.json", written, ["python -m bench"])
    code, out = verdict(results, capsys)
    assert code == 0, out.err
    said = [line[2:] for line in out.out.splitlines() if line.startswith("- ")]
    first = next(i for i, line in enumerate(said) if line.startswith("At 1 worker(s)"))
    assert "the faster framework is torch" in said[first]
    bench = said[first + 1]  # right after the framework comparison
    assert bench.startswith("The bench (bench.json: ")
    assert (
        "torch single / tensor runs at 0.96x torch's plain loop (0.96x round by round; 0.98x "
        "step by step; 1.01x with the steps taken in turn in one process)" in bench
    )
    assert "tf mwms x1 / tensor runs at 0.90x TensorFlow's plain loop. Between" in bench
    assert "Between the plain loops torch is 1.12x TensorFlow" in bench
    assert "between these cells 1.19x: the rest, 1.06x, is the harnesses'" in bench
    assert "loader" not in bench


def test_the_verdict_weighs_a_cost_per_epoch_at_the_runs_own_epochs(tmp_path, capsys):
    # the bench's epochs: 100 steps; torch's cell pays 16 ms an epoch beyond its plain loop at
    # the same step, TensorFlow's 2 ms; the compared runs' epochs: 937 steps (all of MNIST)
    write_run(tmp_path / "torch-single" / "metrics.jsonl", OneRank(), 86_000.0, steps=937)
    write_run(tmp_path / "tf-mwms" / "metrics.jsonl", TfOneRank(), 72_000.0, steps=937)
    tally = Tally(steps=100, batch=64)
    epochs = {  # variant: (median step, seconds of the epoch beyond its steps)
        "torch plain loop": (0.00075, 0.001),
        "torch single / tensor": (0.00075, 0.017),
        "tf plain loop": (0.0009, 0.001),
        "tf mwms x1 / tensor": (0.0009, 0.003),
    }
    for _ in range(3):
        for variant, (step, beyond) in epochs.items():
            speed = 6400 / (100 * step + beyond)
            tally.add(("mlp", variant), 1, speed, {"step_s": step})
    measured_files.write(tmp_path / "bench.json", rows(tally), ["python -m bench"])
    code, out = verdict(tmp_path, capsys)
    assert code == 0, out.err
    assert (
        "torch single / tensor runs at 0.83x torch's plain loop (0.83x round by round; 1.00x "
        "step by step); +16.0 ms an epoch beyond its steps, against the plain loop's, on the "
        "bench's 100-step epochs: 0.98x at these runs' 937-step epochs" in out.out
    ), out.out
    assert "+2.0 ms an epoch beyond its steps" in out.out
    assert (
        "the rest, 0.84x, is the harnesses', not the frameworks'; at these runs' 937-step "
        "epochs, with each cost per epoch weighed there, 0.98x" in out.out
    ), out.out


def test_the_verdict_gives_the_rounds_ratio_where_a_spell_split_the_medians(results, capsys):
    # round 2's cell met a slow spell its plain loop did not, round 3's plain loop one its cell
    # did not: the ratio of the medians sets a quiet round against a slow one
    rounds = [(90_000.0, 89_100.0), (90_900.0, 54_540.0), (54_000.0, 54_000.0)]
    write_rounds(results, ["torch plain loop", "torch single / tensor"], rounds)
    code, out = verdict(results, capsys)
    assert code == 0, out.err
    assert (
        "torch single / tensor runs at 0.61x torch's plain loop (0.99x round by round)" in out.out
    )


def test_the_verdict_sets_a_cell_against_the_plain_loop_that_took_turns_with_it(results, capsys):
    # the plain loop measured apart ran in a quiet spell (90,000), the cell and the loop that
    # took its passes in turn with the cell's epochs in a slow one (72,000 and 80,000)
    tally = Tally()
    for _ in range(3):
        tally.add(("mlp", "torch plain loop"), 1, 90_000.0, {"step_s": 0.0007})
        beside = {"step_s": 0.0009, "loop_speed": 80_000.0, "loop_step_s": 0.00081}
        tally.add(("mlp", "torch single / tensor"), 1, 72_000.0, beside)
    measured_files.write(results / "bench.json", rows(tally), ["python -m bench"])
    code, out = verdict(results, capsys)
    assert code == 0, out.err
    assert (
        "torch single / tensor runs at 0.90x torch's plain loop (0.90x round by round; 0.90x "
        "step by step)" in out.out
    ), out.out


def test_the_verdict_gives_the_hosts_floor_where_the_plain_loop_was_measured_again(results, capsys):
    # --floor: the plain loop once more after the launches, 0.95, 1.02 and 0.97 of itself
    rounds = [(90_000.0, 88_200.0, 85_500.0), (80_000.0, 80_000.0, 81_600.0)]
    rounds.append((88_000.0, 86_240.0, 85_360.0))
    variants = ["torch plain loop", "torch single / tensor", "torch plain loop, again"]
    write_rounds(results, variants, rounds)
    code, out = verdict(results, capsys)
    assert code == 0, out.err
    assert (
        "torch single / tensor runs at 0.98x torch's plain loop (0.98x round by round), and its "
        "plain loop, measured again after the launches, at 0.97x itself, 0.97x round by round: "
        "what this host's noise alone gives" in out.out
    ), out.out


def test_a_bench_of_one_repeat_of_two_ranks_or_without_a_plain_loop_says_nothing(results, capsys):
    one = [
        dict(row, repeats=1)
        for row in bench_rows({"torch plain loop": 9e4, "torch single / tensor": 8e4})
    ]
    measured_files.write(results / "bench-one.json", one, ["python -m bench"])
    lone = bench_rows({"tf mwms x1 / tensor": 7e4})
    measured_files.write(results / "bench-lone.json", lone, ["python -m bench"])
    two = bench_rows({"tf plain loop": 8e4, "tf mwms / tensor": 4e4})  # --nproc 2, no --tf-ranks
    two = [dict(row, ranks=2) if "mwms" in row["variant"] else row for row in two]
    measured_files.write(results / "bench-two.json", two, ["python -m bench"])
    code, out = verdict(results, capsys)
    assert code == 0, out.err
    assert "The bench" not in out.out


def test_a_file_that_is_not_the_benchs_is_a_problem_by_name(results, capsys):
    (results / "bench.json").write_text(json.dumps({"rows": [{"model": "mlp"}]}))
    code, out = verdict(results, capsys)
    assert code == 1
    assert "bench.json: not a bench file of python -m common.tools.bench --out" in out.err
    assert "At 1 worker(s)" in out.out  # the runs are still compared


def test_the_bench_refuses_an_out_file_compare_would_not_find(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "results.json"
    command = [sys.executable, "-m", "common.tools.bench", "--models", "mlp", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert f"--out {out}: name it bench*.json, as compare.py finds it" in done.stderr
    assert "round" not in done.stdout and not out.exists()
