"""The projection's arithmetic on a run whose numbers are known, and what it says instead of a
number when it cannot give one: no profile, a world below the run's own, a run without
traffic records, a profile of other hosts."""

from pathlib import Path

import jsonschema
import pytest

import compare
from common.core.records.entries import StepSplit, TrafficEntry
from common.core.records.metrics import MetricsWriter
from common.projection import link_profile, reasons, step_model
from common.report.runs import RecordedRun
from tests.records import changed, epoch, start, write_run

MB = 1_000_000


def profile(hosts=("localhost",)) -> link_profile.LinkProfile:
    points = [  # 1 ms a call, 1 GB/s
        link_profile.Point(payload_bytes=size, wire_bytes=size, seconds=1e-3 + size * 1e-9)
        for size in (8, 1 << 20)
    ]
    fit = link_profile.KindFit(alpha_s=1e-3, beta_s_per_byte=1e-9, points=points)
    return link_profile.LinkProfile(
        time="2026-11-24T00:00:00+00:00",
        framework="torch",
        transport="gloo",
        device_type="cpu",
        world_size=2,
        hosts=list(hosts),
        launcher="local",
        launch_id="",
        kinds={"all_reduce": fit},
    )


def profiles(**by_framework: link_profile.LinkProfile):
    """compare's profiles of a projection: torch's `profile()` unless others are given."""
    from common.projection.profiles import Profiles

    chosen = by_framework or {"torch": profile()}
    return Profiles({name: (Path(f"links-{name}.json"), fit) for name, fit in chosen.items()})


def split(compute_s=8e-3, optimizer_s=0.0) -> StepSplit:
    """A profiled step's split; by default all of ddp_run's step less its 2 ms of
    communication is compute, as the projection takes a run without one."""
    return StepSplit(
        compute_s=compute_s,
        optimizer_s=optimizer_s,
        framework_s=0.0,
        collectives_s=0.0,
        wall_s=10e-3,
        source="a test",
    )


def ddp_run(traffic=True, step_split=None) -> RecordedRun:
    """torch ddp x2, global batch 64: 6,400 samples/s is a 10 ms step, with one all-reduce of
    1 MB per step when `traffic`; its step split `step_split`, else `split()`."""
    sent = [
        TrafficEntry(
            phase="train",
            kind="all_reduce",
            calls=1,
            payload_bytes=MB,
            wire_bytes=MB,
            expected_calls=1,
            expected_payload_bytes=MB,
        )
    ]
    epochs = [
        changed(
            epoch(n, 0.9, 2.0 * n),
            samples_per_s=6400.0,
            traffic=sent if traffic else None,
            step_split=step_split or split(),
        )
        for n in (1, 2, 3)
    ]
    begun = changed(start(), hosts=["localhost", "localhost"])
    return RecordedRun("r/metrics.jsonl", [begun, *epochs])


def test_a_strong_scaling_step_is_compute_shared_out_plus_the_ring_at_the_new_size():
    run = ddp_run()
    assert run.start.global_batch_size == 64 and run.start.world_size == 2
    # at 2 ranks: 1 ms + 1 MB x 2(1)/2 x 1 ns = 2 ms of the 10 ms step; compute 8 ms
    assert step_model.communication_s(run, profile(), 2) == pytest.approx(2e-3)
    (at8,), caveats = step_model.project(run, profile(), [8])
    # at 8 ranks: compute 8 ms x 2/8 = 2 ms; the ring's latency: alpha was 2 steps of 0.5 ms at
    # 2 ranks, and at 8 an all-reduce takes 2(8-1) = 14 of them, 7 ms; 1 MB x 2(7)/8 x 1 ns =
    # 1.75 ms on the wire: 8.75 ms
    assert caveats == [] and at8.communication_s == pytest.approx(8.75e-3)
    assert (at8.step_fast_s, at8.step_slow_s) == pytest.approx((8.75e-3, 10.75e-3))
    assert at8.samples_s_low == pytest.approx(64 / 10.75e-3)
    assert at8.efficiency_low == pytest.approx(16e-3 / (8 * 10.75e-3))  # 1 worker: 16 ms


