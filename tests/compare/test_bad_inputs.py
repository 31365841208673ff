"""compare.py on inputs a user may hand it by mistake: every one is a one-line problem and an
exit code, never a traceback, and no message quotes more than a few hundred characters."""

import json

import pytest

import compare
from tests.records import start_record, write_run


@pytest.mark.parametrize(
    "manifest, problem",
    [
        ({"runs": [1, 2]}, "sweep run 1 is not an object"),
        ({"runs": "abc"}, "'runs' is not a list of runs"),
        ({"runs": [{"result_dir": 5}]}, "result_dir is not a folder name"),
        ([1, 2], "not a sweep manifest (a JSON object with 'runs')"),
    ],
    ids=["numbers", "string", "number-folder", "list"],
)
def test_a_malformed_sweep_manifest_is_a_problem_not_a_traceback(
    tmp_path, capsys, manifest, problem
):
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(manifest))
    assert compare.main([str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}: " in err and problem in err and "Traceback" not in err


@pytest.mark.parametrize("flag", ["--out", "--tensorboard"])
def test_an_output_folder_inside_a_file_is_a_problem(tmp_path, capsys, flag):
    write_run(tmp_path / "run" / "metrics.jsonl")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert compare.main([str(tmp_path / "run"), flag, str(blocker / "report")]) == 1
    err = capsys.readouterr().err
    assert f"cannot write {blocker / 'report'}" in err and "Traceback" not in err


def test_a_huge_value_is_quoted_short(tmp_path, capsys):
    huge = start_record() | {"framework": "x" * 50_000_000}
    huge["strategy"] = "y" * 1_000_000  # not a strategy: the message quotes it
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text(json.dumps(huge) + "\n")
    assert compare.main([str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert "field 'strategy' is 'yyyy" in err and "characters)" in err
    assert max(len(line) for line in err.splitlines()) < 1000
