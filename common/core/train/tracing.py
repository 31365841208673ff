"""Traces a user can open (`output.profile_steps` = N): the N steps after the counted one, in the
launch's first epoch, traced on every rank by the framework's own profiler (`Trainer.tracing`)
into the run folder's `traces/`:

  torch       traces/torch-rank-R.json: a Chrome trace, which Perfetto (ui.perfetto.dev) and
              chrome://tracing open
  TensorFlow  traces/tf-rank-R/plugins/profile/<time>/<host>.xplane.pb: the XSpace, which
              TensorBoard's Profile tab shows (tensorboard --logdir <run>/traces, xprof)

The traced steps are slower than the others; they fall in the first epoch, which the report's
medians leave out. compare.py's report names every trace of its runs
(`common.report.trace_files`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from common.core.train.contract import Trainer

FOLDER = "traces"


class Traces:
    """The tracing of one launch's steps: started before a call, stopped once N steps ran."""

    def __init__(self, trainer: Trainer, run_dir: Path, steps: int) -> None:
        self.trainer, self.folder, self.left = trainer, run_dir / FOLDER, steps
        self._open = contextlib.ExitStack()
        self._tracing = False

    def before_call(self) -> None:
        if self.left > 0 and not self._tracing:
            self.folder.mkdir(exist_ok=True)
            self._open.enter_context(self.trainer.tracing(self.folder))
            self._tracing = True

    def after_call(self, steps: int) -> None:
        if self._tracing:
            self.left -= steps
            if self.left <= 0:
                self.stop()

    def stop(self) -> None:
        """Write what was traced (at N steps, or at the epoch's end if it had fewer)."""
        if self._tracing:
            self._tracing, self.left = False, 0
            self._open.close()
