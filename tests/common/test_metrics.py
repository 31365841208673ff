import json
import os
import signal

import pytest

from common.core.measure.clocks import percentiles
from common.core.records import console, metrics, record_json
from common.core.records.records import SCHEMA_VERSION
from common.core.run import recorder
from common.core.run.stop_signals import Aborted, Stops
from tests.records import CFG, epoch, epoch_record, read_metrics, start, start_record, write_run


def test_round_trip_and_time_to_target(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write_run(path)
    records = read_metrics(path)
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
    assert len(result.records) == 5 and result.problems == []
    assert result.cut == [
        f"{path}:6: truncated last line (no newline at its end): a record cut mid-write, left out"
    ]
    with pytest.raises(metrics.MetricsError, match=r"metrics.jsonl:6: truncated last line"):
        read_metrics(path)


def test_a_writer_sets_a_cut_last_line_aside_before_it_appends(tmp_path, capsys):
    """A launch killed mid-record left a fragment; the next launch's first record must start a
    line of its own (it was glued onto the fragment, and the whole line was lost)."""
    path = tmp_path / "metrics.jsonl"
    write_run(path)
    whole = path.read_bytes()
    cut_at = whole.rindex(b"\n", 0, len(whole) - 1) + 1  # the start of the last line
    path.write_bytes(whole[:-40])
    with metrics.MetricsWriter(path) as writer:
        writer.write(start(path.parent.name, CFG))
    assert (tmp_path / f"metrics.jsonl.cut-at-{cut_at}").read_bytes() == whole[cut_at:-40]
    assert path.read_bytes().startswith(whole[:cut_at]) and path.read_bytes().endswith(b"\n")
    result = metrics.scan(path)
    assert (result.problems, result.cut, len(result.records)) == ([], [], 6)
    assert "ended in a cut line" in capsys.readouterr().err
    with metrics.MetricsWriter(path) as writer:  # a whole file is left as it is
        writer.write(start(path.parent.name, CFG))
    assert len(list(tmp_path.glob("*.cut-at-*"))) == 1


def test_a_record_glued_onto_a_cut_line_is_read_and_the_cut_part_named(tmp_path):
    """Files that an earlier writer damaged so: the glued record is kept, the fragment named."""
    path = tmp_path / "metrics.jsonl"
    write_run(path)
    lines = path.read_bytes().splitlines(keepends=True)
    glued = lines[2][:-30] + lines[3]  # epoch 2 cut, epoch 3 written right after it
    path.write_bytes(b"".join([*lines[:2], glued, *lines[4:]]))
    result = metrics.scan(path)
    assert result.problems == []
    assert [r.KIND for r in result.records] == ["run_start", "epoch", "epoch", "step", "run_end"]
    cut_bytes = len(lines[2]) - 30
    assert result.cut == [
        f"{path}:3: {cut_bytes} bytes of a record cut mid-write precede a whole record on this "
        "line; the cut part is left out"
    ]


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
        (lambda r: r.pop("record"), r":2: field 'record' is None, expected one of run_start"),
    ],
)
def test_schema_errors_name_file_line_and_field(tmp_path, mutate, message):
    path = tmp_path / "m.jsonl"
    record = epoch_record(1, 0.5, 1.0)
    mutate(record)
    path.write_text(json.dumps(start_record()) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(metrics.MetricsError, match=message):
        read_metrics(path)
    with pytest.raises(metrics.MetricsError):  # a typed record cannot be made of it either
        record_json.from_json(record)


def test_a_line_that_is_not_an_object_is_named_as_such():
    message = r"^line 3: a record is a JSON object, got list$"
    with pytest.raises(metrics.MetricsError, match=message):
        record_json.from_json([1, 2], "line 3")


def test_a_record_written_and_read_back_is_the_same_record():
    """The union's round trip: a field added after version 1 and unknown is left out of the
    file, and read back as unknown."""
    epoch = record_json.from_json(epoch_record(1, 0.5, 1.0))
    written = record_json.to_json(epoch)
    assert written["record"] == "epoch" and list(written)[0] == "record"
    assert "peak_flops" not in written and epoch.peak_flops is None
    assert written["step_split"] is None  # null is one of its values: written
    assert record_json.from_json(json.loads(json.dumps(written))) == epoch


def test_wrong_schema_version_and_missing_file(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({**start_record(), "schema_version": 99}) + "\n")
    with pytest.raises(
        metrics.MetricsError, match="'schema_version' is 99, this reader understands version 1"
    ):
        read_metrics(path)
    assert metrics.scan(tmp_path / "nope.jsonl").problems == [
        f"{tmp_path / 'nope.jsonl'}: file is missing"
    ]


def test_diverged_loss_is_allowed_but_status_is_checked(tmp_path):
    writer = metrics.MetricsWriter(tmp_path / "m.jsonl")
    diverged = epoch(1, 0.1, 1.0).model_copy(update={"train_loss": float("nan")})
    writer.write(diverged)
    end = recorder.run_end(CFG, status="success", epochs=[], total_time_s=1.0, error=None)
    end = end.model_copy(update={"status": "crashed"})  # what a broken writer would do
    with pytest.raises(metrics.MetricsError, match="'status' is 'crashed'"):
        writer.write(end)
    diverged = diverged.model_copy(update={"val_accuracy": float("inf")})  # only losses diverge
    with pytest.raises(metrics.MetricsError, match="'val_accuracy' is inf"):
        writer.write(diverged)


def test_percentiles():
    assert percentiles([4.0, 1.0, 3.0, 2.0], [50, 90, 0, 100]) == pytest.approx(
        [2.5, 3.7, 1.0, 4.0]
    )


def test_a_stop_signal_as_a_record_is_synced_is_not_taken_for_another_writer(tmp_path, monkeypatch):
    """scancel's SIGTERM often lands while a step record is being synced: the run's handler
    raises as fsync returns, before the writer has counted its own line. The chief then took
    that line for a run_end another rank had written, and left without writing its own (seen
    once in tests/slurm: the run ended 'failed', 'rank 0 is gone', instead of 'aborted')."""
    path = tmp_path / "metrics.jsonl"
    writer = metrics.MetricsWriter(path)
    writer.write(start("r1", CFG))
    real_sync = os.fsync

    def sync_then_stop(fd):
        real_sync(fd)
        os.kill(os.getpid(), signal.SIGTERM)  # a real signal: the handler runs as this returns

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    try:
        Stops().install()
        monkeypatch.setattr(os, "fsync", sync_then_stop)
        with pytest.raises(Aborted, match="SIGTERM"):
            writer.write(epoch(1, 0.85, 2.0))
    finally:
        monkeypatch.undo()
        for number, handler in before.items():
            signal.signal(number, handler)
    assert not writer.others_wrote()  # the line is this writer's own, whole
    with metrics.MetricsWriter(path) as other:  # a rank ending the run for a dead chief
        other.write(epoch(2, 0.9, 4.0))
    assert writer.others_wrote()
    writer.close()
    assert [r["record"] for r in read_metrics(path)] == ["run_start", "epoch", "epoch"]


def test_the_commit_is_read_from_the_checkout_root():
    from common.core.records import provenance

    assert (provenance.REPO_ROOT / "pyproject.toml").is_file(), provenance.REPO_ROOT
    assert (provenance.REPO_ROOT / "compare.py").is_file(), provenance.REPO_ROOT
