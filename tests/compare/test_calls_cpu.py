"""The CPU a run's collectives take at N: a link profile whose points keep the chief's CPU
seconds of a call prices a step's calls' CPU as it prices their time, and `compare --project`
says it with the share of the node's cores it fills over the projected step. A run its node's
CPU quota held has its overhead projected to grow with its calls."""

import pytest

from common.projection import profiles, reasons, step_model
from common.report.runs import RecordedRun
from tests.compare.test_link_pricing import launch_profile, tiered_profile, with_cpu
from tests.compare.test_projection import ddp_run, split
from tests.records import changed


def _quarter_core_run() -> RecordedRun:
    """ddp_run (one 1 MB all-reduce a step) on 2 nodes of 0.25 core, 3 ms of CPU a step."""
    run = ddp_run()
    begun = changed(run.start, hosts=["n1", "n2"], cpu_quota_cores=0.25)
    epochs = [changed(e, cpu_time_s=3e-3 * e.steps) for e in run.epochs]
    return RecordedRun(run.path, [begun, *epochs])


def test_the_calls_cpu_at_n_is_priced_from_each_size_s_own_cpu_a_call():
    two = with_cpu(launch_profile(2, 1e-3), 0.5e-3)  # 0.5 ms of CPU a call on 2 nodes
    eight = with_cpu(launch_profile(8, 20e-3), 4e-3)  # 4 ms on 8
    both = profiles.merged([eight, two])
    run = _quarter_core_run()
    cpu = profiles.cpu_of(both)
    assert cpu is not None
    assert step_model.communication_s(run, cpu, 2) == pytest.approx(0.5e-3)
    assert step_model.communication_s(run, cpu, 8) == pytest.approx(4e-3)
    (at8,), _ = step_model.project(run, both, [8])
    said = reasons.calls_cpu([run], lambda _: both, [8])
    share = 4e-3 / (at8.step_fast_s * 0.25)  # 1 rank a node
    assert said == [
        "torch ddp x2: its collectives take 0.5 ms of CPU a step (the link profile's CPU a "
        "call; the run measured 3 ms in all), 4 ms at 8: with 1 rank a node of 0.25 "
        f"cores, {share:.0%} of the node over the projected step of {at8.step_fast_s * 1e3:.1f}"
        " ms. Near 100%, the node's CPU, not its link, times the step, and work between the "
        "calls makes them cost more than priced (docs/communication.md, section 4)"
    ]


def test_a_profile_without_cpu_a_call_says_nothing_of_it():
    older = launch_profile(2, 1e-3)  # measured before points kept their CPU
    assert profiles.cpu_of(older) is None
    assert reasons.calls_cpu([_quarter_core_run()], lambda _: older, [8]) == []
    tiered = profiles.cpu_of(with_cpu(tiered_profile(2, 1e-3), 3e-3))  # each tier's CPU too
    assert tiered is not None
    assert {p.seconds for p in tiered.tiers["inter_node"].kinds["all_reduce"].points} == {3e-3}
    assert profiles.cpu_of(tiered_profile(2, 1e-3)) is None


def test_a_run_its_quota_held_has_its_overhead_grow_with_its_calls():
    """On a node its CPU quota held (quota_throttled at least step_model.HELD), the step less
    its compute and optimizer is the quota stalling the calls, and grows as they do: hsdp on
    quarter-core nodes ([F], 200 Mbit/s), 2 nodes to 8, was -15% and -21% with its overhead
    kept, -3% and -9% with it grown. A run seldom held keeps its overhead."""
    run = ddp_run(step_split=split(compute_s=2e-3))  # 10 ms: 2 of calls, 2 compute, 6 overhead
    profile = launch_profile(2, 1e-3)
    own, at8 = (step_model.communication_s(run, profile, world) for world in (2, 8))
    assert own is not None and at8 is not None and at8 > own
    overhead = step_model.step_parts(run, 10e-3, own).overhead_s
    assert overhead == pytest.approx(10e-3 - own - 2e-3)

    def held(share: float) -> RecordedRun:
        epochs = [changed(e, quota_throttled=share) for e in run.epochs]
        return RecordedRun(run.path, [run.start, *epochs])

    (kept,), _ = step_model.project(run, profile, [8])
    (grown,), _ = step_model.project(held(0.72), profile, [8])
    (seldom,), _ = step_model.project(held(0.2), profile, [8])
    assert grown.step_slow_s - kept.step_slow_s == pytest.approx(overhead * (at8 / own - 1))
    assert grown.overhead_s == pytest.approx(overhead * at8 / own)
    assert seldom == kept
