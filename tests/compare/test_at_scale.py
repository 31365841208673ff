"""compare over many runs stays readable: a plot's legend lists at most LEGEND_MAX entries and
says how many it left out, and a "not side by side" note names at most a few runs and
differences, and how many more there were."""

import pytest

import compare
from common.core.config.config_io import load_config
from common.report.render import plots
from tests.records import write_run


def test_a_legend_of_100_runs_is_capped_and_says_how_many_it_left_out():
    plt = pytest.importorskip("matplotlib.pyplot")
    figure, axis = plt.subplots()
    for index in range(100):
        axis.plot([0, 1], [index, index], label=f"run {index}")
    plots.legend(axis)
    shown = [text.get_text() for text in axis.get_legend().get_texts()]
    assert len(shown) == plots.LEGEND_MAX
    assert shown[-1] == f"+{100 - plots.LEGEND_MAX + 1} more, not listed (see the table)"
    plt.close(figure)


def test_repeats_share_one_legend_entry():
    plt = pytest.importorskip("matplotlib.pyplot")
    figure, axis = plt.subplots()
    for index in range(100):
        axis.plot([0, 1], [index, index], label=f"torch ddp x{2 ** (index % 3)}")
    plots.legend(axis)
    shown = [text.get_text() for text in axis.get_legend().get_texts()]
    assert shown == ["torch ddp x1", "torch ddp x2", "torch ddp x4"]
    plt.close(figure)


def test_100_runs_in_one_group_make_a_report(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    for index in range(100):
        write_run(tmp_path / f"run{index:03d}" / "metrics.jsonl")
    assert compare.main([str(tmp_path), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "plots" / "val_curves.png").stat().st_size > 10_000


def test_a_note_on_many_runs_and_keys_is_capped(tmp_path, capsys):
    for index in range(61):  # the larger group comes first
        write_run(tmp_path / f"first-{index:03d}" / "metrics.jsonl")
    other = load_config(
        None,
        [
            "train.target_accuracy=0.9",
            "optim.lr=0.05",
            "optim.momentum=0.5",
            "optim.weight_decay=0.01",
            "optim.gamma=0.5",
            "optim.step_epochs=2",
            "optim.schedule=step",
            "train.seed=7",
            "model.dropout=false",
        ],
    )
    for index in range(60):
        write_run(tmp_path / f"other-with-a-long-name-{index:03d}" / "metrics.jsonl", cfg=other)
    assert compare.main([str(tmp_path), "--format", "csv"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "not side by side" in line]
    assert len(notes) == 1 and len(notes[0]) < 1000, notes
    assert "and 55 more runs" in notes[0] and "more differences" in notes[0], notes[0]
