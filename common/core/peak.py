"""The machine's measured peak FLOP/s, the denominator of MFU (model FLOPs utilization).

Every rank times a square GEMM at the run's compute precision with its own threads, on its own
device, once; the figure is cached under the host's name, processor, device, precision and
thread count (`$SUITE_CACHE_DIR`, default ~/.cache/dist-mnist/peak_flops.json), so later runs
of either framework on that machine divide by the same peak. Ranks that share a machine time it
at the same moment, each with its share of the cores, so their sum is what the machine gives
them.

    MFU = samples/s x FLOPs per training sample / sum of the ranks' peaks

FLOPs per sample come from the model definition (`common.models.weights.train_flops_per_sample`).
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CACHE_VARIABLE = "SUITE_CACHE_DIR"
REPEATS = 5
# Part of the cache key: raised when a probe changes what it measures, so that a figure a
# faulty probe cached is not reused. 2: torch's 1-thread CPU probe left oneDNN before.
PROBE_VERSION = 2


def gemm_flops(size: int, multiply: Callable[[], None]) -> float:
    """FLOP/s of the fastest of REPEATS calls of `multiply` (after one warm-up), each the
    product of two size x size matrices (2 size^3 FLOPs) that returns once it is done."""
    best = float("inf")
    for _ in range(REPEATS + 1):
        start = time.perf_counter()
        multiply()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def cache_path() -> Path:
    folder = os.environ.get(CACHE_VARIABLE) or Path.home() / ".cache" / "dist-mnist"
    return Path(folder) / "peak_flops.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


def processor(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name, family and model number (Linux): a host name alone stays the same
    when a virtual machine comes up on other hardware (this one moved from a CPU whose fp32
    GEMM peak measured 324 GFLOP/s to one where oneDNN reaches 405), "" where unknown."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return ""
    fields = dict(re.findall(r"^(model name|cpu family|model)\s*:\s*(.*?)\s*$", text, re.M))
    return " ".join(fields.get(name, "?") for name in ("model name", "cpu family", "model"))


def peak_flops(
    *, device: str, precision: str, threads: int, measure: Callable[[], float]
) -> tuple[float, str]:
    """(FLOP/s of one rank, where it came from): the cached figure for this host, device,
    precision and thread count, else `measure()` (a GEMM's FLOP/s), cached for next time. A
    cache that cannot be written only costs the next run the measurement."""
    host = socket.gethostname()
    key = f"probe {PROBE_VERSION}|{host}|{processor()}|{device}|{precision}|{threads} threads"
    path = cache_path()
    cached = _read(path).get(key)
    if isinstance(cached, (int, float)) and cached > 0:
        return float(cached), f"cached in {path}"
    value = measure()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        table = {**_read(path), key: value}  # a rank measuring at the same time may win: fine
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(json.dumps(table, indent=1, sort_keys=True))
        partial.replace(path)
    except OSError:
        pass
    return value, "measured now"


def mfu(samples_per_s: float, flops_per_sample: int, peak_total: float) -> float | None:
    """Model FLOPs utilization, a fraction; None without a peak."""
    return samples_per_s * flops_per_sample / peak_total if peak_total > 0 else None
