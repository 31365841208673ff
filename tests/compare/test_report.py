"""compare.py on real result folders of both frameworks, plus broken and incomparable ones."""

import json
import os
import subprocess
import sys

import pytest

import compare
from tests.launching import runner

QUICK = [
    "data.train_limit=1280",
    "data.test_limit=500",
    "train.epochs=2",
    "model.dropout=false",
    "train.eval_batch_size=500",
    "train.log_every_steps=5",
]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Short real runs: torch single/ddp and tf on 1 and 2 processes, and one with another
    batch (not comparable with the rest)."""
    root = tmp_path_factory.mktemp("results")
    for name, module, nproc, extra in (
        ("torch-single", "torch_impl.train", 0, ["torch.strategy=single"]),
        ("torch-ddp", "torch_impl.train", 2, ["torch.strategy=ddp"]),
        ("tf-w1", "tf_impl.train", 0, []),
        ("tf-w2", "tf_impl.train", 2, []),
        ("torch-batch128", "torch_impl.train", 2, ["train.batch_size=128"]),
    ):
        runner(module, root, warm=True)(name, nproc, *QUICK, *extra, small=False)
    return root


def test_tables_line_up_both_frameworks_and_set_incomparable_runs_apart(results, capsys):
    assert compare.main([str(results), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    first, second = [json.loads(line) for line in out.splitlines()]
    cells = [(r["framework"], r["strategy"], r["world"]) for r in first["rows"]]
    assert cells == [
        ("tf", "mwms", 1),
        ("tf", "mwms", 2),
        ("torch", "single", 1),  # the 1-worker baseline first
        ("torch", "ddp", 2),
    ]
    assert first["key"]["batch"] == "64 global" and second["key"]["batch"] == "128 global"
    assert first["key"]["train.batch_size"] == 64 and second["key"]["train.batch_size"] == 128
    assert "torch ddp x2) are not put beside the first group: train.batch_size 128 vs 64" in err
    for row in first["rows"]:
        assert row["samples_s"] > 0 and 0 < row["efficiency"] and row["final_acc"] > 0.5
        assert row["peak_counts"].startswith("process peak RSS") and row["status"] == "success"
    ones = {r["framework"]: r for r in first["rows"] if r["world"] == 1}
    assert ones["tf"]["efficiency"] == ones["torch"]["efficiency"] == 1.0


def test_the_report_files_and_plots_are_written(results, tmp_path, capsys):
    out = tmp_path / "report"
    assert compare.main([str(results), "--out", str(out)]) == 0
    assert f"report: {out / 'report.html'}" in capsys.readouterr().out
    for name in ("report.html", "report.md", "report.csv", "report.json"):
        assert (out / name).stat().st_size > 200, name
    pictures = ("epoch_time", "throughput_scaling", "val_curves", "accuracy_time", "memory")
    for picture in (*pictures, "step_loss"):
        assert (out / "plots" / f"{picture}.png").read_bytes()[:4] == b"\x89PNG", picture
    assert (out / "plots-group2" / "memory.png").is_file()  # the batch-128 group
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 12 and "Not side by side" in html
    assert html.count("<figcaption>") == 12 and "Verdict, group 1" in html
    assert "Fastest: " in html and "<h2>Environment</h2>" in html and "torch 2.13.0" in html
    assert f"href='{os.path.relpath(results / 'torch-ddp', out)}/'" in html  # row -> run folder
    assert "tf,mwms,2" in (out / "report.csv").read_text().replace('"', "")


@pytest.mark.parametrize("fmt", ["terminal", "markdown", "csv"])
def test_every_table_format_names_the_columns(results, fmt, capsys):
    assert compare.main([str(results / "tf-w2"), str(results / "torch-ddp"), "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert "samples" in out and "tf" in out and "torch" in out


def test_broken_files_are_named_and_the_rest_still_compared(results, tmp_path, capsys):
    good = results / "tf-w2" / "metrics.jsonl"
    lines = good.read_text().splitlines()
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "metrics.jsonl").write_text("\n".join(lines)[:-25])
    wrong = json.loads(lines[0]) | {"schema_version": 99}
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "metrics.jsonl").write_text("\n".join([json.dumps(wrong), *lines[1:]]))
    (tmp_path / "empty").mkdir()
    code = compare.main(
        [
            str(results / "torch-ddp"),
            str(tmp_path / "cut"),
            str(tmp_path / "old"),
            str(tmp_path / "empty"),
            str(tmp_path / "missing.jsonl"),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 1
    assert f"{tmp_path / 'cut' / 'metrics.jsonl'}:{len(lines)}: truncated last line" in err
    assert f"{tmp_path / 'old' / 'metrics.jsonl'}:1" in err and "schema_version" in err
    assert f"{tmp_path / 'empty'}: no metrics.jsonl" in err
    assert "missing.jsonl: file is missing" in err
    assert "torch" in out and "unfinished" in out  # the valid run and the cut one are tabled


def test_assert_close_names_the_first_divergent_step(results, tmp_path):
    command = [
        sys.executable,
        "compare.py",
        "--assert-close",
        str(results / "torch-single"),
        str(results / "tf-w2"),
        "--rtol",
        "1e-4",
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0 and "8 steps agree" in done.stdout  # Adam, both frameworks
    # A curve with one step changed by 1%: named.
    lines = (results / "torch-single" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    steps = [r for r in records if r["record"] == "step"]
    steps[3]["loss"] *= 1.01
    (tmp_path / "bent").mkdir()
    (tmp_path / "bent" / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    command[3:5] = [str(results / "torch-single"), str(tmp_path / "bent")]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 1
    assert f"diverged at step {steps[3]['step']}" in done.stderr


def test_time_to_target_is_computed_after_the_fact(results, capsys):
    assert compare.main([str(results / "torch-single"), "--format", "json", "--target", "0.5"]) == 0
    (group,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    epochs = [r for r in compare.load_runs([str(results / "torch-single")])[0][0].epochs]
    first = next(e for e in epochs if e.val_accuracy >= 0.5)
    assert group["target_accuracy"] == 0.5 and group["rows"][0]["target_s"] == first.elapsed_s
    assert compare.main([str(results / "torch-single"), "--format", "json", "--target", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["target_s"] is None


def test_tensorboard_events_hold_every_runs_curves(results, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = tmp_path / "board"
    assert (
        compare.main(
            [str(results / "torch-ddp"), str(results / "tf-w2"), "--tensorboard", str(board)]
        )
        == 0
    )
    folders = sorted(p.name for p in board.iterdir())
    assert [name.split("-w2-")[0] for name in folders] == ["tf-mwms", "torch-ddp"]
    for folder in folders:
        events = EventAccumulator(str(board / folder)).Reload()
        tags = events.Tags()["scalars"]
        assert {
            "loss/train_step",
            "accuracy/val",
            "throughput/samples_per_s",
            "memory/peak_mib",
        } <= set(tags)
        accuracy = [event.value for event in events.Scalars("accuracy/val")]
        assert len(accuracy) == 2 and 0.5 < accuracy[-1] <= 1
        assert [e.step for e in events.Scalars("loss/train_step")][:2] == [5, 10]


def test_a_closed_pipe_ends_quietly(results):
    command = f"{sys.executable} compare.py {results} --format json | head -c 10"
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
