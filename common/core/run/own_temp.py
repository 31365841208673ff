"""A training process's own temporary folder, removed as it leaves.

The training programs leave with `os._exit`, which runs no atexit handler, and TensorFlow's
AutoGraph removes the source files of the functions it converts from one: every TensorFlow run
left its `__autograph_generated_file*.py` files in /tmp. So the TensorFlow side writes its
temporary files into a folder of its own (under TMPDIR, else /tmp), removed as it leaves; a
process killed outright leaves that folder, named after its host, pid namespace and pid, and
the next process there removes those of processes that no longer run. torch's side keeps the
shared folder: Inductor's compile caches are meant to outlive a run.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import tempfile

_taken: str | None = None


def _prefix() -> str | None:
    """The start of the names of this host's and pid namespace's folders (the pid follows);
    None where the namespace cannot be read (no /proc): then nothing is swept."""
    try:
        namespace = os.readlink("/proc/self/ns/pid").strip("pid:[]")
    except OSError:
        return None
    return f"suite-rank-{socket.gethostname()}-{namespace}-"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def sweep(folder: str) -> list[str]:
    """Remove the folders in `folder` that processes of this host and pid namespace took and
    left without removing (killed outright); return their names."""
    prefix = _prefix()
    if prefix is None:
        return []
    removed = []
    with os.scandir(folder) as entries:
        for entry in entries:
            pid, _, rest = entry.name.removeprefix(prefix).partition("-")
            if not entry.name.startswith(prefix) or not pid.isdigit() or not rest:
                continue
            if int(pid) != os.getpid() and not _running(int(pid)):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.name)
    return removed


def take() -> str:
    """Point `tempfile` at a new folder of this process's own, under TMPDIR (read now: a rank
    forked from a warm process may have another TMPDIR than its parent had), the folders that
    killed processes left there removed first (`sweep`); return it. A process that ends
    without `os._exit` removes it at exit."""
    global _taken
    if _taken is None:
        tempfile.tempdir = None  # read TMPDIR again
        shared = tempfile.gettempdir()
        sweep(shared)
        named = _prefix() or "suite-rank-"
        _taken = tempfile.mkdtemp(prefix=f"{named}{os.getpid()}-", dir=shared)
        tempfile.tempdir = _taken
        atexit.register(give_back)
    return _taken


def give_back() -> None:
    """Remove the folder `take` made, with what is in it (nothing if none was taken); `tempfile`
    goes back to the shared temporary folder."""
    global _taken
    if _taken is None:
        return
    shutil.rmtree(_taken, ignore_errors=True)
    tempfile.tempdir = None
    _taken = None