def test_overhead_stays_and_a_replica_s_optimizer_stays_while_compute_is_shared_out():
    """Hand-worked: of the 10 ms step, 2 ms communication at 2 ranks (as above); the split says
    3 ms compute and 2 ms optimizer, so 3 ms of overhead. At 8 ranks: compute 3 x 2/8 = 0.75 ms,
    ddp's optimizer (a replica) 2 ms, overhead 3 ms, communication 8.75 ms: 14.5 ms without
    overlap (10.75 ms when all of it was taken as compute). Only the compute runs beside the
    collectives: with full overlap the step is 2 + 3 + max(0.75, 8.75) = 13.75 ms."""
    run = ddp_run(step_split=split(compute_s=3e-3, optimizer_s=2e-3))
    (at8,), caveats = step_model.project(run, profile(), [8])
    assert caveats == [] and at8.overhead_s == pytest.approx(3e-3)
    assert at8.step_slow_s == pytest.approx(0.75e-3 + 2e-3 + 3e-3 + 8.75e-3)
    assert at8.step_fast_s == pytest.approx(2e-3 + 3e-3 + 8.75e-3)
    # one worker: compute 6 ms, optimizer 2 ms, overhead 3 ms
    assert at8.efficiency_low == pytest.approx(11e-3 / (8 * at8.step_slow_s))


def test_a_split_larger_than_the_step_leaves_no_overhead_and_none_is_said():
    """A profiled step runs slower than the median (the profiler's own cost): its compute is
    taken up to what the step leaves; without a split the caveat says what was assumed."""
    run = ddp_run(step_split=split(compute_s=20e-3, optimizer_s=5e-3))
    (at8,), caveats = step_model.project(run, profile(), [8])
    assert caveats == [] and at8.overhead_s == 0 and at8.step_slow_s == pytest.approx(10.75e-3)
    bare = RecordedRun(
        "r/metrics.jsonl",
        [ddp_run().start, *(changed(e, step_split=None) for e in ddp_run().epochs)],
    )
    (same,), caveats = step_model.project(bare, profile(), [8])
    assert same.step_slow_s == pytest.approx(10.75e-3)
    (said,) = caveats
    assert said.startswith("torch ddp x2: no step split recorded") and "shrink" in said, said


def test_latency_grows_with_the_steps_of_the_algorithm():
    """Hand-worked: an all-reduce fit of alpha 1 ms at 2 ranks is 0.5 ms a step (2 steps),
    also for a kind it prices but did not time (an all-gather here, of 1 step at 2). A ring
    pays 2(n-1) and n-1 steps; NCCL's tree all-reduce 2 ceil(log2 n), and NCCL takes the
    fewer."""
    gloo, nccl = profile(), profile().model_copy(update={"transport": "nccl"})
    no_bytes = 0.0
    assert gloo.seconds("all_reduce", 1, no_bytes, 2) == pytest.approx(1e-3)
    assert gloo.seconds("all_reduce", 1, no_bytes, 8) == pytest.approx(14 * 0.5e-3)
    assert gloo.seconds("all_reduce", 1, no_bytes, 512) == pytest.approx(1022 * 0.5e-3)
    assert gloo.seconds("all_gather", 2, no_bytes, 8) == pytest.approx(2 * 7 * 0.5e-3)
    assert nccl.seconds("all_reduce", 1, no_bytes, 8) == pytest.approx(6 * 0.5e-3)
    assert nccl.seconds("all_reduce", 1, no_bytes, 512) == pytest.approx(18 * 0.5e-3)
    assert nccl.seconds("all_reduce", 1, no_bytes, 3) == pytest.approx(4 * 0.5e-3)  # a tie
    assert gloo.seconds("all_reduce", 1, 1e6, 8) == pytest.approx(7e-3 + 1e6 * 1e-9)


