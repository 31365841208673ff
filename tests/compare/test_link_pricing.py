"""How a link profile prices one collective: by the fit of a group it measured, read off its
points; at other sizes, by the latency per step of the largest size measured below."""

import pytest

from common.core.measure import links
from tests.compare.test_projection import profile


def test_a_group_measured_on_its_own_is_priced_by_its_own_fit():
    """A profile that also measured 8 ranks (alpha 3 ms, 2 ns a byte) prices a call over 8 by
    that fit, and a call over 4 (not measured) from the 2-rank fit's steps, as before."""
    fit8 = links.KindFit(
        alpha_s=3e-3,
        beta_s_per_byte=2e-9,
        points=[links.Point(payload_bytes=8, wire_bytes=14, seconds=3e-3)] * 2,
    )
    both = profile().model_copy(update={"groups": {8: {"all_reduce": fit8}}})
    assert both.seconds("all_reduce", 2, 1e6, 8) == pytest.approx(2 * 3e-3 + 1e6 * 2e-9)
    assert both.seconds("all_reduce", 1, 0.0, 4) == pytest.approx(6 * 0.5e-3)  # 2(4-1) steps
    assert both.seconds("all_reduce", 1, 0.0, 8) != profile().seconds("all_reduce", 1, 0.0, 8)


def test_a_size_not_measured_takes_the_latency_per_step_of_the_largest_size_below_it():
    """Measured at 2 ranks (0.5 ms a step) and at 8 (3 ms over gloo's 14 steps): 64 ranks take
    8's figures (126 steps of 3/14 ms, 2 ns a byte), 4 ranks take 2's, and the per-step
    latencies are shown as measured."""
    fit8 = links.KindFit(
        alpha_s=3e-3,
        beta_s_per_byte=2e-9,
        points=[links.Point(payload_bytes=8, wire_bytes=14, seconds=3e-3)] * 2,
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
        links.Point(payload_bytes=size, wire_bytes=size, seconds=seconds)
        for size, seconds in ((4096, 1.73e-3), (262_144, 24.9e-3), (2_097_152, 196.57e-3))
    ]
    fit = links.KindFit(alpha_s=1.62e-3, beta_s_per_byte=74.2e-9, points=points)
    ring = profile().model_copy(update={"kinds": {"all_reduce": fit}})
    between = 24.9e-3 + (437_544 - 262_144) * (196.57e-3 - 24.9e-3) / (2_097_152 - 262_144)
    assert ring.seconds("all_reduce", 1, 437_544, 2) == pytest.approx(between)  # 41.3 ms
    assert ring.seconds("all_reduce", 2, 2 * 4 * 2**20, 2) == pytest.approx(
        2 * (196.57e-3 + (4 * 2**20 - 2_097_152) * 74.2e-9)
    )
    assert ring.seconds("all_reduce", 0, 0.0, 2) == 0.0
