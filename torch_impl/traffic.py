"""The collectives one piece of work issues on this rank, counted from torch's profiler: each c10d
op (`c10d::allreduce_`, `c10d::_allgather_base_`, ...) is one call of its kind, its bytes those
of the tensor the rank hands it (for a list of tensors, DDP's, its backend event's sizes).

The same profile splits the work's time by each event's self time (`category`): collectives,
the sharding wrapper's own work, and compute (aten ops: the math on a CPU, only the launch on a
GPU). A collective the backend runs on a thread of its own (gloo's DDP all-reduce) has no self
time and its wait is no event: the time it ran while no op of the step's threads did is the
step's wait for it (`exposed_seconds`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from torch.profiler import ProfilerActivity, profile

from common.core.measure.traffic import Call
from common.core.records.entries import StepSplit

T = TypeVar("T")
KINDS = {
    "allreduce_": "all_reduce",
    "allreduce_coalesced_": "all_reduce",
    "_allgather_base_": "all_gather",
    "allgather_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "broadcast_": "broadcast",
}
BACKENDS = ("gloo:", "nccl:", "ucc:", "mpi:")
# libkineto's ILoggerObserver levels: VERBOSE 0, INFO 1, WARNING 2, STAGE 3, ERROR 4, USDT 5
QUIET_KINETO = "6"
ITEMSIZE = {"float": 4, "double": 8, "c10::BFloat16": 2, "c10::Half": 2, "long int": 8, "int": 4}


# FSDP's ranges that wait for the collectives they issued: fully_shard's all_gather and
# post_backward_reduce; FSDP1's pre-forward and pre- and post-backward hooks
WAITING = (
    "FSDP::all_gather (",
    "FSDP::post_backward_reduce",
    "FullyShardedDataParallel._pre_forward",
    "FullyShardedDataParallel._pre_backward",
    "FullyShardedDataParallel._post_backward_hook",
)
FSDP = ("FSDP::", "fsdp::", "FullyShardedDataParallel.", "PythonSubclass", "RegisterPostBackward")
COLLECTIVES = ("c10d::", "gloo:", "nccl:")
OPTIMIZER = ("Optimizer.step#", "Optimizer.zero_grad#")


def category(name: str) -> str:
    """An event's share of a step by its own name: collectives, waiting, FSDP + DTensor,
    optimizer, compute, the rest."""
    if name.startswith(COLLECTIVES):
        return "collectives"
    if name.startswith(WAITING):
        return "waiting"
    if name.startswith(FSDP):
        return "FSDP + DTensor"
    if name.startswith(OPTIMIZER):
        return "optimizer"
    if name.startswith("aten::"):
        return "compute"
    return "the rest"


def _owner(event: Any) -> str:
    """An event's share, its callers considered: an aten op inside a collective, one of FSDP's
    ranges or the optimizer's step is theirs (FSDP's copies in and out, the optimizer's math),
    not the model's compute."""
    own = category(event.name)
    if own != "compute":
        return own
    parent = event.cpu_parent
    while parent is not None:
        above = category(parent.name)
        if above not in ("compute", "the rest"):
            return above
        parent = parent.cpu_parent
    return own


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def exposed_seconds(events: Any) -> tuple[float, float]:
    """Of the collectives the backend ran asynchronously (async backend events, on its own
    thread): seconds when no synchronous event ran (the step waited for them) and seconds when
    one did (they overlapped the step's work)."""
    ran = _union(
        [
            (event.time_range.start, event.time_range.end)
            for event in events
            if event.is_async and event.name.startswith(BACKENDS)
        ]
    )
    if not ran:  # no collective ran on a thread of the backend's own
        return 0.0, 0.0
    busy = _union(
        [(event.time_range.start, event.time_range.end) for event in events if not event.is_async]
    )
    overlapped = 0.0
    index = 0
    for start, end in ran:
        while index < len(busy) and busy[index][1] <= start:
            index += 1
        probe = index
        while probe < len(busy) and busy[probe][0] < end:
            overlapped += min(end, busy[probe][1]) - max(start, busy[probe][0])
            probe += 1
    total = sum(end - start for start, end in ran)
    return (total - overlapped) / 1e6, overlapped / 1e6


def split_seconds(events: Any) -> dict[str, float]:
    """Seconds of each share but the rest, summed over `events`' self times (`profiler.events()`:
    each event with its callers); "waiting" also takes the exposed time of the backend's
    asynchronous collectives (`exposed_seconds`)."""
    found = {
        name: 0.0 for name in ("collectives", "waiting", "FSDP + DTensor", "optimizer", "compute")
    }
    for event in events:
        kind = _owner(event)
        if kind in found:
            found[kind] += event.self_cpu_time_total / 1e6
    found["waiting"] += exposed_seconds(events)[0]
    return found


def _elements(shape: Any) -> int:
    return math.prod(shape) if shape else 0


def quiet_profiler() -> None:
    """Kineto, torch's profiler library, logs a line at each profiler start and stop (its USDT
    level, above ERROR, so no lower level hides it): every counted epoch, on every rank. Unless
    the user set KINETO_LOG_LEVEL (to see them, 5 or below), it is set above them all; Kineto
    reads it when the first profiler starts."""
    os.environ.setdefault("KINETO_LOG_LEVEL", QUIET_KINETO)


def counted(work: Callable[[], T], all_reduce_group: int) -> tuple[T, list[Call], StepSplit]:
    """work()'s result, the collectives it issued and where its time went; `all_reduce_group`:
    the ranks an all-reduce spans (an all-gather's or reduce-scatter's group shows in its
    sizes)."""
    quiet_profiler()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        start = time.perf_counter()
        result = work()
        wall_s = time.perf_counter() - start
    events = sorted(profiler.events(), key=lambda event: event.time_range.start)
    seconds = split_seconds(events)
    split = StepSplit(
        compute_s=seconds["compute"],
        framework_s=seconds["FSDP + DTensor"],
        optimizer_s=seconds["optimizer"],
        collectives_s=seconds["collectives"] + seconds["waiting"],
        wall_s=wall_s,
        source="torch profiler, CPU (self time of each event)",
    )
    ops = [e for e in events if e.name.startswith("c10d::") and e.name[6:] in KINDS]
    backend = [e for e in events if e.name.startswith(BACKENDS)]
    calls = []
    for index, op in enumerate(ops):
        kind = KINDS[op.name[6:]]
        shapes = list(op.input_shapes)
        dtypes = list(getattr(op, "input_dtypes", []) or [])
        if kind in ("all_gather", "reduce_scatter") and len(shapes) > 1 and shapes[1]:
            output, given = _elements(shapes[0]), _elements(shapes[1])
            group = max(output, given) // max(1, min(output, given))
            dtype = dtypes[1] if len(dtypes) > 1 else "float"
        else:
            sized = shapes[0] if shapes and shapes[0] else None
            dtype = dtypes[0] if sized and dtypes else "float"
            if sized is None and index < len(backend) and backend[index].input_shapes:
                sized = backend[index].input_shapes[0]  # a tensor list: the backend's view
                dtype = (list(getattr(backend[index], "input_dtypes", []) or []) or ["float"])[0]
            given, group = _elements(sized), all_reduce_group
        calls.append(Call(kind, given * ITEMSIZE.get(dtype, 4), group))
    return result, calls, split
