"""Which test files start processes (the `processes` marker), for `make test-fast`: the tier
that starts none, the inner loop. A file starts processes when it, a `tests` module it imports
(at any depth) or its folder's conftest names subprocess, multiprocessing or fork; the whole
file is then in the slow tier. Read from the sources, so a new test needs no marker by hand."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SPAWNS = re.compile(r"\bsubprocess\b|\bPopen\b|\bmultiprocessing\b|\.spawn\(|os\.fork\(")
HELPERS = re.compile(r"^\s*from (tests(?:\.\w+)+) import|^\s*from tests import (\w+)", re.M)


@cache
def starts_processes(path: Path) -> bool:
    """Whether the test module (or helper) at `path` may start a process."""
    if not path.is_file():
        return False
    text = path.read_text(encoding="utf-8")
    if SPAWNS.search(text):
        return True
    for dotted, name in HELPERS.findall(text):
        module = dotted or f"tests.{name}"
        helper = TESTS.parent / (module.replace(".", "/") + ".py")
        if helper != path and starts_processes(helper):
            return True
    conftest = path.parent / "conftest.py"
    return path.name.startswith("test_") and conftest != path and starts_processes(conftest)
