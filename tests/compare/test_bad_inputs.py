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


def _profile_with(**changes) -> dict:
    """A link profile as its file holds it, with `changes` to its all_reduce fit or its top."""
    points = [{"payload_bytes": s, "wire_bytes": s, "seconds": 1e-3 + s * 1e-9} for s in (8, 64)]
    fit = {"alpha_s": 1e-3, "beta_s_per_byte": 1e-9, "points": points}
    fit.update({k: v for k, v in changes.items() if k in fit})
    return {
        "time": "2026-11-24T00:00:00+00:00",
        "framework": "torch",
        "transport": "gloo",
        "device_type": "cpu",
        "world_size": 2,
        "hosts": ["localhost", "localhost"],
        "launcher": "local",
        "launch_id": "",
        "kinds": {"all_reduce": fit},
    } | {k: v for k, v in changes.items() if k == "kinds"}


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"kinds": {}}, "kinds"),
        ({"alpha_s": -1e-3}, "kinds.all_reduce.alpha_s"),
        ({"beta_s_per_byte": float("nan")}, "kinds.all_reduce.beta_s_per_byte"),
        ({"points": [{"payload_bytes": 8, "wire_bytes": 8, "seconds": 1e-3}]}, "points"),
    ],
    ids=["no-kinds", "negative-alpha", "nan-beta", "one-size"],
)
def test_a_link_profile_that_cannot_price_is_refused_naming_the_field(
    tmp_path, capsys, changes, field
):
    """An empty fit priced 0 ms of communication (100% scaling), a negative alpha negative
    samples/s: now the profile is refused as it is read, naming the file, the field, the fix."""
    write_run(tmp_path / "run" / "metrics.jsonl")
    profile = tmp_path / "links.json"
    profile.write_text(json.dumps(_profile_with(**changes)))
    assert compare.main([str(tmp_path / "run"), "--project", "8", "--links", str(profile)]) == 1
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert str(profile) in line and field in line and "measure the link again" in line, line


@pytest.mark.parametrize("given", ["", "8,x", "0"])
def test_an_empty_or_malformed_worker_list_is_refused_before_any_work(tmp_path, capsys, given):
    write_run(tmp_path / "run" / "metrics.jsonl")
    with pytest.raises(SystemExit) as refused:
        compare.main([str(tmp_path / "run"), "--project", given])
    assert refused.value.code == 2
    captured = capsys.readouterr()
    assert "--project takes worker counts" in captured.err and captured.out == ""
