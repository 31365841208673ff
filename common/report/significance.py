"""Whether one row is faster than another beyond chance: Welch's t-test on their repeats'
samples/s, and the threshold the verdict holds a difference to (`common.report.verdict`)."""

from __future__ import annotations

import math
import statistics

from common.report.rows import Row

# The significance a difference in speed must reach to be stated as a finding (the rule for a
# record in the modded-nanogpt speedrun), and the repeats per row a test needs.
P_FINDING, TEST_REPEATS = 0.01, 3


def welch(first: Row, second: Row) -> tuple[float | None, str]:
    """Welch's t-test of "first is faster than second" on their repeats' samples/s: its
    p-value and a clause with it and each mean with its standard error; (None, a clause saying
    that no test was possible) with fewer than TEST_REPEATS repeats a row; (None, "") for rows
    without repeats."""
    a, b = first.samples_s_repeats, second.samples_s_repeats
    if not a or not b:
        return None, ""
    if min(len(a), len(b)) == 1:  # single runs: the verdict's opening says it for every row
        return None, ""
    if min(len(a), len(b)) < TEST_REPEATS:
        return None, (
            f"no significance test was possible with {min(len(a), len(b))} repeats of one of "
            f"them; it takes {TEST_REPEATS} a row"
        )
    from scipy import stats  # the 'report' extra; imported only where a test is made

    p_value = float(stats.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue)
    return p_value, (
        f"Welch's t-test p = {p_value:.2g}; mean ± standard error {statistics.mean(a):,.0f} ± "
        f"{_sem(a):,.0f} and {statistics.mean(b):,.0f} ± {_sem(b):,.0f} samples/s"
    )


def _sem(values: list[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values))
