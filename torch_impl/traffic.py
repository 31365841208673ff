"""The collectives one piece of work issues on this rank, counted from torch's profiler: each
c10d op (`c10d::allreduce_`, `c10d::_allgather_base_`, ...) is one call of its kind, and its
bytes are those of the tensor the rank hands it. An op given a list of tensors (DDP's
`allreduce_`) shows no sizes at the c10d level; its backend event (`gloo:all_reduce`,
`nccl:...`), one per c10d op and in the same order, gives them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any, TypeVar

from torch.profiler import ProfilerActivity, profile

from common.core.measure.traffic import Call

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


def _elements(shape: Any) -> int:
    return math.prod(shape) if shape else 0


def quiet_profiler() -> None:
    """Kineto, torch's profiler library, logs a line at each profiler start and stop (its USDT
    level, above ERROR, so no lower level hides it): every counted epoch, on every rank. Unless
    the user set KINETO_LOG_LEVEL (to see them, 5 or below), it is set above them all; Kineto
    reads it when the first profiler starts."""
    os.environ.setdefault("KINETO_LOG_LEVEL", QUIET_KINETO)


def counted(work: Callable[[], T], all_reduce_group: int) -> tuple[T, list[Call]]:
    """work()'s result and the collectives it issued; `all_reduce_group`: the ranks an
    all-reduce spans (an all-gather's or reduce-scatter's group shows in its sizes)."""
    quiet_profiler()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        result = work()
    events = sorted(profiler.events(), key=lambda event: event.time_range.start)
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
    return result, calls
