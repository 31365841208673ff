"""Step clocks: how the epoch driver times each step without changing what it times.

On the CPU a step is done when `train_step` returns, so the host clock read after it is the
step's time (`HostStepClock`). On a GPU, waiting for the device after every step would remove
the overlap of the host's next launch with the device's work, which matters for MNIST-sized
kernels. There a framework hands the driver a clock that does not wait: torch records CUDA
events around each step and reads them once at the end of the epoch
(`torch_impl.train.CudaEventStepClock`); TensorFlow keeps each step's loss on the device and
reports the epoch's mean step time (`EpochMeanStepClock`). The epoch's own time is read after
the device is synchronized in every case; the record's train_clock says which clock ran.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol


class StepClock(Protocol):
    def step_started(self) -> None:
        """Called where a step begins: before its batch is fetched."""

    def step_done(self, steps: int = 1) -> None:
        """Called just after `train_step` returned (the device may still be working); after a
        call of several steps (`train.steps_per_call`), with their number: each gets an equal
        share of the call's time."""

    def step_times(self, epoch_time_s: float) -> list[float]:
        """Seconds of every step of the epoch, once the device is synchronized."""


class HostStepClock:
    """The host's clock around each step, after `synchronize` (a no-op on the CPU)."""

    description = "step times: host clock around each step, device synchronized after each"

    def __init__(self, synchronize: Callable[[], None] = lambda: None):
        self.synchronize = synchronize
        self.times: list[float] = []
        self.started = 0.0

    def step_started(self) -> None:
        self.started = time.perf_counter()

    def step_done(self, steps: int = 1) -> None:
        self.synchronize()
        self.times += [(time.perf_counter() - self.started) / steps] * steps

    def step_times(self, epoch_time_s: float) -> list[float]:
        return self.times


class EpochMeanStepClock:
    """No per-step wait: every step gets the epoch's mean (its spread is not measured)."""

    description = "step times: the epoch's mean step time (no per-step device sync)"

    def __init__(self) -> None:
        self.steps = 0

    def step_started(self) -> None:
        pass

    def step_done(self, steps: int = 1) -> None:
        self.steps += steps

    def step_times(self, epoch_time_s: float) -> list[float]:
        return [epoch_time_s / self.steps] * self.steps if self.steps else []


def percentiles(values: Iterable[float], quantiles: Iterable[float]) -> list[float]:
    """Linear-interpolated percentiles (0..100) of `values`; NaN when there are none."""
    ordered = sorted(values)
    out = []
    for q in quantiles:
        if not ordered:
            out.append(float("nan"))
            continue
        position = (len(ordered) - 1) * q / 100.0
        low, high = math.floor(position), math.ceil(position)
        out.append(ordered[low] + (ordered[high] - ordered[low]) * (position - low))
    return out


def in_turn(
    plain: Callable[[Any], None],
    suite: Callable[[Any], None],
    batches: Callable[[int], Iterable[Any]],
    clock: Callable[[], StepClock],
) -> tuple[float, float]:
    """(plain's median step, suite's), in seconds: both given each batch of `batches(epoch)` in
    turn, the order swapped at every step, so that a slow spell of a shared host slows both
    alike; each on a clock of its own. Two epochs; the first warms both up and is not timed."""
    for epoch in range(2):
        clocks = [(plain, clock()), (suite, clock())]
        for index, batch in enumerate(batches(epoch)):
            for take, timer in clocks if index % 2 == 0 else clocks[::-1]:
                timer.step_started()
                take(batch)
                timer.step_done()
    plain_s, suite_s = (statistics.median(timer.step_times(0.0)) for _, timer in clocks)
    return plain_s, suite_s
