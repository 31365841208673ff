"""The machine's measured peak FLOP/s, the denominator of MFU (model FLOPs utilization).

    MFU = samples/s x FLOPs per training sample / sum of the ranks' peaks

Every rank times a square GEMM at the run's compute precision with its own threads and device,
at the same moment as the ranks sharing its machine, so their sum is what the machine gives
them. The probe grows its matrices until one product takes TARGET_CALL_S and keeps the best
within BUDGET_S, so an emulated precision costs seconds. The figure is cached per host,
processor, device, precision and threads (`$SUITE_CACHE_DIR`, default
~/.cache/dist-mnist/peak_flops.json) with how it was measured; a higher figure replaces it, one
measured under load is measured again, and a run whose MFU exceeds 100% measures again.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common.core.records import provenance

CACHE_VARIABLE = "SUITE_CACHE_DIR"
REPEATS = 5
MIN_SIZE = 256
TARGET_CALL_S = 0.1  # the matrices grow until one product takes this long
BUDGET_S = 1.5  # then products are timed for at most this long (at least 2, at most REPEATS)
# Part of the cache key: raised when a probe changes what it measures, so that a figure a
# faulty probe cached is not reused. 2: torch's 1-thread CPU probe left oneDNN before. 3: sizes
# adapt to the speed, and entries say when and how they were measured.
PROBE_VERSION = 3


@dataclass(frozen=True, slots=True)
class Probe:
    """A measured GEMM rate and how it was measured."""

    flops: float  # the best product's FLOP/s
    size: int  # of the square matrices
    products: int  # timed
    spread: float  # (best - worst) / best of the timed products: the noise while measuring


def gemm_flops(size: int, multiply: Callable[[], None]) -> float:
    """FLOP/s of the fastest of REPEATS calls of `multiply` (after one warm-up), each the
    product of two size x size matrices (2 size^3 FLOPs) that returns once it is done."""
    best = float("inf")
    for _ in range(REPEATS + 1):
        start = time.perf_counter()
        multiply()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def probe_gemm(make: Callable[[int], Callable[[], None]], max_size: int) -> Probe:
    """The rate of `make(size)()`, a product of two size x size matrices (2 size^3 FLOPs) that
    returns once it is done, in bounded time: sizes double from MIN_SIZE while one product takes
    less than TARGET_CALL_S (up to `max_size`); then the best of at least 2 and at most REPEATS
    products timed within BUDGET_S."""
    size = MIN_SIZE
    multiply = make(size)
    multiply()  # warm-up: allocation, kernel selection
    took = _timed(multiply)
    while took < TARGET_CALL_S and size * 2 <= max_size:
        size *= 2
        multiply = make(size)
        multiply()
        took = _timed(multiply)
    times = [took]
    deadline = time.perf_counter() + BUDGET_S
    while len(times) < 2 or (len(times) < REPEATS and time.perf_counter() < deadline):
        times.append(_timed(multiply))
    best, worst = min(times), max(times)
    return Probe(flops=2 * size**3 / best, size=size, products=len(times), spread=1 - best / worst)


def _timed(call: Callable[[], None]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


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


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _busy(entry: dict[str, Any]) -> bool:
    """Whether `entry` was measured on a busy machine (more runnable work than cores) that is
    quieter now: its figure is likely low, and is measured again."""
    load, cores = entry.get("load_1min"), entry.get("cores")
    if not isinstance(load, (int, float)) or not isinstance(cores, int):
        return False
    return load > cores and os.getloadavg()[0] < load


def peak_flops(
    *, device: str, precision: str, threads: int, measure: Callable[[], Probe], fresh: bool = False
) -> tuple[float, str]:
    """(FLOP/s of one rank, where it came from): the cached figure for this host, device,
    precision and thread count, else `measure()`, cached with when and how it was measured;
    `fresh` measures again. The higher of a new and a cached figure counts (a probe reads low
    when something else ran, never high); a cached figure a new probe confirms keeps the lower
    of the two loads, so that a busy machine's figure is checked again only when it is
    quieter still."""
    host = socket.gethostname()
    key = f"probe {PROBE_VERSION}|{host}|{processor()}|{device}|{precision}|{threads} threads"
    path = cache_path()
    cached = _read(path).get(key)
    entry = cached if isinstance(cached, dict) and cached.get("flops", 0) > 0 else None
    if entry and not fresh and not _busy(entry):
        return float(entry["flops"]), f"cached in {path} (measured {entry.get('measured')})"
    load = os.getloadavg()[0]
    probe = measure()
    if entry and entry["flops"] >= probe.flops:  # it stands, now checked at a quieter load
        checked = {**entry, "load_1min": min(load, entry.get("load_1min", load))}
        _store(path, key, {**checked, "checked": provenance.utc_now()})
        return float(entry["flops"]), f"cached in {path} (a new probe read less: {probe.flops:.3g})"
    record = {
        **asdict(probe),
        "measured": provenance.utc_now(),
        "load_1min": load,
        "cores": _cores(),
    }
    _store(path, key, record)
    return probe.flops, "measured now"


def _store(path: Path, key: str, entry: dict[str, Any]) -> None:
    """`entry` under `key` in the cache at `path`; a cache that cannot be written only costs the
    next run the measurement."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        table = {**_read(path), key: entry}  # a rank measuring at the same time may win: fine
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(json.dumps(table, indent=1, sort_keys=True))
        partial.replace(path)
    except OSError:
        pass


def mfu(samples_per_s: float, flops_per_sample: int, peak_total: float) -> float | None:
    """Model FLOPs utilization, a fraction; None without a peak."""
    return samples_per_s * flops_per_sample / peak_total if peak_total > 0 else None
