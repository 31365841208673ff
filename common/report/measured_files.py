"""The files of rows that a measuring tool writes for compare.py to find among its results
(`common.tools.failure_cost --out`, `common.tools.bench --out`): the rows, with the host and the
time they were measured on and the command that measured them. Each reader
(`common.report.lost_rank_table`, `common.report.harness_ratio`) checks its own rows."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

from common.core import whole_files
from common.core.measure import peak


def write(path: Path, rows: list[dict[str, Any]], command: list[str]) -> None:
    """The rows as the file compare.py reads, with this host and the time."""
    document = {
        "measured": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": f"{peak.processor()}, {os.cpu_count()} logical CPUs",
        "command": command,
        "rows": rows,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    whole_files.write_text(path, json.dumps(document, indent=2) + "\n")


def found(results: list[str], pattern: str) -> list[Path]:
    """The files matching `pattern` in the result folders, sorted."""
    return sorted({p for r in results if Path(r).is_dir() for p in Path(r).glob(pattern)})
