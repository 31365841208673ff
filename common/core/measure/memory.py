"""What one rank holds, in the words of the metrics schema
(`common.core.records.records.MemoryEntry`).

Each framework's `memory.memory_use` measures its rank; `gather_memory` turns every rank's
numbers into the epoch record's `memory` list, the same way on both sides.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import re
import resource
from dataclasses import dataclass
from pathlib import Path

from common.core.records.records import MemoryEntry
from common.launch import exchanges

NUMBERS = ("peak_bytes", "param_bytes", "grad_bytes", "optim_bytes")
ADDED = ("baseline_bytes", "peak_above_baseline_bytes", "reserved_peak_bytes")
BASELINE_AT = "after the framework and the data were loaded, before the model was built"
STATUS = Path("/proc/self/status")


def _status_kib(field: str) -> int | None:
    try:
        found = re.search(rf"^{field}:\s+(\d+) kB", STATUS.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(found.group(1)) if found else None


def rss_bytes() -> int:
    """The process's resident set now, garbage collected and heap trimmed first (Linux VmRSS;
    else its peak so far, the best known)."""
    gc.collect()  # objects in reference cycles (the frameworks make many) hold memory too
    trim_heap()
    now = _status_kib("VmRSS")
    if now is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return now * 1024


def trim_heap() -> None:
    """Give freed heap memory back to the system (glibc malloc_trim(3)); nothing elsewhere.
    glibc raises its mmap threshold after large frees (up to 32 MiB), so memory freed after
    building a model can stay resident and would count as the model's; trimmed, the RSS is
    what is live."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name else None


class RssPeak:
    """The process's peak RSS over a span: reset at its start, read at its end."""

    def __init__(self) -> None:
        self.resettable = False

    def reset(self) -> None:
        """Trim the heap, then restart the peak-RSS mark (VmHWM) from the RSS now: writing 5 to
        /proc/self/clear_refs does that since Linux 4.0 (proc(5))."""
        trim_heap()
        try:
            Path("/proc/self/clear_refs").write_text("5")
            self.resettable = True
        except OSError:
            self.resettable = False

    def read(self) -> tuple[int, str]:
        """(bytes, what they count): the peak since the last reset, or since the process
        started where the mark cannot be reset (ru_maxrss, KiB on Linux)."""
        mark = _status_kib("VmHWM")
        if self.resettable and mark is not None:
            return mark * 1024, "process peak RSS during the epoch (VmHWM)"
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "process peak RSS"


RSS_PEAK = RssPeak()


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryUse:
    peak_bytes: int
    """The rank's peak, as `peak_counts` measures it."""
    peak_counts: str
    """What `peak_bytes` counts, e.g. "process peak RSS" or the allocator call."""
    param_bytes: int
    """Parameters this rank holds: a shard under FSDP, the whole model under DDP and MWMS."""
    grad_bytes: int
    optim_bytes: int
    """Optimizer state this rank holds (moments, momentum), not scalar step counters."""
    baseline_bytes: int
    """What the rank held before the model existed (`BASELINE_AT`), in `peak_counts`' measure:
    the process's RSS on the CPU, the allocator's bytes in use on a GPU."""
    reserved_peak_bytes: int | None = None
    """The caching allocator's peak reservation on a GPU (torch.cuda.max_memory_reserved):
    what the device had to give, above what tensors used; None where not measured."""


def above_baseline(use: MemoryUse) -> int:
    """The peak less the baseline: what the model, its training and evaluation added."""
    return max(0, use.peak_bytes - use.baseline_bytes)


def gather_memory(
    local: MemoryUse, *, rank: int, world_size: int, all_reduce_sum: exchanges.AllReduceSum
) -> list[MemoryEntry]:
    """Every rank's MemoryUse as the epoch record's memory entries, in rank order (collective)."""
    reserved = local.reserved_peak_bytes
    row = [
        *(getattr(local, name) for name in NUMBERS),
        local.baseline_bytes,
        above_baseline(local),
        -1 if reserved is None else reserved,
    ]
    table = exchanges.gather_rows(
        row, rank=rank, world_size=world_size, all_reduce_sum=all_reduce_sum
    )
    entries = []
    for index, values in enumerate(table):
        numbers = dict(zip(NUMBERS + ADDED, (int(value) for value in values), strict=True))
        # Every rank measures the same kind of device, so the chief's words hold for all.
        entries.append(
            MemoryEntry(
                rank=index,
                peak_counts=local.peak_counts,
                peak_bytes=numbers["peak_bytes"],
                param_bytes=numbers["param_bytes"],
                grad_bytes=numbers["grad_bytes"],
                optim_bytes=numbers["optim_bytes"],
                baseline_bytes=numbers["baseline_bytes"],
                peak_above_baseline_bytes=numbers["peak_above_baseline_bytes"],
                reserved_peak_bytes=numbers["reserved_peak_bytes"]
                if numbers["reserved_peak_bytes"] >= 0
                else None,
            )
        )
    return entries
