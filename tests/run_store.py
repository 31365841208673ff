"""One store of real runs per test session: a run that several tests read is made once, by
whichever test asks first, and read by all of them, keyed by everything that makes it (the
program, the launcher's rank count, the settings, the run's name).

Under pytest-xdist each worker has its own base folder below the session's; the store sits in
the session's, and a file lock per run makes it once however many workers ask at the same time.
Its runs are warm (tests/warm_ranks.py): a test whose subject is the launch, a signal, a fault
or a resume makes its own run, and takes only its uninterrupted reference from here. A stored
run is read, never written: a test that changes a run copies it first (`copy_of`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.launching import runner

DONE = ".made"  # written once the run is whole: a run without it is made again


def root(factory: pytest.TempPathFactory) -> Path:
    """The session's store, shared by its workers."""
    base = factory.getbasetemp()
    session = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = session / "run-store"
    folder.mkdir(exist_ok=True)
    return folder


def run(
    factory: pytest.TempPathFactory,
    module: str,
    name: str,
    nproc: int,
    *overrides: str,
    extra: tuple[str, ...] | list[str] = (),
    small: bool = True,
) -> Path:
    """The folder of the run `runner(module, ...)(name, nproc, *overrides, extra=extra,
    small=small)` makes, made once per session; a made run is returned as it is."""
    made_by = [module, name, nproc, list(overrides), list(extra), small]
    key = hashlib.sha256(json.dumps(made_by).encode()).hexdigest()[:16]
    place = root(factory) / key
    with open(root(factory) / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (place / DONE).is_file():
            shutil.rmtree(place, ignore_errors=True)
            place.mkdir()
            runner(module, place, warm=True)(name, nproc, *overrides, extra=extra, small=small)
            (place / DONE).write_text(json.dumps(made_by) + "\n")
    return place / name


def copy_of(stored: Path, where: Path) -> Path:
    """A copy of a stored run in `where`, for a test that writes into it (a resume, a cut)."""
    target = where / stored.name
    shutil.copytree(stored, target, symlinks=True)
    return target
