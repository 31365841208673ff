"""How a link profile prices one collective: by the fit of a group it measured, read off its
points; at other sizes, by the latency per step of the largest size measured below, and its
bytes read off that size's points; hsdp's shard groups on the tier within a node and its
replicas on the tier across nodes; profiles of launches of several sizes priced as one."""

import pytest

import compare
from common.core.config.config_io import load_config
from common.core.measure.traffic import wire_bytes
from common.core.records.entries import TrafficEntry
from common.projection import crossover, link_profile, profiles, step_model, summary
from common.report.runs import RecordedRun
from tests.compare.test_projection import MB, ddp_run, profile
from tests.records import changed, epoch, start, write_run


def test_a_group_measured_on_its_own_is_priced_by_its_own_fit():
    """A profile that also measured 8 ranks (alpha 3 ms, 2 ns a byte) prices a call over 8 by
    that fit, and a call over 4 (not measured) from the 2-rank fit's steps, as before."""
    fit8 = link_profile.KindFit(
        alpha_s=3e-3,
        beta_s_per_byte=2e-9,
        points=[link_profile.Point(payload_bytes=8, wire_bytes=14, seconds=3e-3)] * 2,
    )
    both = profile().model_copy(update={"groups": {8: {"all_reduce": fit8}}})
    assert both.seconds("all_reduce", 2, 1e6, 8) == pytest.approx(2 * 3e-3 + 1e6 * 2e-9)
    assert both.seconds("all_reduce", 1, 0.0, 4) == pytest.approx(6 * 0.5e-3)  # 2(4-1) steps
    assert both.seconds("all_reduce", 1, 0.0, 8) != profile().seconds("all_reduce", 1, 0.0, 8)


def test_a_size_not_measured_takes_the_latency_per_step_of_the_largest_size_below_it():
    """Measured at 2 ranks (0.5 ms a step) and at 8 (3 ms over gloo's 14 steps): 64 ranks take
    8's figures (126 steps of 3/14 ms, 2 ns a byte), 4 ranks take 2's, and the per-step
    latencies are shown as measured."""
    fit8 = link_profile.KindFit(
        alpha_s=3e-3,
        beta_s_per_byte=2e-9,
        points=[link_profile.Point(payload_bytes=8, wire_bytes=14, seconds=3e-3)] * 2,
    )
    both = profile().model_copy(update={"groups": {8: {"all_reduce": fit8}}})
    assert both.seconds("all_reduce", 1, 1e6, 64) == pytest.approx(126 * 3e-3 / 14 + 2e-3)
    assert both.seconds("all_reduce", 1, 0.0, 4) == pytest.approx(6 * 0.5e-3)
    per_step = both.alpha_per_step()["all_reduce"]
    assert per_step == pytest.approx({2: 0.5e-3, 8: 3e-3 / 14})


def test_a_measured_group_is_priced_from_its_points_where_the_time_bends():
    """TensorFlow's RING all-reduce on the shaped test cluster (100 Mbit/s, 2 nodes, on [D]): its
    fit (1.62 ms, 74.2 ns a byte) was 20% under its 2 MiB point, and a 437,544-byte all-reduce
    priced by the fit came out 21% under the step time shaping added. Between two points a call
    is read off the straight line through them; past the last, that point plus beta a byte."""
    points = [
        link_profile.Point(payload_bytes=size, wire_bytes=size, seconds=seconds)
        for size, seconds in ((4096, 1.73e-3), (262_144, 24.9e-3), (2_097_152, 196.57e-3))
    ]
    fit = link_profile.KindFit(alpha_s=1.62e-3, beta_s_per_byte=74.2e-9, points=points)
    ring = profile().model_copy(update={"kinds": {"all_reduce": fit}})
    between = 24.9e-3 + (437_544 - 262_144) * (196.57e-3 - 24.9e-3) / (2_097_152 - 262_144)
    assert ring.seconds("all_reduce", 1, 437_544, 2) == pytest.approx(between)  # 41.3 ms
    assert ring.seconds("all_reduce", 2, 2 * 4 * 2**20, 2) == pytest.approx(
        2 * (196.57e-3 + (4 * 2**20 - 2_097_152) * 74.2e-9)
    )
    assert ring.seconds("all_reduce", 0, 0.0, 2) == 0.0