def test_no_rank_is_projected_without_a_sample_under_strong_scaling():
    """Global batch 64: 64 workers keep one sample each, 512 would keep an eighth."""
    rows, caveats = step_model.project(ddp_run(), profile(), [8, 64, 512])
    assert [row.world for row in rows] == [8, 64]
    (said,) = caveats
    assert "not projected to 512 workers" in said and "64 workers at most" in said, said
    rows, caveats = step_model.project(ddp_run(), profile(), [512], scaling="weak")
    (at512,) = rows
    assert caveats == [] and at512.world == 512
    # weak: each rank keeps 32 samples and its 8 ms of compute; the global batch is 16,384
    comm = 1022 * 0.5e-3 + 1e6 * 2 * 511 / 512 * 1e-9
    assert at512.step_slow_s == pytest.approx(8e-3 + comm)
    assert at512.samples_s_low == pytest.approx(32 * 512 / (8e-3 + comm))


def test_what_cannot_be_projected_is_said_not_guessed():
    rows, caveats = step_model.project(ddp_run(), profile(), [1])
    assert rows == [] and "not projected to 1 workers, below its own 2" in caveats[0]
    rows, caveats = step_model.project(ddp_run(traffic=False), profile(), [8])
    assert rows == [] and "no traffic recorded" in caveats[0]
    assert "measured on elsewhere" in step_model.host_caveat([ddp_run()], profile(["elsewhere"]))


def test_compare_projects_with_a_profile_and_refuses_without_one(tmp_path, capsys):
    write_run(tmp_path / "run" / "metrics.jsonl")
    assert compare.main([str(tmp_path), "--project", "8"]) == 1
    assert "--project needs a link profile" in capsys.readouterr().err
    assert compare.main([str(tmp_path), "--project", "8", "--links", str(tmp_path / "no")]) == 1
    assert "no such file" in capsys.readouterr().err
    link_profile.write(profile(), tmp_path / "links.json")
    with pytest.raises(SystemExit) as refused:  # before any work, as a usage error
        compare.main([str(tmp_path), "--project", "8,x"])
    assert refused.value.code == 2
    assert "worker counts like 2,8,64" in capsys.readouterr().err
    compare.main([str(tmp_path), "--project", "8"])
    out = capsys.readouterr().out
    assert "== projection with the link profile" in out and "no traffic recorded" in out
    compare.main([str(tmp_path)])  # a profile among the results: projected by default
    assert "== projection with the link profile" in capsys.readouterr().out


def test_each_run_is_explained_by_its_bytes_and_the_links_cost():
    from common.projection import reasons

    (said,) = reasons.shares([ddp_run()], profiles().of)
    # 1 MB in 1 all-reduce; 1 ms + 1 MB x 1 ns = 2 ms of the 10 ms step
    assert said.startswith(
        "torch ddp x2 sends 1 MB per rank per step in 1 collective; at this profile's costs "
        "that is 2 ms of its 10 ms step (20%); the rest, as its profiled step split it: "
        "compute 8 ms"
    ), said
    assert reasons.shares([ddp_run(traffic=False)], profiles().of) == []


def _sized(strategy: str, params: int, samples_per_s: float) -> RecordedRun:
    run = ddp_run()
    begun = changed(run.start, strategy=strategy, model_params=params)
    epochs = [changed(e, samples_per_s=samples_per_s) for e in run.epochs]
    return RecordedRun(f"{strategy}-{params}/metrics.jsonl", [begun, *epochs])


