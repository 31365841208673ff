"""The benchmark's tables (`common.tools.bench`): every row's median and spread over the
repeats, its ratio to its framework's plain loop (in samples/s, and step by step), what its
epoch takes beyond its steps against the plain loop's, and its MFU; with `--against REF`, the
same rows measured on that commit beside them."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from common.tools.measure import SPREAD_WARNING

Row = tuple[str, str]  # model, variant


@dataclass
class Tally:
    """What the repeats measured on one tree of the suite."""

    speeds: dict[Row, list[float]] = field(default_factory=dict)
    # (model, variant, kind) -> the repeats' values: "mfu", "eval" (MFU), "step_s" (median
    # step), "paired" (a baseline's: the plain step over the suite's, taken in turn)
    figures: dict[tuple[str, str, str], list[float]] = field(default_factory=dict)
    ranks: dict[Row, int] = field(default_factory=dict)
    steps: int = 0  # an epoch's steps (0: not known), each of `batch` samples
    batch: int = 0

    def add(self, row: Row, ranks: int, speed: float, figures: dict[str, float | None]) -> None:
        self.speeds.setdefault(row, []).append(speed)
        for kind, value in figures.items():
            if value is not None:
                self.figures.setdefault((*row, kind), []).append(value)
        self.ranks[row] = ranks

    def speed(self, row: Row) -> float | None:
        found = self.speeds.get(row)
        return statistics.median(found) if found else None

    def figure(self, row: Row, kind: str) -> float | None:
        found = self.figures.get((*row, kind))
        return statistics.median(found) if found else None

    def loop(self, row: Row) -> tuple[list[float], list[float]]:
        """(samples/s, median steps) round by round of the plain loop the row is set against:
        the one that took its passes in turn with the row's epochs (`loop_speed`,
        `loop_step_s`: a one-process launch of this tree), else its framework's own row."""
        beside = self.figures.get((*row, "loop_speed"))
        if beside:
            return beside, self.figures.get((*row, "loop_step_s"), [])
        plain = (row[0], f"{row[1].split()[0]} plain loop")
        return self.speeds.get(plain, []), self.figures.get((*plain, "step_s"), [])

    def per_step(self, row: Row) -> float | None:
        """The row's median step against its plain loop's (plain / row): the harness's cost
        per step, free of what a busy machine adds to a few steps; for the suite's step paired
        with the plain loop's in one process, the two taken in turn."""
        paired = self.figure(row, "paired")
        if paired is not None:
            return paired
        step, plain = self.figure(row, "step_s"), self.loop(row)[1]
        return statistics.median(plain) / step if step and plain else None

    def beyond_steps(self, row: Row) -> list[float]:
        """Round by round, the seconds of the row's epoch beyond its steps at their median:
        what an epoch pays once (its start, its slow steps, what runs between steps), apart from
        what it pays per step. Empty where the steps or the epoch's length are not known."""
        return self._beyond(self.speeds.get(row, []), self.figures.get((*row, "step_s"), []))

    def _beyond(self, speeds: list[float], steps: list[float]) -> list[float]:
        if not self.steps or not speeds or len(steps) != len(speeds):
            return []
        samples = self.steps * self.batch
        rounds = zip(speeds, steps, strict=True)
        return [samples / speed - self.steps * step for speed, step in rounds]

    def _compared(self, row: Row) -> bool:
        """Whether the row is set against a plain loop: not the plain loop itself, nor a paired
        row (its samples/s are steps alone)."""
        plain = (row[0], f"{row[1].split()[0]} plain loop")
        return row != plain and self.figure(row, "paired") is None

    def per_epoch(self, row: Row) -> float | None:
        """The seconds the row's epoch pays beyond its steps, over what its plain loop's pays:
        the median of the rounds' differences. None for the plain loop itself, a paired row, and
        a row without the figures."""
        if not self._compared(row):
            return None
        loop = self._beyond(*self.loop(row))
        pairs = list(zip(self.beyond_steps(row), loop, strict=False))
        return statistics.median(own - theirs for own, theirs in pairs) if pairs else None

    def by_round(self, row: Row) -> list[float]:
        """The row's samples/s over its plain loop's (`loop`), round by round: for a loop run
        apart, each pair a few measurements apart, where the ratio of the medians may set one
        round's slow spell against another round's quiet one. Empty for the plain loop itself,
        a paired row, and a row without such a loop."""
        if not self._compared(row):
            return []
        speeds = zip(self.speeds[row], self.loop(row)[0], strict=False)
        return [speed / against for speed, against in speeds]

    def against(self, row: Row) -> float | None:
        """The median samples/s of the plain loop the row is set against (`loop`; the plain
        loop's own row, itself); None for a paired row."""
        speeds = self.loop(row)[0]
        return statistics.median(speeds) if speeds and self.figure(row, "paired") is None else None


def _percent(value: float | None, width: int) -> str:
    return f"{value:{width}.1%}" if value is not None else f"{'-':>{width}}"


def _ratio(value: float | None, width: int) -> str:
    return f"{value:{width}.2f}" if value is not None else f"{'-':>{width}}"


def _milliseconds(seconds: float | None, width: int) -> str:
    return f"{seconds * 1e3:{width}.1f}" if seconds is not None else f"{'-':>{width}}"


def _width(tally: Tally) -> int:
    """The variant column's width: its longest name."""
    return max([36, *(len(variant) for _, variant in tally.speeds)])