def test_a_size_not_measured_reads_its_bytes_off_the_measured_points():
    """The same RING profile, measured on 2 ranks, prices an all-reduce over 4: 6 steps of the
    2-rank latency per step, and the time of its 656,316 wire bytes read off the 2-rank points
    less their latency, not the fit's beta, which ran 20% under the 2 MiB point (priced by
    beta, mwms's 2-node run projected to 4 nodes came out 17% faster than it measured, in make
    test-scaling on [D]; read off the points, 1%)."""
    points = [
        link_profile.Point(payload_bytes=size, wire_bytes=size, seconds=seconds)
        for size, seconds in ((4096, 1.73e-3), (262_144, 24.9e-3), (2_097_152, 196.57e-3))
    ]
    fit = link_profile.KindFit(alpha_s=1.62e-3, beta_s_per_byte=74.2e-9, points=points)
    ring = profile().model_copy(update={"kinds": {"all_reduce": fit}})
    wire = 656_316  # 2 x 3/4 of 437,544 bytes
    read = 24.9e-3 + (wire - 262_144) * (196.57e-3 - 24.9e-3) / (2_097_152 - 262_144)
    assert ring.seconds("all_reduce", 1, wire, 4) == pytest.approx(6 * 1.62e-3 / 2 + read - 1.62e-3)
    assert ring.seconds("all_reduce", 1, wire, 4) > 6 * 1.62e-3 / 2 + wire * 74.2e-9 * 1.15
    assert ring.seconds("all_reduce", 0, 0.0, 4) == 0.0


def _fit(alpha_s: float, beta_s_per_byte: float) -> link_profile.KindFit:
    points = [
        link_profile.Point(
            payload_bytes=size, wire_bytes=size, seconds=alpha_s + size * beta_s_per_byte
        )
        for size in (8, 1 << 20)
    ]
    return link_profile.KindFit(alpha_s=alpha_s, beta_s_per_byte=beta_s_per_byte, points=points)


def hsdp_run() -> RecordedRun:
    """hsdp on 2 nodes of 2 ranks (shard groups of 2 within a node, replicas of 2 across), a
    step's collectives: 2 all-gathers of a 100 kB shard, a reduce-scatter of 400 kB and the
    replicas' all-reduce of 200 kB."""
    sent = [
        TrafficEntry(
            phase="train",
            kind=kind,
            calls=calls,
            payload_bytes=payload,
            wire_bytes=0,
            expected_calls=calls,
            expected_payload_bytes=payload,
        )
        for kind, calls, payload in (
            ("all_gather", 2, 200_000),
            ("reduce_scatter", 1, 400_000),
            ("all_reduce", 1, 200_000),
        )
    ]
    cfg = load_config(None, ["torch.strategy=hsdp", "torch.hsdp_shard_size=2"])
    begun = changed(start(cfg=cfg), strategy="hsdp", world_size=4, hosts=["n1", "n1", "n2", "n2"])
    epochs = [
        changed(epoch(n, 0.9, 2.0 * n), samples_per_s=6400.0, traffic=sent) for n in (1, 2, 3)
    ]
    return RecordedRun("r/metrics.jsonl", [begun, *epochs])


def test_hsdp_prices_its_shards_within_a_node_and_its_replicas_across_nodes():
    """Tiers measured (--tiers): within a node 0.1 ms and 10 GB/s, across nodes 1 ms and 1 GB/s.
    At its own 4 ranks: all-gathers 2 x (0.1 ms + 100 kB x 0.1 ns), reduce-scatter 0.1 ms +
    200 kB of wire (half of 400 kB) x 0.1 ns, all-reduce 1 ms + 200 kB x 1 ns: 1.54 ms. At 8 ranks
    (4 nodes of 2) the replicas' ring has 6 steps of 0.5 ms (1 ms over the 2 steps of 2 ranks) and
    300 kB of wire: 3.64 ms. Without tiers the launch's one fit prices all of it (3.87 ms), and a
    caveat says so."""
    run = hsdp_run()
    flat = profile().model_copy(
        update={"world_size": 4, "hosts": ["n1", "n1", "n2", "n2"], "kinds": {}}
    )
    kinds = {kind: _fit(2e-3, 2e-9) for kind in link_profile.KIND_NAMES}
    flat = flat.model_copy(update={"kinds": kinds})
    tiers = {
        "intra_node": link_profile.Tier(
            ranks=2, groups=2, kinds={kind: _fit(1e-4, 1e-10) for kind in link_profile.KIND_NAMES}
        ),
        "inter_node": link_profile.Tier(
            ranks=2, groups=2, kinds={kind: _fit(1e-3, 1e-9) for kind in link_profile.KIND_NAMES}
        ),
    }
    tiered = flat.model_copy(update={"tiers": tiers})
    assert step_model.communication_s(run, tiered, 4) == pytest.approx(1.54e-3)
    assert step_model.communication_s(run, tiered, 8) == pytest.approx(3.64e-3)
    # one tier: the launch's fit over 4 ranks (2 ms, 2 ns a byte) scaled to groups of 2 by its
    # latency per step: all-gathers 2 x (2/3 ms + 200 us), reduce-scatter and all-reduce
    # 2/3 ms + 400 us each
    assert step_model.communication_s(run, flat, 4) == pytest.approx(3.8667e-3, rel=1e-4)
    _, said = step_model.project(run, flat, [8])
    assert any("measure the profile with --tiers" in line for line in said), said
    _, said = step_model.project(run, tiered, [8])
    assert not any("--tiers" in line for line in said), said


