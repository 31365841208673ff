"""compare.py shows what a lost rank costs beside the runs when the results hold the files
`python -m common.tools.failure_cost --out DIR` writes: in the terminal, in report.md, in
report.html and in report.json; a file that is not one is named as a problem."""

import json

import compare
from common.report import measured_files
from tests.records import write_run

ROW = {
    "case": "tf-mwms",
    "launcher": "slurm",
    "ranks": 2,
    "step_s": 0.027,
    "save_s": 0.041,
    "save_per_step_s": 0.00205,
    "notice_s": 7.12,
    "recover_s": 4.02,
    "steps_lost": 10,
    "load_s": 0.047,
    "resharded_load_s": 0.035,
    "resharded_to": 1,
}


def test_the_lost_rank_table_is_shown_and_written(tmp_path, capsys):
    write_run(tmp_path / "run" / "metrics.jsonl")
    measured_files.write(tmp_path / "failure_cost-slurm.json", [ROW], ["python", "-m", "x"])
    out = tmp_path / "report"
    assert compare.main([str(tmp_path), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "== What a lost rank costs" in printed
    (line,) = [line for line in printed.splitlines() if line.strip().startswith("tf-mwms")]
    assert line.split() == [
        *("tf-mwms", "slurm", "2", "0.0270", "0.041", "0.0021", "7.12", "4.02", "10"),
        *("0.047", "0.035", "1"),
    ]
    assert "failure_cost-slurm.json: measured " in printed
    markdown = (out / "report.md").read_text()
    assert "| tf-mwms | slurm | 2 | 0.0270 | 0.041 | 0.0021 | 7.12 | 4.02 | 10 |" in markdown
    assert "<td>7.12</td>" in (out / "report.html").read_text()
    document = json.loads((out / "report.json").read_text())
    assert document["lost_rank"]["rows"][0][:3] == ["tf-mwms", "slurm", "2"]


def test_a_file_that_is_not_the_tools_is_a_problem(tmp_path, capsys):
    write_run(tmp_path / "run" / "metrics.jsonl")
    (tmp_path / "failure_cost-local.json").write_text('{"rows": [{"case": "x"}]}')
    assert compare.main([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "failure_cost-local.json: not a failure-cost file of python -m" in err
