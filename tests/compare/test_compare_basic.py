import json
import shutil

import pytest

import compare
from common.core.config.config_io import load_config
from tests.records import changed, start_record, write_run


def test_valid_runs_are_tabled_and_broken_files_named(tmp_path, capsys):
    write_run(tmp_path / "good" / "metrics.jsonl")
    write_run(tmp_path / "cut" / "metrics.jsonl")
    cut = tmp_path / "cut" / "metrics.jsonl"
    cut.write_text(cut.read_text()[:-30])
    assert compare.main([str(tmp_path)]) == 0  # a cut line is a problem of that line only
    out, err = capsys.readouterr()
    (row,) = [line.split() for line in out.splitlines()[2:3]]  # repeats fold into one row
    # framework, strategy, workers, layout (nodes x ranks per node, launcher), runs
    assert row[:6] == ["torch", "ddp", "2", "1x2", "local", "2"]
    assert row[-1] == "success,unfinished"
    assert f"warning: {cut}:6: truncated last line" in err


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


def test_deterministic_and_default_runs_are_not_repeats(tmp_path, capsys):
    write_run(tmp_path / "default" / "metrics.jsonl")
    strict = load_config(None, ["train.target_accuracy=0.9", "dist.deterministic=true"])
    write_run(tmp_path / "strict" / "metrics.jsonl", cfg=strict)
    assert compare.main([str(tmp_path), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    groups = [json.loads(line) for line in out.splitlines()]
    assert sorted(g["key"]["dist.deterministic"] for g in groups) == [False, True]
    assert "are not put beside the first group: dist.deterministic" in err


def test_copies_of_one_run_count_once(tmp_path, capsys):
    write_run(tmp_path / "run" / "metrics.jsonl")
    for copy in ("copy1", "copy2"):
        shutil.copytree(tmp_path / "run", tmp_path / copy)
    assert compare.main([str(tmp_path), str(tmp_path / "run"), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    (group,) = [json.loads(line) for line in out.splitlines()]
    assert group["rows"][0]["runs"] == 1
    assert err.count("(same run_id and start time): counted once") == 2


def test_a_target_given_in_percent_is_refused(tmp_path, capsys):
    write_run(tmp_path / "run" / "metrics.jsonl")
    with pytest.raises(SystemExit) as stopped:
        compare.main([str(tmp_path), "--target", "97"])
    assert (
        stopped.value.code == 2 and "--target is an accuracy in (0, 1]" in capsys.readouterr().err
    )


def test_the_verdict_reads_the_rows():
    from common.report import verdict
    from common.report.rows import Row

    def row(framework, strategy, world, samples, state, final, target_s=None):
        return Row(
            framework=framework,
            strategy=strategy,
            world=world,
            layout="1x1 local",
            runs=3,
            samples_s=samples,
            samples_s_low=samples * 0.9,
            samples_s_high=samples * 1.1,
            state_mib=state,
            final_acc=final,
            target_s=target_s,
        )

    rows = [
        row("torch", "single", 1, 50_000, 1.7, 0.966, 30.0),
        row("torch", "ddp", 2, 20_000, 1.7, 0.967),
        row("torch", "fsdp2", 2, 4_000, 0.8, 0.967),
        row("tf", "mwms", 1, 30_000, 1.7, 0.9662),
        row("tf", "mwms", 2, 10_000, 1.7, 0.9664),
    ]
    rows[1].efficiency, rows[1].baseline = 0.2, "single x1"
    said = verdict.sentences(rows, target=0.96)
    fastest = "Fastest: torch single x1 at 50,000 samples/s [95% interval 45,000-55,000]"
    assert said[0] == fastest + " (median of 3 runs)."
    speedup = "torch ddp x2 runs at 0.40x torch single x1 [95% interval 0.36-0.44]"
    assert speedup + ": scaling efficiency 20%." in said
    assert "At 2 worker(s) the faster framework is torch: torch ddp x2 is 2.00x tf mwms x2." in said
    assert any(
        s.startswith("At 2 worker(s), torch fsdp2 x2 holds 0.47x the training state") for s in said
    )
    assert "Final accuracies agree within 0.10 points (96.60% to 96.70%)." in said
    assert said[-1] == "First to 96.00% validation accuracy: torch single x1, after 30.0 s."
    (pair,) = [s for s in said if "shards the parameters" in s]
    assert pair.startswith("At 2 worker(s), torch fsdp2 shards the parameters") and (
        "tf mwms replicates them" in pair and "no FSDP counterpart" in pair
    ), pair


def test_differences_within_the_spread_of_repeats_are_no_measurable_difference():
    from common.report import verdict
    from common.report.rows import Row

    def row(framework, strategy, samples, spread, final, acc_spread, gpu=False):
        return Row(
            framework=framework,
            strategy=strategy,
            world=2,
            layout="1x2 local",
            runs=5,
            samples_s=samples,
            samples_s_spread=spread,
            final_acc=final,
            final_acc_spread=acc_spread,
            gpu_nondeterministic=gpu,
        )

    rows = [
        row("torch", "ddp", 21_000, 1_500, 0.9700, 0.004),
        row("torch", "fsdp2", 20_000, 500, 0.9690, 0.002),
        row("tf", "mwms", 10_000, 300, 0.9600, 0.003),
    ]
    said = verdict.sentences(rows, target=0.99)
    assert "At 2 worker(s) the faster framework is torch: torch ddp x2 is 2.10x tf mwms x2." in said
    assert (
        "Within torch at 2 worker(s), torch ddp x2 and torch fsdp2 x2 show no measurable "
        "difference: 21,000 and 20,000 samples/s differ by 1,000, less than the spread of their "
        "repeats (1,500 samples/s)." in said
    )
    assert not any("tf mwms x2 show no measurable" in s for s in said)
    assert "Final accuracies differ by 1.00 points: torch ddp x2 97.00%, tf mwms x2 96.00%." in said
    rows[2].final_acc, rows[2].final_acc_spread = 0.9640, 0.012
    said = verdict.sentences(rows, target=0.99)
    assert any(s.startswith("Final accuracies show no measurable difference") for s in said)
    assert not any("GPU runs were not deterministic" in s for s in said)
    rows[0].gpu_nondeterministic = True
    assert any("GPU runs were not deterministic" in s for s in verdict.sentences(rows, 0.99))


def test_runs_of_different_layouts_are_rows_of_their_own(tmp_path):
    """1 node x 2 ranks and 2 nodes x 1 rank measure different things (no network, or one)."""

    from common.core.records import metrics
    from common.report.rows import rows_for
    from common.report.runs import RecordedRun

    runs = []
    for name, hosts, launcher in (
        ("a", ["n1", "n1"], "local"),
        ("b", ["n1", "n1"], "local"),
        ("c", ["n1", "n2"], "slurm"),
    ):
        write_run(tmp_path / name / "metrics.jsonl")
        records = metrics.read_records(tmp_path / name / "metrics.jsonl")
        records[0] = changed(records[0], hosts=hosts, launcher=launcher)
        runs.append(RecordedRun(str(tmp_path / name / "metrics.jsonl"), records))
    rows = rows_for(runs)
    assert [(r.strategy, r.layout, r.runs) for r in rows] == [
        ("ddp [1x2 local]", "1x2 local", 2),
        ("ddp [2x1 slurm]", "2x1 slurm", 1),
    ]
    three = changed(runs[0].start, hosts=["a", "a", "b"], world_size=3)
    uneven = RecordedRun(runs[0].path, [three])
    assert uneven.layout == "2+1 local"


def test_a_scaling_figure_from_ranks_that_shared_the_cores_says_so():

    from common.report.runs import RecordedRun
    from tests.records import start

    def shared(hosts, cores, device="cpu"):
        begun = changed(start(), hosts=hosts, host_cores=cores, device_type=device)
        return RecordedRun(path="m", records=[begun]).shared_cores()

    assert shared(["a", "a"], 2) == "2 ranks x 1 thread on 2 cores"
    assert shared(["a", "b"], 2) == ""  # one rank per host
    assert shared(["a", "a"], 16) == ""  # cores to spare
    assert shared(["a", "a"], 2, device="gpu") == ""


def test_value_labels_of_one_worker_count_do_not_overlap():
    from common.report.render import style

    plt = style.pyplot()
    figure, axis = plt.subplots()
    axis.plot([1, 2], [0, 100])
    values = [100.0, 100.0, 99.0, 98.5, 40.0]
    style.place_labels(axis, [(2, 2.0, y, "black") for y in values])
    figure.canvas.draw()
    texts = axis.texts
    assert sorted(t.get_text() for t in texts) == ["100", "40", "98.5", "99"]  # no repeat
    boxes = [t.get_window_extent() for t in texts]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    plt.close(figure)


def test_speed_differences_carry_a_welch_p_value_and_need_3_repeats(tmp_path, capsys):
    """Repeats as compare reads them from metrics files: torch ddp x2 at 6,000 +- 50 samples/s
    against tf mwms x2 at 5,000 +- 50 is a finding; 5,030 against 5,000 is not; 2 repeats a
    row give no test."""
    from tests.records import epoch, start

    def repeats(folder, framework, strategy, speeds):
        for index, speed in enumerate(speeds):
            begun = changed(start(f"{folder}{index}"), framework=framework)
            begun = changed(begun, strategy=strategy)
            epochs = [changed(epoch(n, 0.9, n), samples_per_s=speed) for n in (1, 2, 3)]
            path = tmp_path / folder / f"{folder}{index}" / "metrics.jsonl"
            path.parent.mkdir(parents=True)
            from common.core.records.metrics import MetricsWriter

            with MetricsWriter(path) as writer:
                for record in [begun, *epochs]:
                    writer.write(record)

    repeats("a", "torch", "ddp", [6000, 6050, 5950, 6020])
    repeats("b", "tf", "mwms", [5000, 5040, 4960, 5010])
    compare.main([str(tmp_path / "a"), str(tmp_path / "b")])
    said = capsys.readouterr().out
    assert (
        "the faster framework is torch: torch ddp x2 is 1.20x tf mwms x2 (Welch's t-test p = "
        in said
    )
    assert "mean ± standard error 6,005 ± 21 and 5,002 ± 17 samples/s" in said
    compare.main([str(tmp_path / "a"), "--format", "json"])
    (row,) = json.loads(capsys.readouterr().out)["rows"]  # per row: mean, standard error, spread
    assert (round(row["samples_s_mean"]), round(row["samples_s_sem"])) == (6005, 21)
    assert row["samples_s_spread"] == 100
    repeats("c", "tf", "mwms", [5980, 6040, 5960, 6010])
    compare.main([str(tmp_path / "a"), str(tmp_path / "c")])
    said = capsys.readouterr().out
    assert "torch ddp x2 and tf mwms x2 show no measurable difference: Welch's t-test p = " in said
    assert "not below 0.01" in said
    repeats("d", "tf", "mwms", [5000, 5040])
    compare.main([str(tmp_path / "a"), str(tmp_path / "d")])
    assert "no significance test was possible with 2 repeats of one of them; it takes 3 a row" in (
        capsys.readouterr().out
    )


def test_runs_of_several_steps_per_call_are_rows_of_their_own():
    from common.report.rows import rows_for
    from common.report.runs import RecordedRun
    from tests.records import epoch, start

    def run(per_call):
        begun = start(f"k{per_call}")
        config = {**begun.config, "train": {**begun.config["train"], "steps_per_call": per_call}}
        records = [changed(begun, config=config), *(epoch(n, 0.9, n) for n in (1, 2))]
        return RecordedRun(f"k{per_call}/metrics.jsonl", records)

    ones, sixteens = run(1), run(16)
    assert ones.comparable() == sixteens.comparable()  # one experiment, dispatched otherwise
    assert (ones.row_variant(), sixteens.row_variant()) == ("", "steps_per_call=16")
    assert [row.strategy for row in rows_for([ones, sixteens])] == [
        "ddp",
        "ddp (steps_per_call=16)",
    ]