def test_two_runs_trade_places_at_a_bandwidth_worked_by_hand_at_the_profiles_own_size():
    """At the profile's own 2 ranks a call is read off the points, so the latency-only profile
    behind the crossover must drop the bytes' share from the points too, not only from beta.
    ddp_run: 8 ms of compute, an all-reduce of 1 MB (1 ms + 1 ms at the profile's 1 GB/s);
    the other: a 3 MB all-reduce (1 ms + 3 ms) and 4 ms of compute in its 8 ms step. At a
    bandwidth factor s: 9 + 1/s against 5 + 3/s ms, equal at s = 0.5."""
    from tests.compare.test_projection import MB, ddp_run

    heavy = ddp_run()
    bigger = [
        entry.model_copy(update={"payload_bytes": 3 * MB, "wire_bytes": 3 * MB})
        for entry in heavy.epochs[0].traffic or []
    ]
    epochs = [
        e.model_copy(update={"traffic": bigger, "samples_per_s": 8000.0}) for e in heavy.epochs
    ]
    other = RecordedRun("o/metrics.jsonl", [heavy.start, *epochs])
    found = crossover.crossover(ddp_run(), other, (profile(), profile()), 2)
    assert found == "0.5x the profile's bandwidth"


@pytest.mark.parametrize(
    ("transport", "ranks", "steps"), [("gloo", 8, 3), ("gloo", 5, 3), ("nccl", 8, 7)]
)
def test_a_broadcast_pays_the_steps_of_its_own_algorithm_at_the_all_reduce_s_step_latency(
    transport, ranks, steps
):
    """A kind the profile did not time (DDP's two 16-byte broadcasts a step) is priced by the
    all-reduce's latency per step (its alpha over its own 2(n-1) steps: 1 ms over 2 here), times
    the steps of the kind's own algorithm: gloo's binomial tree, ceil(log2 n) (gloo/broadcast.cc),
    NCCL's ring, n-1. On 8 nodes at 50 Mbit/s ([E], 2026-12-03) the ring's 14 steps of a whole
    alpha priced ddp's two broadcasts at 30.8 ms, and its step 17% over the measured one."""
    measured = profile().model_copy(update={"transport": transport})
    # 32 bytes cost 32 ns here: the latency is all of it
    assert measured.seconds("broadcast", 2, 32.0, ranks) == pytest.approx(
        2 * steps * 0.5e-3, abs=1e-6
    )


def launch_profile(world: int, alpha_s: float) -> link_profile.LinkProfile:
    """A profile of a launch of `world` ranks, one a node: `alpha_s` a call, 1 ns a byte."""
    points = [
        link_profile.Point(payload_bytes=size, wire_bytes=size, seconds=alpha_s + size * 1e-9)
        for size in (8, 1 << 20)
    ]
    fit = link_profile.KindFit(alpha_s=alpha_s, beta_s_per_byte=1e-9, points=points)
    hosts = [f"n{rank + 1}" for rank in range(world)]
    return profile(hosts).model_copy(update={"world_size": world, "kinds": {"all_reduce": fit}})


def with_cpu(profile: link_profile.LinkProfile, cpu_s: float) -> link_profile.LinkProfile:
    """`profile` with every point of its fits measured at `cpu_s` of CPU a call."""
    return profiles.with_fits(
        profile,
        lambda fit: fit.model_copy(
            update={"points": [point.model_copy(update={"cpu_s": cpu_s}) for point in fit.points]}
        ),
    )


