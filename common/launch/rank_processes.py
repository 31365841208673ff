"""The rank processes of a local launch: how each starts (it dies with the launcher, SIGUSR1
held), how its output reaches the launcher's, and how it is signalled (`common.launch.local`)."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from typing import IO

PR_SET_PDEATHSIG = 1  # linux/prctl.h
_LIBC = ctypes.CDLL(None, use_errno=True)


def dies_with(launcher: int) -> None:
    """In a rank between fork and exec: the kernel kills it with SIGKILL when the launcher dies,
    whatever kills the launcher (a timeout's SIGKILL cannot be handled to stop the ranks).
    SIGUSR1 is held pending from the rank's first instruction until its run installs a
    handler (`common.core.run.stop_signals`); the mask goes through exec."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    if os.getppid() != launcher:  # the launcher died before prctl: nobody would kill this rank
        os._exit(1)


def relay(rank: int, stream: IO[bytes], lock: threading.Lock) -> None:
    """A rank's output, prefixed, onto the launcher's; drained to the end even when the
    launcher's own output is gone (a closed terminal), so that no rank blocks writing."""
    shown = True
    for line in iter(stream.readline, b""):
        if not shown:
            continue
        with lock:
            try:
                sys.stdout.buffer.write(f"[rank {rank}] ".encode() + line)
                sys.stdout.flush()
            except OSError:  # EIO after a hang-up, EPIPE: keep draining, show nothing
                shown = False
    stream.close()


def signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass


def leave_unkillable(processes: list[subprocess.Popen[bytes]]) -> None:
    """Ranks that SIGKILL has not ended: stuck in the kernel (state D: a hung file system, a
    frozen cgroup), where the signal waits until they wake. Say so and stop waiting; they die
    when they wake, since SIGKILL is pending."""
    for rank, process in enumerate(processes):
        if process.poll() is None:
            print(
                f"[launch] rank {rank} (pid {process.pid}) did not exit after SIGKILL: it is "
                "stuck in the kernel (a hung file system, a frozen cgroup); not waiting for it, "
                "it dies when it wakes",
                file=sys.stderr,
                flush=True,
            )