def test_the_model_size_where_two_strategies_trade_places_is_named():
    from common.projection import summary

    # ddp is faster at 1M parameters (6,400 against 3,200 samples/s), fsdp2 at 100M (200 vs 100)
    runs = [
        _sized("ddp", 10**6, 6400.0),
        _sized("fsdp2", 10**6, 3200.0),
        _sized("ddp", 10**8, 100.0),
        _sized("fsdp2", 10**8, 200.0),
    ]
    (said,) = summary._size_flips(runs, profiles(), [2])
    assert said.startswith("At 2 workers, torch ddp x2 and torch fsdp2 x2 trade places near ")
    assert "(measured at 1M and 100M): below it torch ddp x2 is faster" in said
    near = float(said.split("near ")[1].split("M")[0])
    assert 1 < near < 100
    # no crossing when one is faster at every size; none below a run's own world
    same = [
        _sized("ddp", 10**6, 6400.0),
        _sized("fsdp2", 10**6, 3200.0),
        _sized("ddp", 10**8, 300.0),
        _sized("fsdp2", 10**8, 200.0),
    ]
    assert summary._size_flips(same, profiles(), [2]) == []
    assert summary._size_flips(runs, profiles(), [1]) == []


def test_each_run_is_priced_with_its_own_frameworks_profile():
    """With both frameworks' profiles among the results, each prices its own runs (TensorFlow's
    once priced every run); with one missing, the caveat names the tool for that one."""
    torch_run = ddp_run()
    tf_run = RecordedRun(
        "t/metrics.jsonl",
        [changed(torch_run.records[0], framework="tf", strategy="mwms")] + torch_run.records[1:],
    )
    slow = profile().model_copy(update={"framework": "tf", "transport": "ring"})
    fits = {kind: fit.model_copy(update={"alpha_s": 2e-3}) for kind, fit in slow.kinds.items()}
    slow = slow.model_copy(update={"kinds": fits})
    both = profiles(torch=profile(), tf=slow)
    assert both.of(torch_run).framework == "torch" and both.of(tf_run).framework == "tf"
    assert both.caveats([torch_run, tf_run]) == []
    (torch_only,) = profiles().caveats([torch_run, tf_run])
    assert "no tf link profile" in torch_only and "python -m tf_impl.links" in torch_only
    (tf_only,) = profiles(tf=slow).caveats([torch_run, tf_run])
    assert "no torch link profile" in tf_only and "python -m torch_impl.links" in tf_only


def test_the_json_output_holds_the_projection_as_data(tmp_path, capsys):
    """--format json printed the projection as text after the JSON, so it did not parse."""
    import json

    write_run(tmp_path / "run" / "metrics.jsonl")
    link_profile.write(profile(), tmp_path / "links.json")
    assert compare.main([str(tmp_path), "--project", "8", "--format", "json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (projection,) = [line["projection"] for line in lines if "projection" in line]
    schema = json.loads((Path(__file__).parents[2] / "docs/projection.schema.json").read_text())
    jsonschema.validate(projection, schema)  # docs/projection.schema.json says its shape
    assert projection["profiles"].endswith("links.json")
    assert any("no traffic recorded" in caveat for caveat in projection["caveats"])


def test_a_run_its_cpu_quota_held_is_said_to_be_cpu_bound(tmp_path, capsys):
    """A run whose node's quota ran out in most periods was held by its CPU: the projection
    says so, with the share, and that it grows the run's overhead with its calls at N; a run
    its quota seldom held, or one without a quota, gets no such caveat."""
    run = ddp_run()
    held = RecordedRun(
        run.path,
        [run.start] + [changed(e, quota_throttled=0.72, cpu_time_s=0.05) for e in run.epochs],
    )
    said = reasons.held_by_cpu(held)
    assert said is not None and "torch ddp x2" in said and "72%" in said, said
    assert "grows with them at N" in said
    assert reasons.held_by_cpu(run) is None
    seldom = [changed(e, quota_throttled=0.2) for e in run.epochs]
    assert reasons.held_by_cpu(RecordedRun(run.path, [run.start, *seldom])) is None
    (tmp_path / "run").mkdir()
    with MetricsWriter(tmp_path / "run" / "metrics.jsonl") as writer:
        for record in held.records:
            writer.write(record)
    link_profile.write(profile(["localhost"]), tmp_path / "links.json")
    assert compare.main([str(tmp_path), "--project", "8"]) == 0
    assert "72% of its quota's periods" in capsys.readouterr().out
