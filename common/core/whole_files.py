"""Files written whole or not at all: a reader (a resumed run, compare.py, the next tool) finds
the complete file or no file, never a part of one, whatever stopped the writer (a full disk, a
signal, a dead rank).

The content goes to a temporary name beside the file (same folder, so the same file system),
which is renamed over the file once it is complete (`os.replace` is atomic there); on any
failure the temporary is removed and the error goes on. A folder (a checkpoint) is staged the
same way by its owner (`common.core.run.checkpoint_folders`). docs/runs.md lists every file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

PARTIAL = ".partial"  # a temporary's suffix: .<name>.partial, hidden and never a real name


def partial_name(path: Path) -> Path:
    return path.with_name(f".{path.name}{PARTIAL}")


@contextlib.contextmanager
def whole(path: str | Path) -> Iterator[Path]:
    """A temporary path to write `path`'s content into; it becomes `path` when the block ends,
    and is removed if the block raises."""
    target = Path(path)
    partial = partial_name(target)
    try:
        yield partial
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> Path:
    """`path` holds `text`, whole, or is left as it was."""
    with whole(path) as partial:
        partial.write_text(text, encoding="utf-8")
    return Path(path)
