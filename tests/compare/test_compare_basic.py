import compare
from tests.records import write_run


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
