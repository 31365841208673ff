"""The bench's ratio to the plain loop, round by round: the ratio of two medians can set one
round's slow spell against another round's quiet one, so each round's own ratio is shown too
(and written to bench.json), where a spell stands out as the figure of one round."""

import json

import pytest

from common.tools import bench_table

PLAIN = ("mlp", "torch plain loop")
CELL = ("mlp", "torch single / tensor")
PAIRED = ("mlp", "torch suite's step, paired")


def measured(rounds: list[dict[tuple[str, str], float]]) -> bench_table.Tally:
    """A tally as the bench's rounds fill it, from each round's samples/s."""
    tally = bench_table.Tally()
    for speeds in rounds:
        for row, speed in speeds.items():
            figures = {"paired": 0.99} if row == PAIRED else {}
            tally.add(row, 1, speed, figures)
    return tally


def test_each_rounds_ratio_is_its_cell_over_the_plain_loop_of_that_round():
    # round 2: the cell met a spell its plain loop did not; round 3: the plain loop did
    tally = measured(
        [
            {PLAIN: 1000.0, CELL: 990.0, PAIRED: 500.0},
            {PLAIN: 1010.0, CELL: 606.0, PAIRED: 500.0},
            {PLAIN: 600.0, CELL: 600.0, PAIRED: 500.0},
        ]
    )
    assert tally.by_round(CELL) == pytest.approx([0.99, 0.6, 1.0])
    # the ratio of the medians sets round 1's plain loop against round 2's slow cell
    assert tally.speed(CELL) / tally.speed(PLAIN) == pytest.approx(0.606)
    assert tally.by_round(PLAIN) == [] and tally.by_round(PAIRED) == []
    lines = bench_table.main_table(tally)
    shown = [line for line in lines if line.startswith("mlp") and "median 0.99" in line]
    assert len(shown) == 1 and "0.99, 0.60, 1.00" in shown[0], "\n".join(lines)
    row = next(r for r in bench_table.rows(tally) if r["variant"] == CELL[1])
    assert json.loads(json.dumps(row))["vs_plain_by_round"] == pytest.approx([0.99, 0.6, 1.0])


def test_one_round_shows_no_round_by_round_ratios():
    tally = measured([{PLAIN: 1000.0, CELL: 990.0}])
    assert not any("round by round" in line for line in bench_table.main_table(tally))
    assert all(row["vs_plain_by_round"] is None for row in bench_table.rows(tally))


def test_a_cost_per_epoch_is_told_apart_from_the_cost_per_step():
    # 100 steps of 0.75 ms in both; the plain loop's epoch pays 1 ms beyond them, the cell's 17
    tally = bench_table.Tally(steps=100, batch=64)
    for _ in range(3):
        tally.add(PLAIN, 1, 6400 / 0.076, {"step_s": 0.00075})
        tally.add(CELL, 1, 6400 / 0.092, {"step_s": 0.00075})
    assert tally.per_step(CELL) == pytest.approx(1.0)
    assert tally.beyond_steps(PLAIN) == pytest.approx([0.001] * 3)
    assert tally.per_epoch(CELL) == pytest.approx(0.016)
    assert tally.per_epoch(PLAIN) is None
    line = next(line for line in bench_table.main_table(tally) if line.startswith("mlp    torch s"))
    assert "0.83     1.00    16.0" in line, line
    row = next(r for r in bench_table.rows(tally) if r["variant"] == CELL[1])
    assert row["steps_per_epoch"] == 100
    assert row["per_epoch_s"] == pytest.approx(0.016)
    assert row["beyond_steps_s"] == pytest.approx(0.017)
    # without the epoch's length (an older bench's tally) nothing is made up
    assert bench_table.Tally().beyond_steps(CELL) == []


def test_a_cell_is_set_against_the_plain_loop_that_took_turns_with_it():
    """A one-process launch's own plain loop (its passes in turn with the cell's epochs) is the
    one its ratios use, round by round and step by step, not the loop measured apart."""
    tally = bench_table.Tally(steps=100, batch=64)
    beside = [(800.0, 0.0010), (500.0, 0.0016)]  # round 2: a slow spell fell on both
    for speed, (loop_speed, loop_step) in zip([792.0, 505.0], beside, strict=True):
        tally.add(PLAIN, 1, 1000.0, {"step_s": 0.0008})
        figures = {"step_s": loop_step * 1.01, "loop_speed": loop_speed, "loop_step_s": loop_step}
        tally.add(CELL, 1, speed, figures)
    assert tally.by_round(CELL) == pytest.approx([0.99, 1.01])
    assert tally.per_step(CELL) == pytest.approx(1 / 1.01)
    assert tally.against(CELL) == pytest.approx(650.0)
    row = next(r for r in bench_table.rows(tally) if r["variant"] == CELL[1])
    assert row["loop_samples_per_s"] == pytest.approx(650.0)
    assert row["loop_step_p50_s"] == pytest.approx(0.0013)
