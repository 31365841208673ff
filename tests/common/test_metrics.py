import json

import pytest

from common.core import console, metrics, record_json, recorder
from common.core.clocks import percentiles
from common.core.records import SCHEMA_VERSION
from tests.records import CFG, epoch, epoch_record, start_record, write_run


def test_round_trip_and_time_to_target(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write_run(path)
    records = metrics.read_metrics(path)
    assert [r["record"] for r in records] == [
        "run_start",
        "epoch",
        "epoch",
        "epoch",
        "step",
        "run_end",
    ]
    start, end = records[0], records[-1]
    assert start["schema_version"] == SCHEMA_VERSION and start["world_size"] == 2
    assert start["config"]["train"]["target_accuracy"] == 0.9 and len(start["config_hash"]) == 12
    assert end["time_to_target_s"] == 4.0  # epoch 2 first reached 0.9
    assert (end["best_val_accuracy"], end["epochs_completed"]) == (0.95, 3)
    typed = metrics.read_records(path)
    assert "epoch   1 | train loss 0.5000" in console.console_line(typed[1])
    assert "time to 0.900: 4.0s" in console.console_line(typed[-1])


def test_half_written_last_line_is_reported_and_the_rest_kept(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write_run(path)
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # the process died while writing run_end
    result = metrics.scan(path)
    assert len(result.records) == 5
    assert result.problems == [f"{path}:6: truncated last line (no newline at its end)"]
    with pytest.raises(metrics.MetricsError, match=r"metrics.jsonl:6: truncated last line"):
        metrics.read_metrics(path)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: r.pop("val_accuracy"), r":2 \(epoch\): field 'val_accuracy' is missing"),
        (lambda r: r.update(steps="10"), r":2 \(epoch\): field 'steps' must be int, got str '10'"),
        (lambda r: r.update(steps=True), r"field 'steps' must be int, got bool"),
        (lambda r: r.update(eval_time_s=float("inf")), r"'eval_time_s' is inf, expected a finite"),
        (
            lambda r: r["memory"][1].pop("optim_bytes"),
            r"memory\[1\]: field 'optim_bytes' is missing",
        ),
        (lambda r: r.update(record="epochs"), r"field 'record' is 'epochs', expected one of"),
    ],
)
def test_schema_errors_name_file_line_and_field(tmp_path, mutate, message):
    path = tmp_path / "m.jsonl"
    record = epoch_record(1, 0.5, 1.0)
    mutate(record)
    path.write_text(json.dumps(start_record()) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(metrics.MetricsError, match=message):
        metrics.read_metrics(path)
    with pytest.raises(metrics.MetricsError):  # a typed record cannot be made of it either
        record_json.from_json(record)


def test_wrong_schema_version_and_missing_file(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({**start_record(), "schema_version": 99}) + "\n")
    with pytest.raises(
        metrics.MetricsError, match="'schema_version' is 99, this reader understands version 1"
    ):
        metrics.read_metrics(path)
    assert metrics.scan(tmp_path / "nope.jsonl").problems == [
        f"{tmp_path / 'nope.jsonl'}: file is missing"
    ]


def test_diverged_loss_is_allowed_but_status_is_checked(tmp_path):
    writer = metrics.MetricsWriter(tmp_path / "m.jsonl")
    diverged = epoch(1, 0.1, 1.0)
    diverged.train_loss = float("nan")
    writer.write(diverged)
    end = recorder.run_end(CFG, status="success", epochs=[], total_time_s=1.0, error=None)
    end.status = "crashed"  # type: ignore[assignment] - what a broken writer would do
    with pytest.raises(metrics.MetricsError, match="'status' is 'crashed'"):
        writer.write(end)
    diverged.val_accuracy = float("inf")  # only losses may diverge
    with pytest.raises(metrics.MetricsError, match="'val_accuracy' is inf"):
        writer.write(diverged)


def test_percentiles():
    assert percentiles([4.0, 1.0, 3.0, 2.0], [50, 90, 0, 100]) == pytest.approx(
        [2.5, 3.7, 1.0, 4.0]
    )
