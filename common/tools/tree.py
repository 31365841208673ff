"""Another commit of the suite, unpacked to be measured beside this one (`bench --against`)."""

from __future__ import annotations

import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class UnknownRef(ValueError):
    """The ref names no commit of this repository; the message says what to give."""


def commit_of(ref: str, root: Path = ROOT) -> str:
    """The full hash of the commit `ref` names in the repository at `root`."""
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise UnknownRef(
            f"--against {ref}: no such commit in {root} (give a hash, a tag or a branch that "
            "`git log` shows, e.g. HEAD~3)"
        )
    return done.stdout.strip()


@contextmanager
def unpacked(commit: str, root: Path = ROOT) -> Iterator[Path]:
    """The files of `commit` (as `git archive` gives them) in a temporary folder, removed on
    the way out: nothing in the repository itself changes, and an interrupted run leaves at
    most a folder in the temporary directory."""
    with tempfile.TemporaryDirectory(prefix=f"suite-{commit[:12]}-") as folder:
        archive = Path(folder) / "tree.tar"
        with archive.open("wb") as sink:
            subprocess.run(
                ["git", "-C", str(root), "archive", "--format=tar", commit],
                stdout=sink,
                check=True,
            )
        tree = Path(folder) / "tree"
        with tarfile.open(archive) as files:
            files.extractall(tree, filter="data")
        archive.unlink()
        yield tree
