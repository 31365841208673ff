"""How a run is stopped on purpose, and what each way means for its end: SIGTERM or SIGINT (a
launcher stopping its ranks, scancel, Ctrl-C) abort at once; SIGUSR1 (SLURM's warning before
the time limit) asks every rank to checkpoint at the next step boundary (with a step cadence,
`common.core.train.mid_epoch`) or the epoch's end, and leave to be requeued;
the launcher names the rank that failed when it stops the others.
"""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType

from common.launch.cluster import PREEMPTED_EXIT

__all__ = ["PREEMPTED_EXIT", "Aborted", "Diverged", "PeerFailed", "Preempted", "Stops"]


class Aborted(Exception):
    """SIGTERM or SIGINT arrived (a launcher stopping its ranks, SLURM preemption), or
    --stop-after-epoch was reached."""


class Preempted(Aborted):
    """SIGUSR1 (SLURM's warning before the time limit) arrived on some rank: the run
    checkpointed at the end of the epoch and stops with PREEMPTED_EXIT, to be requeued."""


class Diverged(Exception):
    """A train or val loss became NaN or infinite and train.stop_on_divergence is set."""


# How long a rank whose collective failed waits for a stop signal that may be on its way.
STOP_WAIT_S = 1.0


class PeerFailed(Aborted):
    """The launcher stopped this rank because another rank had failed; its message says which."""


def defer_preemption() -> None:
    """Hold SIGUSR1 pending until `Stops.install` has a handler for it: its default action
    kills the process, so one that came during start-up (imports, the rendezvous) killed the
    rank with exit 138. The launcher blocks it from a rank's first instruction (the mask goes
    through exec); the training programs call this first thing too, for srun and torchrun."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})


class Stops:
    """The stop signals of one run: whether SIGUSR1 reached this process (the ranks vote on it
    at the end of every epoch, since it may reach only some of them), and what SIGTERM or
    SIGINT meant when they came."""

    def __init__(self, stop_reason_file: str = "", rank: int | None = None) -> None:
        self.requested = False
        self.stop_reason_file = stop_reason_file
        self.rank = rank  # this process's rank, named as the one that noticed a peer's failure
        self.stopped: Aborted | None = None  # what SIGTERM/SIGINT raised, if they came

    def install(self) -> None:
        """SIGUSR1 asks for a checkpoint and a stop at the end of the epoch; SIGTERM and SIGINT
        raise `Aborted` at once, so the run still writes its run_end record."""
        signal.signal(signal.SIGUSR1, self._request)
        signal.signal(signal.SIGTERM, self._abort)
        signal.signal(signal.SIGINT, self._abort)
        # Held pending since the program's first instruction (`defer_preemption`): one that
        # came early is handled now.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})

    def _request(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True

    @staticmethod
    def quiet() -> None:
        """The run is ending: no further signal may interrupt its run_end. SIGTERM and SIGINT
        are ignored from here on, and a helper process's death (torch's DataLoader raises on
        SIGCHLD) no longer raises in this one."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)

    def record_only(self) -> None:
        """From now on SIGTERM and SIGINT are noted in `stopped`, not raised: the run is
        already on its way out."""
        signal.signal(signal.SIGTERM, self._note)
        signal.signal(signal.SIGINT, self._note)

    def describe(self, signum: int) -> Aborted:
        """What stopping by `signum` means: a launcher stopping the ranks because another
        failed (its reason file says which: that rank comes first, then this one, as when this
        rank's own collective notices it), or a stop from outside (scancel, Ctrl-C)."""
        stopped = f"stopped by signal {signal.Signals(signum).name}"
        reason = self.launcher_says()
        if reason.startswith("rank "):
            me = "this rank" if self.rank is None else f"rank {self.rank}"
            return PeerFailed(f"{reason}; noticed by {me}: {stopped} from the launcher")
        return Aborted(f"{stopped}: {reason}" if reason else stopped)

    def launcher_says(self) -> str:
        """What the launcher wrote of a failed rank ("rank N ..."), or ""."""
        return _read_reason(self.stop_reason_file)

    def _note(self, signum: int, frame: FrameType | None) -> None:
        if self.stopped is None:
            self.stopped = self.describe(signum)

    def _abort(self, signum: int, frame: FrameType | None) -> None:
        self.stopped = self.describe(signum)
        raise self.stopped


def _read_reason(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip() if path else ""
    except OSError:
        return ""
