"""Entries of the records that came with the communication accounting (`Epoch.traffic`), in a
module of their own (`common.core.records.records` holds the records themselves)."""

from __future__ import annotations

from typing import Literal

from common.core.records.fields import Fields, doc

Phase = Literal["train", "eval"]
Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "broadcast"]


class CallSize(Fields):
    """The calls of one collective kind that handed one payload (`TrafficEntry.sizes`)."""

    payload_bytes: float = doc("bytes a rank handed each of these calls, as payload_bytes counts")
    calls: float = doc("how many calls per step (train) or per pass (eval) handed that payload")
    at: list[int] | None = doc(
        "where in the step each of these calls came, 0 the step's first collective of any kind, "
        "in the order the framework's count lists them (torch: the profiler's, by start time): "
        "a link tool times a step's calls in that order (train only; absent before it)",
        added=True,
    )


class TrafficEntry(Fields):
    phase: Phase = doc(
        "train: per optimizer step; eval: per evaluation pass over the test set", choice=True
    )
    kind: Collective = doc("the collective", choice=True)
    calls: float = doc("how many the rank issued, per step (train) or per pass (eval)")
    payload_bytes: float = doc(
        "bytes of the tensors the rank handed to them, per step or pass: the whole buffer of "
        "an all_reduce, reduce_scatter or broadcast, the rank's own shard of an all_gather"
    )
    wire_bytes: float = doc(
        "bytes a ring algorithm makes the rank send for them: 2(n-1)/n of an all_reduce's "
        "payload, (n-1)/n of a reduce_scatter's, (n-1) x an all_gather's, n the ranks of the "
        "group (what a backend really sends may differ: gloo runs reduce_scatter as all_reduce)"
    )
    expected_calls: float | None = doc(
        "what the strategy registry expects of calls (common.core.config.strategies); null "
        "where it has no expectation",
        nullable=True,
    )
    expected_payload_bytes: float | None = doc(
        "what the strategy registry expects of payload_bytes", nullable=True
    )
    sizes: list[CallSize] | None = doc(
        "the calls by their payload, smallest first: an FSDP unit's calls hand its own shard, "
        "and a link's price bends between sizes, so the projection prices each size apart "
        "(absent in records written before it: their calls are priced at the mean payload)",
        added=True,
    )


class StepSplit(Fields):
    """Where one profiled training step's time went, by the framework's own profiler."""

    compute_s: float = doc(
        "seconds of the model's math (torch: the own time of aten ops outside the collectives, "
        "FSDP's ranges and the optimizer; TensorFlow: the self time of every other op): what "
        "shrinks with the per-rank batch"
    )
    optimizer_s: float = doc(
        "seconds of the optimizer's step and zeroing (torch: their ranges, aten ops included; "
        "TensorFlow: the ops under the optimizer's name scope, its all-reduce left out): what "
        "shrinks with the shards of the state, not with the batch"
    )
    framework_s: float = doc(
        "seconds of the sharding wrapper's own work (torch: FSDP's hooks and copies, aten ops "
        "inside them included, DTensor's dispatch; TensorFlow: 0, MWMS has no wrapper): paid "
        "per unit and per step, whatever the batch"
    )
    collectives_s: float = doc(
        "seconds issuing, running and waiting for collectives (torch: c10d and backend events, "
        "FSDP's waits on them, and the time a collective the backend runs on its own thread "
        "runs while no op does, DDP's wait at the end of the backward; TensorFlow: the "
        "Collective* ops' self time, the wait for the peers included)"
    )
    input_s: float | None = doc(
        "seconds fetching the step's samples inside the step (TensorFlow: gathers of the "
        "preloaded tensors, the iterator's next); absent on torch, whose batch is ready "
        "before its step starts",
        added=True,
    )
    wall_s: float = doc(
        "the profiled step's wall time; the rest of it (Python, the autograd engine or the "
        "executor, the profiler's own) is wall_s less the other parts"
    )
    source: str = doc("what measured it, e.g. 'torch profiler, CPU'")
