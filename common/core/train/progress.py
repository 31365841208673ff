"""Live progress inside an epoch, printed by the chief only, the same for both frameworks.

On a terminal it is one line, rewritten in place at most every TERMINAL_EVERY_S; in a log file
(SLURM's output, a pipe) it is a plain line every LOG_EVERY_S. It reads: epoch, step/steps,
samples/s, the chief's loss, and the ETA of the training steps left in the run. The driver
stops the train clock while it prints, and `spent_s` says what it cost.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

TERMINAL_EVERY_S = 0.5
LOG_EVERY_S = 30.0


def duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    def __init__(
        self,
        *,
        enabled: bool,
        epochs: int,
        steps_per_epoch: int,
        global_batch: int,
        every_s: float | None = None,
        stream: TextIO | None = None,
    ) -> None:
        self.stream = stream or sys.stdout
        self.enabled = enabled
        self.terminal = self.stream.isatty()
        default = TERMINAL_EVERY_S if self.terminal else LOG_EVERY_S
        self.every_s = default if every_s is None else every_s
        self.epochs, self.steps, self.global_batch = epochs, steps_per_epoch, global_batch
        self.spent_s = 0.0
        self._shown_at = 0.0
        self._width = 0
        self._first_step = 0

    def start_epoch(self, first_step: int = 0) -> None:
        """An epoch begins, at `first_step` steps in when a launch resumed inside it."""
        self._shown_at = time.monotonic()
        self._first_step = first_step

    def due(self) -> bool:
        """Whether a line is due: what the driver asks after every step, so that `update`
        and its arguments are made only when one is."""
        return self.enabled and time.monotonic() - self._shown_at >= self.every_s

    def update(self, *, epoch: int, step: int, train_s: float, loss: Callable[[], float]) -> float:
        """After step `step` (1-based) of epoch `epoch` (0-based), `train_s` seconds into the
        epoch's clock. `loss()` is called (it may wait for the device) only when a line is
        due. Returns the seconds spent here, for the caller to take off its clock."""
        if not self.enabled:
            return 0.0
        now = time.monotonic()
        if now - self._shown_at < self.every_s:
            return 0.0
        rate = (step - self._first_step) / train_s if train_s > 0 else 0.0
        left = (self.epochs - epoch - 1) * self.steps + self.steps - step
        eta = duration(left / rate) if rate else "?"
        line = (
            f"epoch {epoch + 1}/{self.epochs} | step {step}/{self.steps} | "
            f"{rate * self.global_batch:,.0f} samples/s | loss {loss():.4f} (chief) | "
            f"ETA {eta}"
        )
        self._write(line)
        self._shown_at = time.monotonic()
        spent = self._shown_at - now
        self.spent_s += spent
        return spent

    def end_epoch(self) -> None:
        """Clear the terminal line, so that the epoch record's line stands alone."""
        if self.enabled and self.terminal and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def _write(self, line: str) -> None:
        if self.terminal:
            self.stream.write("\r" + line.ljust(self._width))
            self._width = max(self._width, len(line))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
