"""The collectives a rank issued, as counted from the framework's own calls (torch's profiler,
TensorFlow's step graph: each side's `traffic` module), turned into the epoch record's
`traffic` entries beside what the strategy registry expects
(`common.core.config.expected_traffic`).

Bytes are the payload: what a rank hands the collective (the whole buffer of an all-reduce or
reduce-scatter, its own shard of an all-gather). What a ring algorithm then puts on the wire
per rank is derived from it and the group's size (`wire_bytes`), the same way on both sides.
"""

from __future__ import annotations

import typing
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from common.core.config.expected_traffic import Expected, Unit
from common.core.config.strategies import ParallelDims, Strategy
from common.core.records.entries import CallSize, Collective, Phase, TrafficEntry

KINDS: tuple[Collective, ...] = typing.get_args(Collective)


@dataclass(frozen=True)
class Call:
    """One collective a rank issued: its kind, its payload and the ranks of its group."""

    kind: str
    payload_bytes: int
    group: int


def wire_bytes(kind: str, payload: float, ranks: int) -> float:
    """What a ring algorithm makes one rank send for a collective of `payload` bytes over
    `ranks` ranks: an all-reduce is a reduce-scatter then an all-gather of the result."""
    if ranks <= 1:
        return 0.0
    if kind == "all_reduce":
        return 2 * (ranks - 1) / ranks * payload
    if kind == "reduce_scatter":
        return (ranks - 1) / ranks * payload
    if kind == "all_gather":
        return (ranks - 1) * payload
    return payload  # broadcast: at most the whole buffer, from the root


def entries(
    phase: Phase, calls: list[Call], per: int, expected: list[Expected] | None
) -> list[TrafficEntry]:
    """The record's entries of one phase: `calls` counted over `per` steps (or batches), by
    kind, each beside the expected calls and payload (None: no expectation for the phase)."""
    counted: dict[str, list[Call]] = defaultdict(list)
    at: dict[tuple[str, int], list[int]] = defaultdict(list)  # where in the step, by kind, size
    for index, call in enumerate(calls):
        counted[call.kind].append(call)
        at[(call.kind, call.payload_bytes)].append(index)
    wanted = {item.kind: item for item in expected or []}
    found = []
    for kind in KINDS:
        if kind not in counted and kind not in wanted:
            continue
        mine = counted.get(kind, [])
        expect = wanted.get(kind)
        by_size = sorted(Counter(call.payload_bytes for call in mine).items())
        found.append(
            TrafficEntry(
                phase=phase,
                kind=kind,
                calls=len(mine) / per,
                payload_bytes=sum(call.payload_bytes for call in mine) / per,
                wire_bytes=sum(wire_bytes(kind, call.payload_bytes, call.group) for call in mine)
                / per,
                expected_calls=None if expected is None else (expect.calls if expect else 0.0),
                expected_payload_bytes=None
                if expected is None
                else (expect.payload_bytes if expect else 0.0),
                sizes=[
                    CallSize(
                        payload_bytes=float(size),
                        calls=n / per,
                        at=at[(kind, size)] if phase == "train" else None,
                    )
                    for size, n in by_size
                ],
            )
        )
    return found


def record(
    cfg: Any,
    strategy: Strategy,
    dims: ParallelDims,
    units: list[Unit],
    train_calls: list[Call],
    eval_calls: list[Call],
) -> list[TrafficEntry]:
    """The epoch record's traffic: one step's and one evaluation pass's collectives, beside
    what the strategy registry expects of a step."""
    expected = strategy.traffic(units, dims.replicate, dims.shard, cfg)
    return [*entries("train", train_calls, 1, expected), *entries("eval", eval_calls, 1, None)]
