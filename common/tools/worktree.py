"""Another commit of the suite, checked out beside this one to be measured (`bench --against`)."""

from __future__ import annotations

import subprocess
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
def checked_out(commit: str, root: Path = ROOT) -> Iterator[Path]:
    """`commit` checked out by `git worktree` into a temporary folder, removed on the way out;
    this checkout's files and branch do not change. A run interrupted before the removal
    leaves at most the temporary folder, and its registration, which the next call prunes."""
    with tempfile.TemporaryDirectory(prefix=f"suite-{commit[:12]}-") as folder:
        tree = Path(folder) / "tree"
        git = ["git", "-C", str(root), "worktree"]
        subprocess.run([*git, "prune"], check=True, capture_output=True)
        subprocess.run(
            [*git, "add", "--detach", "--quiet", str(tree), commit], check=True, capture_output=True
        )
        try:
            yield tree
        finally:
            subprocess.run([*git, "remove", "--force", str(tree)], capture_output=True)
