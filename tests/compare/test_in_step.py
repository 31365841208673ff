"""A step's calls as the step issues them: a run records where in its step each call came
(`CallSize.at`), the link tool times a step of several kinds in that order (`Point.in_step_s`),
and the projection prices each such call at its time in the step, not alone."""

import pytest

import compare
from common.core.config.config_io import load_config
from common.core.measure.traffic import wire_bytes
from common.core.records.entries import CallSize, TrafficEntry
from common.projection import link_profile, profiles, step_model
from common.report.runs import RecordedRun
from tests.compare.test_projection import profile
from tests.records import changed, epoch, start, write_run

GATHER, SCATTER = 200_960, 1_607_680  # the MLP's first unit at 8 ranks: its shard, its buffer


def point(kind: str, payload: int, seconds: float, in_step: float | None = None, cpu=None):
    wire = wire_bytes(kind, payload, 8)
    return link_profile.Point(
        payload_bytes=payload, wire_bytes=wire, seconds=seconds, in_step_s=in_step, cpu_s=cpu
    )


def eight(in_step: float | None, cpu: float | None = None) -> link_profile.LinkProfile:
    """8 ranks: an all-gather of 200,960 B takes 65 ms alone (`in_step` in the step), a
    reduce-scatter of 1,607,680 B 130 ms; a smaller size of each besides."""
    gather = [
        point("all_gather", 4096, 12e-3, cpu=cpu),
        point("all_gather", GATHER, 65e-3, in_step, cpu),
    ]
    scatter = [
        point("reduce_scatter", 4096, 18e-3, cpu=cpu),
        point("reduce_scatter", SCATTER, 130e-3, cpu=cpu),
    ]
    kinds = {}
    for kind, points in (("all_gather", gather), ("reduce_scatter", scatter)):
        alpha, beta = link_profile.fit(points)
        kinds[kind] = link_profile.KindFit(alpha_s=alpha, beta_s_per_byte=beta, points=points)
    hosts = [f"n{i}" for i in range(1, 9)]
    return profile(hosts).model_copy(update={"world_size": 8, "launcher": "slurm", "kinds": kinds})


def fsdp2_run() -> RecordedRun:
    """fsdp2 x8 of one unit: gather, gather again for the backward, then scatter."""
    sizes = {"all_gather": (GATHER, [0, 1]), "reduce_scatter": (SCATTER, [2])}
    traffic = [
        TrafficEntry(
            phase="train",
            kind=kind,
            calls=float(len(at)),
            payload_bytes=float(payload * len(at)),
            wire_bytes=wire_bytes(kind, payload, 8) * len(at),
            expected_calls=None,
            expected_payload_bytes=None,
            sizes=[CallSize(payload_bytes=float(payload), calls=float(len(at)), at=at)],
        )
        for kind, (payload, at) in sizes.items()
    ]
    cfg = load_config(None, ["torch.strategy=fsdp2"])
    hosts = [f"n{i}" for i in range(1, 9)]
    begun = changed(start(cfg=cfg), strategy="fsdp2", world_size=8, hosts=hosts)
    epochs = [changed(epoch(n, 0.9, 2.0 * n), traffic=traffic) for n in (1, 2)]
    return RecordedRun("r/metrics.jsonl", [begun, *epochs])


def test_a_call_timed_in_its_step_is_priced_at_its_time_there():
    """The all-gather took 80 ms in the step's order against 65 alone: two of them and the
    scatter are 2 x 80 + 130 ms, not 2 x 65 + 130."""
    run = fsdp2_run()
    assert step_model.communication_s(run, eight(None), 8) == pytest.approx(2 * 65e-3 + 130e-3)
    assert step_model.communication_s(run, eight(80e-3), 8) == pytest.approx(2 * 80e-3 + 130e-3)


def test_the_step_order_is_read_from_where_each_call_came():
    """`sequence_at`: the run's calls one by one in their step's order, at the world asked."""
    order = step_model.sequence_at(fsdp2_run(), 8)
    assert [(each.kind, round(each.payload)) for each in order] == [
        ("all_gather", GATHER),
        ("all_gather", GATHER),
        ("reduce_scatter", SCATTER),
    ]
    quarter = step_model.sequence_at(fsdp2_run(), 16)  # twice the shards: half the gather
    assert [round(each.payload) for each in quarter] == [GATHER // 2, GATHER // 2, SCATTER]


def test_repeats_take_the_median_in_step_and_the_cpu_model_leaves_it_out():
    """Three repeats of 70, 80 and 95 ms in the step give 80; a profile read as CPU prices
    CPU, so its points keep no time in the step."""
    median = profiles.median_of([eight(70e-3, 1e-3), eight(95e-3, 1e-3), eight(80e-3, 1e-3)])
    assert median.kinds["all_gather"].points[1].in_step_s == pytest.approx(80e-3)
    assert (
        profiles.median_of([eight(70e-3), eight(None)]).kinds["all_gather"].points[1].in_step_s
        is None
    )
    cpu = profiles.cpu_of(eight(80e-3, 2e-3))
    assert cpu is not None
    assert all(p.in_step_s is None for fit in cpu.kinds.values() for p in fit.points)
    assert step_model.communication_s(fsdp2_run(), cpu, 8) == pytest.approx(3 * 2e-3)


def test_the_report_says_where_a_profile_priced_calls_in_their_step(tmp_path, capsys):
    """compare --project's header of a profile says it prices a run's step of several kinds at
    the times its link tool took in that step's order, where it has them; else nothing."""
    write_run(tmp_path / "run" / "metrics.jsonl")
    for in_step, said in ((80e-3, True), (None, False)):
        link_profile.write(eight(in_step), tmp_path / "links.json")
        assert compare.main([str(tmp_path), "--project", "8"]) == 0
        out = capsys.readouterr().out
        assert ("calls of a run's step timed in its order priced so" in out) == said, out