def test_profiles_of_two_launch_sizes_price_each_size_from_its_own_points(tmp_path, capsys):
    """A profile of 2 nodes (1 ms a call) and one of 8 (20 ms a call, where 2's latency per step
    gives 14 x 0.5 = 7 ms) price ddp x2 as one: its own step from 2's points, 8 ranks from 8's;
    `--links` twice, or both among the results, and the report names both."""
    two, eight = launch_profile(2, 1e-3), launch_profile(8, 20e-3)
    both = profiles.merged([eight, two])
    assert both.world_size == 8 and sorted(both.measured()) == [2, 8]
    wire = wire_bytes("all_reduce", MB, 8)  # 1.75 MB
    assert both.seconds("all_reduce", 1, wire, 8) == pytest.approx(20e-3 + wire * 1e-9)
    assert both.seconds("all_reduce", 1, MB, 2) == pytest.approx(1e-3 + MB * 1e-9)
    assert two.seconds("all_reduce", 1, 0.0, 8) == pytest.approx(7e-3)
    (at8,), _ = step_model.project(ddp_run(), both, [8])
    assert at8.communication_s == pytest.approx(20e-3 + wire * 1e-9)

    paths = [tmp_path / "links-2.json", tmp_path / "links-8.json"]
    for path, one in zip(paths, (two, eight), strict=True):
        link_profile.write(one, path)
    write_run(tmp_path / "run" / "metrics.jsonl")
    given = [option for path in paths for option in ("--links", str(path))]
    for argv in ([str(tmp_path), "--project", "8", *given], [str(tmp_path), "--project", "8"]):
        assert compare.main(argv) == 0
        out = capsys.readouterr().out
        named = f"== projection with the link profile {paths[1]}, {paths[0]} (torch gloo, 8 ranks"
        assert named in out and "a group of 2 or 8 ranks priced from its own points" in out


def tiered_profile(nodes: int, alpha_s: float) -> link_profile.LinkProfile:
    """--tiers on `nodes` nodes of 2 ranks: within a node 0.1 ms a call and 10 GB/s, across
    nodes `alpha_s` a call and 1 GB/s."""
    hosts = [f"n{node}" for node in range(1, nodes + 1) for _ in (0, 1)]
    within = {kind: _fit(1e-4, 1e-10) for kind in link_profile.KIND_NAMES}
    across = {kind: _fit(alpha_s, 1e-9) for kind in link_profile.KIND_NAMES}
    tiers = {
        "intra_node": link_profile.Tier(ranks=2, groups=nodes, kinds=within),
        "inter_node": link_profile.Tier(ranks=nodes, groups=2, kinds=across),
    }
    update = {"world_size": 2 * nodes, "kinds": across, "tiers": tiers}
    return profile(hosts).model_copy(update=update)


def test_hsdp_tiers_of_two_launch_sizes_price_each_group_from_its_own_points(tmp_path):
    """--tiers on 2 nodes (across them 1 ms a call) and on 8 (20 ms, where 2's latency per step
    gives 14 x 0.5 = 7 ms): hsdp at 8 nodes of 2 prices its replicas' all-reduce from 8's points
    (13 ms more a step), at 2 nodes from 2's; within a node the larger launch's fit is kept (timed
    beside 7 other nodes, as the training runs); the report names the sizes of each tier."""
    two, eight = tiered_profile(2, 1e-3), tiered_profile(8, 20e-3)
    both = profiles.merged([two, eight])
    assert both.tiers["intra_node"].groups == 8 and both.tiers["inter_node"].ranks == 8
    assert sorted(both.tiers["inter_node"].sizes) == [2]
    run = hsdp_run()
    at16, alone = (
        step_model.communication_s(run, both, 16),
        step_model.communication_s(run, two, 16),
    )
    assert at16 is not None and alone is not None and at16 - alone == pytest.approx(13e-3)
    assert step_model.communication_s(run, both, 4) == step_model.communication_s(run, two, 4)
    paths = [
        link_profile.write(one, tmp_path / f"links-{n}.json") for n, one in ((2, two), (8, eight))
    ]
    said = "\n".join(summary.report([run], "16", paths, []).table)
    assert "its tiers' groups of intra-node 2, inter-node 2 or 8 ranks from their own" in said


def test_profiles_that_cannot_price_together_are_refused_by_name(tmp_path):
    """Another transport, or two of one size named: an error naming both; two of one size found
    among the results: the first by name, as before."""
    nccl = launch_profile(8, 1e-3).model_copy(update={"transport": "nccl"})
    with pytest.raises(ValueError, match="of torch gloo cpu and of torch nccl cpu cannot"):
        profiles.merged([launch_profile(2, 1e-3), nccl])
    paths = [tmp_path / "links-a.json", tmp_path / "links-b.json"]
    for path, alpha in zip(paths, (1e-3, 5e-3), strict=True):
        link_profile.write(launch_profile(2, alpha), path)
    with pytest.raises(ValueError, match="two link profiles of torch measured 2 ranks"):
        profiles.find_profiles(paths, [])
    found = profiles.find_profiles(None, [str(tmp_path)])
    assert found.named() == str(paths[0])
    assert found.found["torch"][1].kinds["all_reduce"].alpha_s == 1e-3
