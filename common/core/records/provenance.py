"""Where a record comes from: the time it was written and the suite's commit."""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]  # common/core/records/ -> the checkout


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def git_commit(repo: Path = REPO_ROOT) -> str | None:
    """HEAD of the suite's checkout, with '-dirty' when tracked files changed; None outside git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
