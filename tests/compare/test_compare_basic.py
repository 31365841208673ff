import json
import shutil

import compare
from common.config_io import load_config
from tests.records import start_record, write_run


def test_valid_runs_are_tabled_and_broken_files_named(tmp_path, capsys):
    write_run(tmp_path / "good" / "metrics.jsonl")
    write_run(tmp_path / "cut" / "metrics.jsonl")
    cut = tmp_path / "cut" / "metrics.jsonl"
    cut.write_text(cut.read_text()[:-30])
    assert compare.main([str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    (row,) = [line.split() for line in out.splitlines()[2:3]]  # repeats fold into one row
    assert row[:4] == ["torch", "ddp", "2", "2"]  # framework, strategy, workers, runs
    assert row[-1] == "success,unfinished"
    assert f"{cut}:6: truncated last line" in err


def test_all_valid_exits_zero_and_nothing_found_exits_one(tmp_path, capsys):
    write_run(tmp_path / "run" / "metrics.jsonl")
    assert compare.main([str(tmp_path / "run")]) == 0
    assert compare.main([str(tmp_path / "empty-nothing-here")]) == 1
    assert "file is missing" in capsys.readouterr().err


def test_bad_bytes_deep_nesting_and_a_configless_start_are_named_and_the_rest_tabled(
    tmp_path, capsys
):
    write_run(tmp_path / "good" / "metrics.jsonl")
    (tmp_path / "latin1").mkdir()
    (tmp_path / "latin1" / "metrics.jsonl").write_bytes(b'{"record": "run_start", "x": "\xe9"}\n')
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "metrics.jsonl").write_text("[" * 200_000 + "\n")
    (tmp_path / "bare").mkdir()
    bare = start_record() | {"config": {}}
    (tmp_path / "bare" / "metrics.jsonl").write_text(json.dumps(bare) + "\n")
    assert compare.main([str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert "torch" in out and "success" in out  # the good run is still tabled
    assert f"{tmp_path / 'latin1' / 'metrics.jsonl'}:1: not UTF-8 text" in err
    assert f"{tmp_path / 'deep' / 'metrics.jsonl'}:1: JSON nested too deeply" in err
    assert (
        f"{tmp_path / 'bare' / 'metrics.jsonl'}:1: field 'config' lacks the section(s) data" in err
    )


def test_runs_with_other_hyperparameters_are_not_repeats(tmp_path, capsys):
    write_run(tmp_path / "slow" / "metrics.jsonl")
    fast = load_config(None, ["train.target_accuracy=0.9", "optim.lr=0.05"])
    write_run(tmp_path / "fast" / "metrics.jsonl", cfg=fast)
    assert compare.main([str(tmp_path), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    groups = [json.loads(line) for line in out.splitlines()]
    assert [g["rows"][0]["runs"] for g in groups] == [1, 1]
    assert sorted(g["key"]["optim.lr"] for g in groups) == [0.001, 0.05]
    assert "are not put beside the first group: optim.lr" in err


def test_copies_of_one_run_count_once(tmp_path, capsys):
    write_run(tmp_path / "run" / "metrics.jsonl")
    for copy in ("copy1", "copy2"):
        shutil.copytree(tmp_path / "run", tmp_path / copy)
    assert compare.main([str(tmp_path), str(tmp_path / "run"), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    (group,) = [json.loads(line) for line in out.splitlines()]
    assert group["rows"][0]["runs"] == 1
    assert err.count("(same run_id and start time): counted once") == 2
