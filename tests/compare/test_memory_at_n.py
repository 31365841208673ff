"""compare --project N --device-memory SIZE: each run's rank at N from torch's trackers
(torch_impl.memory_plan in a subprocess) plus the run's measured base, against the device."""

import json
from pathlib import Path

import jsonschema
import pytest

import compare
from common.core.config.config_io import load_config
from common.projection import link_profile, memory_at_n
from tests.compare.test_projection import profile
from tests.records import write_run


def projection(argv: list[str], capsys) -> dict:
    """compare's JSON projection for `argv` (--format json added), held to its schema."""
    assert compare.main([*argv, "--format", "json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (found,) = [line["projection"] for line in lines if "projection" in line]
    schema = json.loads((Path(__file__).parents[2] / "docs/projection.schema.json").read_text())
    jsonschema.validate(found, schema)  # the documented shape, memory rows and levers included
    return found


def memory_rows(tmp_path, capsys, device: str) -> list[dict]:
    write_run(tmp_path / "run" / "metrics.jsonl")
    link_profile.write(profile(), tmp_path / "links.json")
    argv = [str(tmp_path), "--project", "2,8", "--device-memory", device]
    return projection(argv, capsys)["memory"]


def test_each_run_gets_its_memory_per_rank_at_every_worker_count(tmp_path, capsys):
    rows = memory_rows(tmp_path, capsys, "1GiB")
    assert [row["world"] for row in rows] == [2, 8]
    for row in rows:
        assert row["state_bytes"] > 0 and row["peak_bytes"] >= row["state_bytes"]
        assert row["above_bytes"] is None  # its records hold no base: nothing measured above
        assert row["total_bytes"] == row["base_bytes"] + row["peak_bytes"]
        assert row["fits"] is True  # the seed MLP's 0.4 MB of parameters, on 1 GiB


def test_what_the_measured_peak_held_above_base_and_tensors_is_carried_to_n(tmp_path, capsys):
    """The largest rank's peak less its base and the tracker's tensors at the run's own size:
    carried to every N, so that the total at the run's own size is its measured peak."""
    path = tmp_path / "run" / "metrics.jsonl"
    write_run(path)
    lines = path.read_text().splitlines()
    for index, line in enumerate(lines):
        record = json.loads(line)
        for rank, entry in enumerate(record.get("memory", [])):
            entry.update(peak_bytes=(300 + 20 * rank) * 2**20, baseline_bytes=250 * 2**20)
        lines[index] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    link_profile.write(profile(), tmp_path / "links.json")
    argv = [str(tmp_path), "--project", "2,8", "--device-memory", "1GiB", "--format", "json"]
    assert compare.main(argv) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (own, eight) = [line["projection"] for line in out if "projection" in line][0]["memory"]
    assert own["measured_bytes"] == own["total_bytes"] == 320 * 2**20  # rank 1, the largest
    above = 320 * 2**20 - 250 * 2**20 - own["peak_bytes"]
    assert own["above_bytes"] == eight["above_bytes"] == above
    assert eight["total_bytes"] == 250 * 2**20 + eight["peak_bytes"] + above
    assert eight["measured_bytes"] is None


def test_the_largest_size_that_fits_is_named_per_strategy(tmp_path, capsys):
    """Two sizes of one strategy against a device between them: the smaller is named as the
    largest that fits at each N, the larger as the one that does not."""
    write_run(tmp_path / "small" / "metrics.jsonl")
    big = load_config(None, ["train.target_accuracy=0.9", "model.hidden=[2048,2048]"])
    write_run(tmp_path / "big" / "metrics.jsonl", cfg=big)
    link_profile.write(profile(), tmp_path / "links.json")
    argv = [str(tmp_path), "--project", "2,8", "--device-memory", "32MiB"]
    found = projection(argv, capsys)  # one compare: the tracker runs once a run (~3 s each)
    rows = [memory_at_n.MemoryRow(**row) for row in found["memory"]]
    out = "\n".join(memory_at_n.lines(rows, 32 * 2**20))  # what compare prints of them
    assert "== the largest model size that fits, per strategy (of the sizes run)" in out
    for world in (2, 8):
        assert f"torch ddp x2 at {world} workers: 0.1M parameters fit (" in out, out
    assert out.count("; 5.8M does not") == 2
    named = {(fit["world"], fit["params"], fit["next_params"]) for fit in found["largest_fitting"]}
    assert named == {(2, 109386, 5_824_522), (8, 109386, 5_824_522)}, named


def test_a_device_too_small_is_said_per_row(tmp_path, capsys):
    rows = memory_rows(tmp_path, capsys, "64KiB")
    assert [row["fits"] for row in rows] == [False, False]


@pytest.mark.parametrize("size", ["80", "80 gigs", "-1GiB", "0GB"])
def test_a_size_that_is_not_one_is_refused_before_any_work(size, capsys):
    with pytest.raises(SystemExit) as stop:
        compare.main(["somewhere", "--project", "8", f"--device-memory={size}"])
    assert stop.value.code == 2
    assert "--device-memory takes a size such as 80GiB" in capsys.readouterr().err


def test_a_device_size_without_a_projection_is_refused_not_ignored(tmp_path, capsys):
    write_run(tmp_path / "run" / "metrics.jsonl")  # no link profile, no --project
    with pytest.raises(SystemExit) as stop:
        compare.main([str(tmp_path), "--device-memory", "80GiB"])
    assert stop.value.code == 2
    assert "--device-memory prices the projection's worker counts" in capsys.readouterr().err


def test_sizes_read_in_both_units():
    assert memory_at_n.device_bytes("80GiB") == 80 * 2**30
    assert memory_at_n.device_bytes("40GB") == 40 * 10**9
    assert memory_at_n.device_bytes("1.5MiB") == 3 * 2**19