def main_table(tally: Tally) -> list[str]:
    """The rows of this tree, and a warning naming the noisy ones."""
    wide = _width(tally)
    lines = [
        f"\n{'model':<6} {'variant':<{wide}} {'ranks':>5} {'samples/s':>10} {'spread':>7} "
        f"{'vs plain':>8} {'per step':>8} {'+ms/ep':>7} {'MFU':>6} {'eval MFU':>8}",
        "(MFU: training, eval MFU: the evaluation's forward passes, both against the ranks' "
        "summed GEMM peak, common.core.measure.peak)",
        "(median of the repeats; spread = (max - min) / median; vs plain: against the plain "
        "loop that took its passes in turn with the row's epochs (a one-process launch), else "
        "the framework's plain loop row, only from 2 repeats on; per step: the plain loop's "
        "median step over the row's; +ms/ep: what the row's epoch takes beyond its steps at "
        "their median, over what the plain loop's does, a cost per epoch, not per step)",
        "(suite's step, paired: the suite's train_step and the plain loop's step taken in turn "
        "in one process, so that a slow spell of a busy machine slows both; its per step is "
        "theirs)",
    ]
    noisy = []
    for (model_name, variant), speeds in tally.speeds.items():
        middle = statistics.median(speeds)
        spread = (max(speeds) - min(speeds)) / middle
        row = (model_name, variant)
        # a paired row's samples/s are its steps' alone: no epoch to set against the loop's
        against = tally.against(row) if len(speeds) > 1 else None
        ratio = f"{middle / against:8.2f}" if against else f"{'-':>8}"
        spread_text = f"{spread:7.0%}" if len(speeds) > 1 else f"{'-':>7}"
        lines.append(
            f"{model_name:<6} {variant:<{wide}} {tally.ranks[row]:>5} {middle:>10,.0f} "
            f"{spread_text} {ratio} {_ratio(tally.per_step(row), 8)} "
            f"{_milliseconds(tally.per_epoch(row), 7)} "
            f"{_percent(tally.figure(row, 'mfu'), 6)} {_percent(tally.figure(row, 'eval'), 8)}"
        )
        if spread > SPREAD_WARNING:
            noisy.append(f"{model_name} {variant} ({spread:.0%})")
    if noisy:
        lines.append(
            f"warning: spread over {SPREAD_WARNING:.0%}, the machine was busy: " + ", ".join(noisy)
        )
    return lines + round_lines(tally)


def round_lines(tally: Tally) -> list[str]:
    """Each row's ratio to its plain loop round by round, and their median, from 2 repeats on:
    what a slow spell did to one round shows as that round's figure alone."""
    found = [(row, tally.by_round(row)) for row in tally.speeds]
    found = [(row, ratios) for row, ratios in found if len(ratios) > 1]
    if not found:
        return []
    wide = _width(tally)
    lines = ["\nvs plain, round by round (each round's row over its plain loop's; their median)"]
    for (model_name, variant), ratios in found:
        each = ", ".join(f"{ratio:.2f}" for ratio in ratios)
        lines.append(
            f"{model_name:<6} {variant:<{wide}} {each}  (median {statistics.median(ratios):.2f})"
        )
    return lines


def change_table(before: Tally, now: Tally, ref: str) -> list[str]:
    """Every row of this tree beside the same row measured on commit `ref` in the same rounds
    ('-' where that commit has no such cell)."""
    wide = _width(now)
    lines = [
        f"\nbefore = {ref}, measured in the same rounds (medians)",
        f"{'model':<6} {'variant':<{wide}} {'samples/s':>10} {'before':>10} {'now/bef':>7} "
        f"{'MFU':>6} {'before':>6} {'eval MFU':>8} {'before':>8}",
    ]
    for row in now.speeds:
        speed, old = now.speed(row), before.speed(row)
        ratio = f"{speed / old:7.2f}" if speed and old else f"{'-':>7}"
        old_text = f"{old:>10,.0f}" if old else f"{'-':>10}"
        lines.append(
            f"{row[0]:<6} {row[1]:<{wide}} {speed or 0:>10,.0f} {old_text} {ratio} "
            f"{_percent(now.figure(row, 'mfu'), 6)} {_percent(before.figure(row, 'mfu'), 6)} "
            f"{_percent(now.figure(row, 'eval'), 8)} {_percent(before.figure(row, 'eval'), 8)}"
        )
    return lines


def rows(tally: Tally) -> list[dict[str, Any]]:
    """Every row of this tree as the bench file holds it (`common.report.harness_ratio`)."""
    found = []
    for (model_name, variant), speeds in tally.speeds.items():
        middle = statistics.median(speeds)
        by_round = tally.by_round((model_name, variant))
        beyond = tally.beyond_steps((model_name, variant))
        found.append(
            {
                "model": model_name,
                "variant": variant,
                "ranks": tally.ranks[(model_name, variant)],
                "samples_per_s": middle,
                "spread": (max(speeds) - min(speeds)) / middle,
                "repeats": len(speeds),
                "mfu": tally.figure((model_name, variant), "mfu"),
                "step_p50_s": tally.figure((model_name, variant), "step_s"),
                "paired": tally.figure((model_name, variant), "paired"),
                "vs_plain_by_round": by_round if len(by_round) > 1 else None,
                "steps_per_epoch": tally.steps or None,
                "beyond_steps_s": statistics.median(beyond) if beyond else None,
                "per_epoch_s": tally.per_epoch((model_name, variant)),
                "loop_samples_per_s": tally.figure((model_name, variant), "loop_speed"),
                "loop_step_p50_s": tally.figure((model_name, variant), "loop_step_s"),
            }
        )
    return found
