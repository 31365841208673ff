"""Who is alive in a run folder, read from the file system, so that it works under any launcher
(common.launch, srun, torchrun) and across nodes that share the folder.

- The folder lock, `<run>/.lock`, held by the chief of the one launch writing into the folder,
  for the life of its process: a second launch is refused, naming the holder's host and pid.
- A beacon per rank, `<run>/.ranks/rank-N.json`, which the rank holds locked and touches every
  HEARTBEAT_S. A beacon whose lock can be taken belongs to a rank that is gone (killed, crashed:
  the kernel drops a dead process's locks); one left untouched for SILENT_AFTER_S belongs to a
  rank that stopped answering (SIGSTOP, a hung node).

Locks are flock(2) locks; on a file system without them (some parallel file systems mounted
without `flock`), a warning says that two launches of one folder are not prevented there.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOCK_FILE = ".lock"
RANKS_DIR = ".ranks"
HEARTBEAT_S = 1.0
SILENT_AFTER_S = 10.0  # the longest a live rank's beacon goes untouched is HEARTBEAT_S
BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


class FolderBusy(Exception):
    """The folder's lock is held by a live launch; the message names it."""


def holder() -> dict[str, Any]:
    """What a lock or beacon file says of the process that holds it."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}


def named(who: dict[str, Any]) -> str:
    """ "host h, pid p", for messages."""
    return f"host {who.get('host', '?')}, pid {who.get('pid', '?')}"


def _read(handle: int) -> dict[str, Any]:
    os.lseek(handle, 0, os.SEEK_SET)
    text = os.read(handle, 4096).decode("utf-8", "replace").strip()
    try:
        found = json.loads(text) if text else {}
    except ValueError:
        return {"unreadable": text[:80]}
    return found if isinstance(found, dict) else {}


def _write(handle: int, content: dict[str, Any]) -> None:
    os.ftruncate(handle, 0)
    os.pwrite(handle, (json.dumps(content) + "\n").encode(), 0)


class Held:
    """A file locked by this process, until `release` or the process's end."""

    def __init__(self, path: Path, handle: int | None) -> None:
        self.path, self.handle = path, handle

    def release(self, *, clear: bool = True) -> None:
        """Unlock; `clear` empties the file first, which tells the next holder this one ended
        cleanly. The file stays: removing it would let two launches lock two different files."""
        if self.handle is None:
            return
        if clear:
            os.ftruncate(self.handle, 0)
        os.close(self.handle)  # closing drops the flock
        self.handle = None


def take(path: Path, content: dict[str, Any]) -> tuple[Held, dict[str, Any]]:
    """Lock `path` without waiting and write `content` into it: (the lock, what the file said
    of an earlier holder that did not release it: {} if none). Raises FolderBusy naming a live
    holder. Where the file system has no locks, the lock is a no-op (`Held.handle` None)."""
    handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in BUSY:
            who = _read(handle)
            os.close(handle)
            raise FolderBusy(named(who) + _since(who)) from None
        os.close(handle)
        if error.errno in (errno.ENOLCK, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            return Held(path, None), {"unsupported": str(error)}
        raise
    earlier = _read(handle)
    _write(handle, content)
    return Held(path, handle), earlier


def _since(who: dict[str, Any]) -> str:
    since = who.get("since")
    if not isinstance(since, (int, float)):
        return ""
    return ", since " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since))


class Beacon:
    """This rank's beacon: its file, locked and touched every HEARTBEAT_S by a daemon thread."""

    def __init__(self, run_dir: Path, rank: int) -> None:
        folder = run_dir / RANKS_DIR
        folder.mkdir(exist_ok=True)
        self.held, _ = take(folder / f"rank-{rank}.json", {"rank": rank, **holder()})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="beacon", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                os.utime(self.held.path)
            except OSError:
                return

    def release(self) -> None:
        self._stop.set()
        self.held.release(clear=False)  # peers may still read who this rank was


@dataclass(frozen=True, slots=True)
class Peer:
    """A rank as its beacon shows it."""

    rank: int
    who: dict[str, Any]
    state: str  # "alive", "gone" (its process ended), "silent" (stopped answering)
    quiet_s: float  # seconds since its beacon was last touched

    def describe(self) -> str:
        where = named(self.who)
        if self.state == "gone":
            return f"rank {self.rank} ({where}) is gone: its process ended"
        if self.state == "silent":
            return f"rank {self.rank} ({where}) stopped answering ({self.quiet_s:.0f} s silent)"
        return f"rank {self.rank} ({where}) is alive"


def peer(run_dir: Path, rank: int, pid: int | None = None) -> Peer | None:
    """Rank `rank` of this launch as its beacon shows it; None without one (or with one of an
    earlier launch, when `pid`, the rank's pid in this launch, says so)."""
    path = run_dir / RANKS_DIR / f"rank-{rank}.json"
    try:
        handle = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        who = _read(handle)
        if pid is not None and who.get("pid") != pid:
            return None
        quiet_s = time.time() - os.fstat(handle).st_mtime
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in BUSY:
                return None  # no locks here: nothing can be told
            state = "silent" if quiet_s > SILENT_AFTER_S else "alive"
        else:
            state = "gone"
        return Peer(rank=rank, who=who, state=state, quiet_s=quiet_s)
    finally:
        os.close(handle)


def survey(run_dir: Path, pids: list[int], settle: bool = False) -> list[Peer]:
    """Every rank of this launch (`pids`, in rank order) whose beacon shows it gone or silent.
    With `settle`, a beacon already missing beats but not yet SILENT_AFTER_S quiet is waited
    for until it is (a collective can fail sooner than that: TensorFlow's heartbeats)."""
    deadline = time.monotonic() + SILENT_AFTER_S
    while True:
        found = [p for p in (peer(run_dir, r, pid) for r, pid in enumerate(pids)) if p]
        lost = [p for p in found if p.state != "alive"]
        missing_beats = [p for p in found if p.state == "alive" and p.quiet_s > 3 * HEARTBEAT_S]
        if lost or not missing_beats or not settle or time.monotonic() > deadline:
            return lost
        time.sleep(HEARTBEAT_S / 5)
