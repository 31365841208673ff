"""A run's last words when it is stopped while stuck in a collective.

Python runs signal handlers only between bytecodes of the main thread. A rank blocked inside
a collective (a TensorFlow all-reduce waiting for a peer that was cancelled too, a gloo call)
runs its SIGTERM handler only when the collective returns: after dist.timeout_s, long after
SLURM's KillWait has sent SIGKILL, so `scancel` left no run_end. Here the C-level handler's
wake-up byte (`signal.set_wakeup_fd`) reaches a helper thread at once; if the main thread has
not ended the run within GRACE_S, the helper writes run_end itself and leaves the process.

It also tells the main thread, when a collective fails, whether a stop signal is arriving:
`scancel` signals every rank at about the same time, and a rank whose peer left first sees
its collective fail before its own SIGTERM is handled; that is a cancellation, not a failure.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

from common.core.run import own_temp

GRACE_S = 2.0  # inside SLURM's KillWait (30 s by default; 5 s on the test cluster)
STOPS = (signal.SIGTERM, signal.SIGINT)


class LastWords:
    def __init__(self, write_end: Callable[[int], bool]):
        """`write_end(signum)` writes the run_end of a run stopped by `signum` (chief only);
        False when the main thread is ending the run itself (then this process is left to it)."""
        self.write_end = write_end
        self.signalled = threading.Event()  # a stop signal arrived (set at once, C level)
        self.done = threading.Event()  # the main thread has ended the run
        self.signum = 0

    def start(self) -> None:
        """Watch for SIGTERM/SIGINT from now on (call from the main thread, after the Python
        handlers are installed)."""
        read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        self._previous = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(read_fd,), daemon=True).start()

    def finish(self) -> None:
        """The main thread has ended the run: stop watching (from the main thread)."""
        self.done.set()
        signal.set_wakeup_fd(self._previous)
        os.close(self._write_fd)  # the watcher reads the end of the pipe and returns

    def stop_arriving(self, within_s: float = GRACE_S) -> bool:
        """Whether a stop signal arrived or arrives within `within_s` seconds."""
        return self.signalled.wait(within_s)

    def _watch(self, read_fd: int) -> None:
        with os.fdopen(read_fd, "rb", buffering=0) as wakeups:
            while True:
                received = wakeups.read(1)
                if not received:
                    return  # finish(): the run ended without a stop signal
                if received[0] in STOPS:
                    self.signum = received[0]
                    self.signalled.set()
                    break
        if self.done.wait(GRACE_S):
            return  # the main thread handled it and ended the run
        try:
            if not self.write_end(self.signum):
                return  # the main thread is writing run_end itself: let it finish
        except Exception:  # noqa: BLE001 - leaving anyway; nothing else may be done here
            pass
        own_temp.give_back()
        os._exit(128 + self.signum)
