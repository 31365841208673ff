"""Check the memory plan (`torch_impl.memory_plan`) against real ranks: each rank of a real launch
builds the run's model as training does and steps it REAL_STEPS times on a real process group,
while the CPU allocator counts every tensor allocated and freed on every thread (torch's
profiler with profile_memory, `every_thread_counted`). Rank 0's peak in each steady step is set
beside the tracker's figure: the lowest is the step whose collectives kept pace, the highest
adds what a collective still in flight held.

    python -m common.launch --nproc 4 -- python -m torch_impl.memory_check \\
        --config configs/mlp_adam.yaml --set torch.strategy=fsdp2 [--json]

One configuration per launch. Tensors on the CPU only; the build's own transient is reported
apart, since the tracker starts after the build.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from common.core.config import config_io
from common.core.config.config import Config
from common.core.config.strategies import ParallelDims, get
from common.launch import environment
from torch_impl import dist
from torch_impl.memory_tracker import per_rank_batch, stepper, tracked, untracked
from torch_impl.parallel import resolve_strategy
from torch_impl.traffic import quiet_profiler

MARK = "suite::memory_check_step"
REAL_STEPS = 6  # the first is the optimizer state's; the others are steady, each timed apart


def peaks(trace: dict, mark: str) -> tuple[int, list[int]]:
    """(the build's peak, each step's peak) of live tensor bytes in a profiler trace (its
    exported JSON): the largest 'Total Allocated' the allocator reported before the first range
    named `mark`, and within each such range: the allocator's own count (c10's
    ProfiledCPUMemoryReporter), of every thread inside `every_thread_counted`."""
    events = trace["traceEvents"]
    ranges = sorted(
        (event["ts"], event["ts"] + event["dur"]) for event in events if event.get("name") == mark
    )
    memory = [
        (event["ts"], int(event["args"]["Total Allocated"]))
        for event in events
        if event.get("name") == "[memory]"
    ]
    build = max((total for ts, total in memory if ts < ranges[0][0]), default=0)
    steps = [
        max((total for ts, total in memory if begun <= ts <= ended), default=0)
        for begun, ended in ranges
    ]
    return build, steps


@contextlib.contextmanager
def every_thread_counted() -> Iterator[None]:
    """Turn on c10's flag `caffe2_report_cpu_memory_usage` while inside: the allocator's count
    then takes every thread's allocations and frees. The profiler alone counts only those of
    the threads it profiles, so a buffer freed on a gloo thread (where its collective dropped
    the last reference) was never subtracted: 2.7 to 32 MiB too many, now and then, and on
    from there. torch offers no setter; the flag is libc10's exported global."""
    library = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libc10.so"))
    try:
        flag = ctypes.c_bool.in_dll(library, "FLAGS_caffe2_report_cpu_memory_usage")
    except ValueError:
        raise RuntimeError(
            f"torch {torch.__version__}'s libc10 has no caffe2_report_cpu_memory_usage flag: "
            "the allocator cannot count other threads' frees here"
        ) from None
    before = flag.value
    flag.value = True
    try:
        yield
    finally:
        flag.value = before


def measured(
    cfg: Config, dims: ParallelDims, batch: int, info: dist.DistInfo
) -> tuple[int, list[int]]:
    """(the build's peak, each step's peak) of this rank's live tensor bytes, from the
    allocator: the model built and stepped REAL_STEPS times on the real process group."""
    quiet_profiler()
    strategy = get("torch", cfg.torch.strategy)
    with (
        every_thread_counted(),
        profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler,
    ):
        ready = stepper(cfg, strategy, dims, batch, info.device, info.rank)
        for _ in range(REAL_STEPS):
            with record_function(MARK):
                ready.step()
    with tempfile.TemporaryDirectory(prefix="memory-check-") as scratch:
        path = Path(scratch) / "trace.json"
        profiler.export_chrome_trace(str(path))
        return peaks(json.loads(path.read_text()), MARK)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_impl.memory_check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    config_io.add_config_arguments(parser)
    parser.add_argument("--json", action="store_true", help="the chief's row as one JSON line")
    args = parser.parse_args(argv)
    spec = environment.from_environment()
    try:
        cfg = resolve_strategy(config_io.config_from_args(args), spec.world_size)
        strategy = get("torch", cfg.torch.strategy)
        reason = untracked(cfg)
        if reason:
            raise ValueError(f"{reason} (torch_impl.memory_plan): nothing to check")
        batch = per_rank_batch(cfg, spec.world_size, "strong", run_world=spec.world_size)
        info = dist.setup_distributed(cfg, spec)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    dims = strategy.dims(spec.world_size, spec.local_world_size, cfg)
    build, steps = measured(cfg, dims, batch, info)
    dist.leave_together(info, cfg.dist.timeout_s)
    if not info.is_chief:
        return 0
    sizes = tracked(cfg, spec.world_size, batch, spec.local_world_size)
    steady = steps[1:]  # after the first step, which creates the optimizer's state
    row: dict[str, Any] = {
        "strategy": cfg.torch.strategy,
        "world": spec.world_size,
        "batch": batch,
        "measured": min(steady),
        "measured_max": max(steady),
        "tracked": sizes["peak"],
        "tracked_buffers": sizes["buffers"],
        "build": build,
    }
    if args.json:
        print(json.dumps(row))
        return 0
    mib = {key: value / 2**20 for key, value in row.items() if isinstance(value, int)}
    print(
        f"{row['strategy']} x{row['world']} (batch {batch}/rank): rank 0's tensors peaked at "
        f"{mib['measured']:,.1f} to {mib['measured_max']:,.1f} MiB in {len(steady)} steady steps "
        f"(the allocator's count); the tracker says {mib['tracked']:,.1f} MiB, "
        f"{sizes['peak'] / min(steady) - 1:+.1%} from the lowest; the build peaked at "
        f"{mib['build']:,.1f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
