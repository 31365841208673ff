"""Records in and out of a run's metrics.jsonl (JSON Lines): the chief's writer, and the
scanner that keeps every valid record of a damaged file and names file, line and field of the
rest (each record checked by `common.core.records.record_json`).

Every record is one `write` of a whole line followed by a flush, so a crash leaves whole lines
(at worst one truncated last line, which the scanner reports by file and line number).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.checks.error_lines import quote
from common.core.records.record_json import MetricsError, from_json, to_json
from common.core.records.records import METRICS_FILENAME, Record

RECORD_START = b'{"record": '  # how every line that `to_json` made begins
CUT_SEARCH_BYTES = 1 << 20  # a record is far shorter: the last newline is within this


class MetricsWriter:
    """Appends records to a JSON Lines file, one whole line per write, synced; each record is
    checked as a reader will check it before it is written. A write that fails (a full disk)
    leaves the file at its last whole line. `reserve` bytes are set aside in a file beside it
    from the start and freed for the last record (`release`), so that run_end fits even when
    the run failed because the disk filled."""

    def __init__(self, path: str | Path, reserve: int = 0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        set_aside_cut_line(self._fd, self.path)
        self._size = os.fstat(self._fd).st_size  # the file as this writer left it
        self._last = (self._size, b"")  # where this writer's latest line went, and the line
        self._reserve = self.path.with_name(f".{self.path.name}.reserve")
        if reserve:
            try:
                self._reserve.write_bytes(b"\0" * reserve)
            except OSError:  # no room even for that: the run will say so when it writes
                self._reserve.unlink(missing_ok=True)

    def write(self, record: Record) -> Record:
        line = to_json(record)
        from_json(line, where=str(self.path))
        data = (json.dumps(line, allow_nan=True) + "\n").encode()
        whole = os.fstat(self._fd).st_size
        # Noted before the write: a stop signal's handler raises where the sync returns, before
        # `_size` counts the line, and the line must still read as this writer's own.
        self._last = (whole, data)
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                raise OSError(  # a short write: the file system ran out of room mid-line
                    errno.ENOSPC,
                    f"{os.strerror(errno.ENOSPC)}: wrote {written} of {len(data)} bytes of a "
                    f"record to {self.path}",
                )
            os.fsync(self._fd)
        except OSError:
            os.ftruncate(self._fd, whole)  # back to the last whole line
            raise
        self._size = whole + written
        return record

    def others_wrote(self) -> bool:
        """Whether another process appended to the file since this writer's last record (a
        line this writer wrote but had not counted, a signal having cut its write short, is
        not another's)."""
        size = os.fstat(self._fd).st_size
        if size == self._size:
            return False
        whole, line = self._last
        return size != whole + len(line) or os.pread(self._fd, len(line), whole) != line

    def release(self) -> None:
        """Free the reserved bytes, for the last record."""
        self._reserve.unlink(missing_ok=True)

    def close(self) -> None:
        self.release()
        os.close(self._fd)

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def set_aside_cut_line(fd: int, path: Path) -> Path | None:
    """Before appending: a file whose last line has no newline (a writer killed mid-write) is
    cut back to its last whole line, and the cut bytes go to a file beside it, so that the next
    record starts a line of its own instead of being glued onto the fragment. Says so on
    stderr; returns the side file, or None when the file ended whole."""
    size = os.fstat(fd).st_size
    if not size or os.pread(fd, 1, size - 1) == b"\n":
        return None
    start = max(0, size - CUT_SEARCH_BYTES)
    tail = os.pread(fd, size - start, start)
    whole = start + tail.rfind(b"\n") + 1 if b"\n" in tail else start
    side = path.with_name(f"{path.name}.cut-at-{whole}")
    side.write_bytes(os.pread(fd, size - whole, whole))
    os.ftruncate(fd, whole)
    print(
        f"warning: {path} ended in a cut line ({size - whole} bytes: a writer was stopped "
        f"mid-record); moved it to {side.name} and appending after the last whole line",
        file=sys.stderr,
        flush=True,
    )
    return side


@dataclass
class ScanResult:
    records: list[Record]
    problems: list[str]  # "file:line: what is wrong", in file order
    raw: list[dict[str, Any]]  # the valid records as the file holds them
    lines: list[int] = dataclasses.field(default_factory=list)  # each record's line number
    cut: list[str] = dataclasses.field(default_factory=list)  # "file:line: ..." of cut lines


def scan(path: str | Path) -> ScanResult:
    """Read every valid record of a metrics file and list what is wrong with the rest."""
    path = Path(path)
    if not path.is_file():
        return ScanResult([], [f"{path}: file is missing"], [])
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as error:
        return ScanResult([], [f"{path}: cannot be read: {error}"], [])
    result = ScanResult([], [], [])
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        is_last = number == len(lines)  # a last line with no newline was cut mid-write
        try:
            raw = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError as error:
            result.problems.append(
                f"{path}:{number}: not UTF-8 text ({error.reason} at byte {error.start})"
            )
            continue
        except RecursionError:
            result.problems.append(f"{path}:{number}: JSON nested too deeply to be a record")
            continue
        except ValueError as error:
            if is_last:
                result.cut.append(
                    f"{path}:{number}: truncated last line (no newline at its end): a record "
                    "cut mid-write, left out"
                )
                continue
            glued = _after_cut(line)
            if glued is None:
                result.problems.append(f"{path}:{number}: {error}")
                continue
            raw, cut_bytes = glued
            result.cut.append(
                f"{path}:{number}: {cut_bytes} bytes of a record cut mid-write precede a whole "
                "record on this line; the cut part is left out"
            )
        try:
            record = from_json(raw, where=f"{path}:{number}")
        except MetricsError as error:
            result.problems.append(str(error))
            continue
        if not result.records and record.KIND != "run_start":
            result.problems.append(f"{path}:{number}: first record is {record.KIND}, not run_start")
        result.records.append(record)
        result.raw.append(raw)
        result.lines.append(number)
    if not result.records and not result.problems:
        result.problems.append(f"{path}: no records")
    return result


def _after_cut(line: bytes) -> tuple[Any, int] | None:
    """(the record, the bytes before it) when `line` is a cut fragment with a whole record
    appended to it (an earlier writer that did not set the fragment aside); else None."""
    start = line.rfind(RECORD_START, 1)
    if start < 0:
        return None
    try:
        return json.loads(line[start:].decode("utf-8")), start
    except ValueError:
        return None


def read_records(path: str | Path) -> list[Record]:
    """All records of a metrics file, typed; MetricsError at the first problem."""
    result = scan(path)
    if result.problems or result.cut:
        raise MetricsError((result.problems or result.cut)[0])
    return result.records


__all__ = ["METRICS_FILENAME", "MetricsError", "MetricsWriter", "quote", "scan"]
