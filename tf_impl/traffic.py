"""The collectives a compiled TensorFlow function issues per call, read from its graph: every
collective op (`CollectiveReduceV2`, `CollectiveGatherV2`, `CollectiveBcastSendV2`) in the
concrete function and the functions it calls, with the size and type of its input. MWMS packs
the gradients before it reduces them, so one op may carry the whole model."""

from __future__ import annotations

import math

import tensorflow as tf

from common.core.measure.traffic import Call

KINDS = {
    "CollectiveReduce": "all_reduce",
    "CollectiveReduceV2": "all_reduce",
    "CollectiveReduceV3": "all_reduce",
    "CollectiveGather": "all_gather",
    "CollectiveGatherV2": "all_gather",
    "CollectiveBcastSend": "broadcast",
    "CollectiveBcastSendV2": "broadcast",
}


def _operations(graph, seen: set[str]):
    yield from graph.get_operations()
    for name, function in getattr(graph, "_functions", {}).items():
        nested = getattr(function, "graph", None)
        if name not in seen and nested is not None:
            seen.add(name)
            yield from _operations(nested, seen)


def graph_calls(concrete, ranks: int, elements_if_unknown: int = 0) -> list[Call]:
    """The collectives of one call of `concrete` (a tf.function's concrete function); an input
    traced with an unknown size counts `elements_if_unknown` elements."""
    calls = []
    for op in _operations(concrete.graph, set()):
        kind = KINDS.get(op.type)
        if kind is None:
            continue
        given = op.inputs[0]
        dims = given.shape.as_list() if given.shape.rank is not None else None
        known = dims is not None and None not in dims
        elements = math.prod(dims) if known and dims else 1 if known else elements_if_unknown
        calls.append(Call(kind, elements * given.dtype.size, ranks))
    return calls


def eval_calls(eval_step, data, info) -> list[Call]:
    """The collectives of one evaluation pass (`tf_impl.step.evaluate`): every batch's graph,
    then the sum of the 3 totals over the workers."""
    images, labels, weights = next(iter(data.eval_batches()))
    batch = eval_step.get_concrete_function(images, labels, weights)
    calls = graph_calls(batch, info.world_size) * data.eval_steps
    summed = info.compiled.get("all_reduce")  # tf_impl.dist.all_reduce_sum's, once it ran
    if info.distributed and summed is not None:
        concrete = summed.get_concrete_function(tf.zeros(3, tf.float64))
        calls += graph_calls(concrete, info.world_size, 3)
    return calls
