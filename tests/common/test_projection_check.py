"""The projection benchmark's verdict and its command line (common.tools.projection_check); the
benchmark itself runs on the SLURM test cluster, as root, by hand (docs/communication.md)."""

import pytest

from common.tools import projection_check
from common.tools.projection_table import judged, table


def test_a_measurement_inside_a_narrow_range_holds():
    row = judged("ddp", "50mbit", 8, measured=100.0, low=98.0, high=104.0)
    assert row.error == 0.0
    assert row.ok


@pytest.mark.parametrize(("measured", "ok"), [(95.5, True), (94.5, False), (104.9, True)])
def test_the_error_is_taken_against_the_nearer_end(measured, ok):
    row = judged("mwms", "200mbit", 8, measured=measured, low=100.0, high=100.0)
    assert row.error == pytest.approx(measured / 100.0 - 1)
    assert row.ok is ok


def test_a_range_wider_than_ten_percent_fails_even_around_the_measurement():
    row = judged("fsdp2", "200mbit", 8, measured=300.0, low=297.0, high=375.0)
    assert row.error == 0.0
    assert row.width == pytest.approx(375 / 297 - 1)
    assert not row.ok


def test_the_table_gives_each_row_its_projection_and_verdict():
    rows = [
        judged("ddp", "50mbit", 8, measured=430.0, low=376.0, high=376.0),
        judged("fsdp2", "200mbit", 8, measured=268.0, low=297.0, high=375.0),
    ]
    lines = table(rows).splitlines()
    assert lines[2] == "| ddp | 50mbit | 8 | 2 | 430 | 376 | +14.4% | 0.0% | no |"
    assert lines[3] == "| fsdp2 | 200mbit | 8 | 2 | 268 | 297-375 | -9.8% | 26.3% | no |"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--nodes", "8"], "two node counts at least"),
        (["--nodes", "1,8"], "the fewest 2 or more"),
        (["--nodes", "two,8"], "give node counts such as 2,8"),
        (["--strategies", "ddp,zero3"], "unknown zero3"),
        (["--rates", "off"], "'off' checks no link"),
        (["--rates", "25mbit", "--from", "/nonexistent"], "no folder of 25mbit"),
    ],
)
def test_bad_arguments_name_the_problem_and_exit_2(argv, said, capsys):
    with pytest.raises(SystemExit) as stopped:
        projection_check.arguments(argv)
    assert stopped.value.code == 2
    assert said in capsys.readouterr().err


def test_every_strategy_is_priced_by_a_profile_the_check_measures():
    for framework, _, per_node, profile in projection_check.CASES.values():
        module, profile_per_node, _, _ = projection_check.PROFILES[profile]
        assert module.startswith(f"{framework}_impl.")
        assert profile_per_node == per_node


def _keep_run(folder, nodes: int, samples_s: float, job: int = 0) -> None:
    """ddp on `nodes` nodes, kept as the check keeps it: FOLDER/ddp-xN-JOB/metrics.jsonl."""
    from common.core.records.metrics import MetricsWriter
    from tests.compare.test_projection import ddp_run
    from tests.records import changed

    run = ddp_run()
    hosts = [f"n{rank + 1}" for rank in range(nodes)]
    records = [changed(run.start, world_size=nodes, hosts=hosts)]
    records += [changed(epoch, samples_per_s=samples_s) for epoch in run.epochs]
    with MetricsWriter(folder / f"ddp-x{nodes}-{job or nodes}" / "metrics.jsonl") as writer:
        for record in records:
            writer.write(record)


def test_profiles_kept_on_more_nodes_price_each_row_a_second_time(tmp_path, capsys):
    """`--from` a check with `--profiles-at all`: each row priced with the fewest nodes'
    profile, then with every profile kept (here 8 nodes' at 20 ms a call, where the 2 nodes'
    latency per step prices 7 ms)."""
    from common.projection import link_profile
    from tests.compare.test_link_pricing import launch_profile

    folder = tmp_path / "50mbit"
    link_profile.write(launch_profile(2, 1e-3), projection_check.profile_path(folder, "torch"))
    _keep_run(folder, 2, 6400.0)  # a 10 ms step: 2 ms of it the all-reduce, 8 ms compute
    _keep_run(folder, 8, 2400.0)
    argv = ["--from", str(tmp_path), "--rates", "50mbit", "--strategies", "ddp"]
    projection_check.main(argv)
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ddp")]
    # compute 8 ms x 2/8 = 2 ms; the all-reduce 14 steps x 0.5 ms + 1.75 MB x 1 ns: 8.75 ms
    assert row.startswith("| ddp | 50mbit | 8 | 2 | 2,400 | 5,953-7,314 |")
    eight = launch_profile(8, 20e-3)
    link_profile.write(eight, projection_check.profile_path(folder, "torch", 8))
    projection_check.main(argv)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ddp")]
    assert [row.split(" | ")[3] for row in rows] == ["2", "2,8"]
    # the all-reduce 20 ms + 1.75 MB x 1 ns from 8 nodes' own points: 21.75 ms
    assert rows[1].startswith("| ddp | 50mbit | 8 | 2,8 | 2,400 | 2,695-2,943 |")


