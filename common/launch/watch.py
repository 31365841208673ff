"""Which rank of a local launch is at fault, as the launcher sees its children: killed by a
signal, failed, or stopped (SIGSTOP), named with its pid, and the exit code the launcher
passes on (`common.launch.local`)."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

from common.launch.cluster import PREEMPTED_EXIT

STOPPED_S = 1.0  # a rank stopped this long is taken to have stopped answering


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def is_stopped(pid: int) -> bool:
    """Whether process `pid` is stopped (SIGSTOP, SIGTSTP; state T in /proc/PID/stat)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


def what_happened(rank: int, process: subprocess.Popen[bytes], stopped: bool = False) -> str:
    """One rank's failure as the launcher saw it, naming its pid."""
    where = f"pid {process.pid} on {socket.gethostname()}"
    if stopped:
        return f"rank {rank} stopped answering: its process is stopped (SIGSTOP; {where})"
    code = process.returncode or 0
    if code < 0:
        return f"rank {rank} was killed by {signal.Signals(-code).name} ({where})"
    return f"rank {rank} failed with exit code {code} ({where})"


def _first_failure(processes: list[subprocess.Popen[bytes]]) -> tuple[int, int] | None:
    """(rank, returncode) of the rank that failed, among those found dead in one pass. A rank
    killed by a signal is the cause rather than a peer that then failed in a collective."""
    failed = [
        (rank, p.returncode)
        for rank, p in enumerate(processes)
        if p.returncode and p.returncode != PREEMPTED_EXIT  # checkpointed on request: no fault
    ]
    return min(failed, key=lambda found: (found[1] >= 0, found[0]), default=None)


def last_run_end(note: Path) -> dict[str, Any] | None:
    """The run_end that ends the run's metrics file, if it does: the run folder is read from
    `note`, where the chief wrote it (`common.launch.cluster.RUN_DIR_VARIABLE`)."""
    try:
        run_dir = Path(note.read_text(encoding="utf-8").strip())
        last = (run_dir / "metrics.jsonl").read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1]
        record = json.loads(last)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("record") == "run_end" else None


def named_by_run_end(record: dict[str, Any] | None, world_size: int) -> tuple[int, str] | None:
    """(rank, what happened to it) when the ranks' run_end names a rank at fault first: the
    ranks tell from their beacons a rank that stopped answering, which the launcher cannot see
    when the rank is stuck in the kernel (state D: a hung file system, a frozen cgroup)."""
    error = record.get("error") if record else None
    match = re.match(r"rank (\d+) (\(host [^)]*\) (?:stopped answering|is gone)[^;]*)", error or "")
    if match is None or not 0 <= int(match.group(1)) < world_size:
        return None
    return int(
        match.group(1)
    ), f"rank {match.group(1)} {match.group(2)}, as the ranks' run_end says"


class Watch:
    """Which rank is at fault, as the launcher sees its children: the first found killed by a
    signal or failed, or, before either, one found stopped for STOPPED_S (its peers will fail
    in a collective later, and only have noticed it). Its description goes into the reason
    file at once, so that the ranks that notice can name it in their run_end."""

    def __init__(
        self, processes: list[subprocess.Popen[bytes]], reason_file: Path, note: Path | None = None
    ) -> None:
        self.processes, self.reason_file, self.note = processes, reason_file, note
        self.culprit: int | None = None
        self.culprit_stopped = False
        self.said: str | None = None  # the ranks' own word on the culprit (their run_end)
        self.failed_at: float | None = None
        self.stopped_since: dict[int, float] = {}
        self.noticed: dict[int, int] = {}  # ranks that failed on their own after it: exit code
        self.terminating = False  # SIGTERM sent: a rank that ends now was stopped, not failed

    def check(self, now: float) -> None:
        found = _first_failure(self.processes)
        for rank, process in enumerate(self.processes):
            if process.returncode is None and is_stopped(process.pid):
                self.stopped_since.setdefault(rank, now)
            else:
                self.stopped_since.pop(rank, None)
        stopped = [r for r, since in self.stopped_since.items() if now - since > STOPPED_S]
        if self.culprit_stopped and not found and self.culprit not in self.stopped_since:
            self.culprit, self.culprit_stopped = None, False  # it was continued in time
            self.reason_file.unlink(missing_ok=True)
        if self.culprit is None and (stopped or found):
            self.culprit = stopped[0] if stopped else found[0] if found else None
            self.culprit_stopped = bool(stopped)
            self.reason_file.write_text(self.describe(), encoding="utf-8")
        if found and self.failed_at is None:
            self.failed_at = now
            self._hear_the_ranks(found)
        if self.culprit is None or self.terminating:
            return
        for rank, process in enumerate(self.processes):
            if rank != self.culprit and process.returncode and rank not in self.noticed:
                self.noticed[rank] = process.returncode

    def _hear_the_ranks(self, found: tuple[int, int]) -> None:
        """A rank that failed with an exit code may only have noticed another: when the run_end
        the ranks wrote names another rank at fault, that one is the culprit."""
        if found[1] < 0 or self.culprit_stopped or self.note is None:
            return  # killed by a signal, or seen stopped: the launcher's own eyes win
        named = named_by_run_end(last_run_end(self.note), len(self.processes))
        if named is not None and named[0] != found[0]:
            self.culprit, self.said = named
            self.noticed.pop(self.culprit, None)
            self.reason_file.write_text(self.said, encoding="utf-8")

    def _at_fault(self) -> int:
        if self.culprit is None:
            raise RuntimeError("the launcher asked which rank is at fault before one failed")
        return self.culprit

    def describe(self) -> str:
        rank = self._at_fault()
        return self.said or what_happened(rank, self.processes[rank], self.culprit_stopped)

    def exit_code(self) -> int:
        code = self.processes[self._at_fault()].returncode
        if self.culprit_stopped or self.said or code is None:
            code = next(iter(self.noticed.values()), 1)
        return _exit_code(code)

    def last_line(self) -> str:
        noticed = ", ".join(str(rank) for rank in sorted(self.noticed))
        seen = (
            f"; rank{'s' if len(self.noticed) > 1 else ''} {noticed} only noticed it"
            if noticed
            else ""
        )
        return f"[launch] {self.describe()}{seen}; stopped the other ranks; exit {self.exit_code()}"