def test_repeated_runs_give_the_median_of_their_speeds_and_projections(tmp_path, capsys):
    """Three runs of each (--repeats 3, kept under their job ids): the row takes the median
    measured speed (2,400 of 2,000, 2,400 and 9,000) and the median projection (the 2-node runs
    at 6,400 samples/s twice and 3,200 once: 6,400's)."""
    from common.projection import link_profile
    from tests.compare.test_link_pricing import launch_profile

    folder = tmp_path / "50mbit"
    link_profile.write(launch_profile(2, 1e-3), projection_check.profile_path(folder, "torch"))
    for job, (two, eight) in enumerate([(6400, 2000), (6400, 2400), (3200, 9000)], start=10):
        _keep_run(folder, 2, two, job)
        _keep_run(folder, 8, eight, job)
    projection_check.main(["--from", str(tmp_path), "--rates", "50mbit", "--strategies", "ddp"])
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ddp")]
    assert row.startswith("| ddp | 50mbit | 8 | 2 | 2,400 | 5,953-7,314 |")
    with pytest.raises(SystemExit):
        projection_check.arguments(["--repeats", "0"])
    assert "--repeats 0: give 1 or more" in capsys.readouterr().err


def test_hsdp_is_priced_on_more_nodes_by_its_own_tiers_profile_there(tmp_path, capsys):
    """hsdp's second row merges the tiers profile of 8 nodes (links-torch-tiers-x8.json), not
    torch's profile of 1 rank a node kept beside it for ddp and fsdp2."""
    from common.core.records.metrics import MetricsWriter
    from common.projection import link_profile, profiles, step_model
    from tests.compare.test_link_pricing import hsdp_run, launch_profile, tiered_profile
    from tests.records import changed

    folder = tmp_path / "200mbit"
    two, eight = tiered_profile(2, 1e-3), tiered_profile(8, 20e-3)
    link_profile.write(two, projection_check.profile_path(folder, "torch-tiers"))
    link_profile.write(eight, projection_check.profile_path(folder, "torch-tiers", 8))
    link_profile.write(launch_profile(8, 1e-3), projection_check.profile_path(folder, "torch", 8))
    run = hsdp_run()
    for nodes in (2, 8):
        hosts = [f"n{node}" for node in range(1, nodes + 1) for _ in (0, 1)]
        records = [changed(run.start, world_size=2 * nodes, hosts=hosts), *run.epochs]
        with MetricsWriter(folder / f"hsdp-x{nodes}-{nodes}" / "metrics.jsonl") as writer:
            for record in records:
                writer.write(record)
    projection_check.main(["--from", str(tmp_path), "--rates", "200mbit", "--strategies", "hsdp"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| hsdp")]
    (at16,), _ = step_model.project(run, profiles.merged([two, eight]), [16])
    low, high = at16.samples_s_low, at16.samples_s_high
    assert rows[1].startswith(f"| hsdp | 200mbit | 8 | 2,8 | 6,400 | {low:,.0f}-{high:,.0f} |")


def test_repeated_profiles_price_by_the_median_of_each_point(tmp_path, capsys):
    """--repeats measures each profile again (links-torch.r2.json, .r3.json): a row is priced
    from each point's median, so one repeat at 30 ms a call among two at 1 ms prices as 1 ms
    (the row of the first test above), and a repeat of other sizes is refused, naming why."""
    from common.projection import link_profile, profiles
    from tests.compare.test_link_pricing import launch_profile, tiered_profile, with_cpu

    folder = tmp_path / "50mbit"
    slow, fast = launch_profile(2, 30e-3), launch_profile(2, 1e-3)
    link_profile.write(slow, projection_check.profile_path(folder, "torch"))
    for repeat in (2, 3):
        link_profile.write(fast, projection_check.profile_path(folder, "torch", repeat=repeat))
    assert projection_check.profile_path(folder, "torch", 8, 2).name == "links-torch-x8.r2.json"
    _keep_run(folder, 2, 6400.0)
    _keep_run(folder, 8, 2400.0)
    projection_check.main(["--from", str(tmp_path), "--rates", "50mbit", "--strategies", "ddp"])
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ddp")]
    assert row.startswith("| ddp | 50mbit | 8 | 2 | 2,400 | 5,953-7,314 |")
    median = profiles.median_of([slow, fast, fast])
    assert median.kinds["all_reduce"].alpha_s == pytest.approx(1e-3)
    cpu = [with_cpu(each, cpu_s) for each, cpu_s in [(slow, 9e-3), (fast, 1e-3), (fast, 2e-3)]]
    assert {point.cpu_s for point in profiles.median_of(cpu).kinds["all_reduce"].points} == {2e-3}
    assert median.kinds["all_reduce"].points[0].cpu_s is None  # not measured in every repeat
    tiered = profiles.median_of([tiered_profile(2, alpha) for alpha in (20e-3, 1e-3, 2e-3)])
    across = tiered.tiers["inter_node"].kinds["all_reduce"]
    assert across.points[0].seconds == pytest.approx(2e-3 + 8e-9)  # 8 B at 1 ns a byte
    fewer = fast.model_copy(update={"kinds": {}})
    with pytest.raises(ValueError, match="measured other collectives or sizes"):
        profiles.median_of([fast, fewer])
    other = launch_profile(4, 1e-3)  # a repeat kept from another launch size
    link_profile.write(other, projection_check.profile_path(folder, "torch", repeat=4))
    argv = ["--from", str(tmp_path), "--rates", "50mbit", "--strategies", "ddp"]
    assert projection_check.main(argv) == 1
    assert "measured other collectives or sizes" in capsys.readouterr().err
