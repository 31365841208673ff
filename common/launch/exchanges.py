"""Exchanges every rank takes part in, built on one primitive: a float64 sum over the ranks.

Both frameworks provide `all_reduce_sum` (torch.distributed on its process group, TensorFlow
through MultiWorkerMirroredStrategy); rows, texts and memory tables travel as sums of tables
in which every rank fills only its own row. Sums of integers below 2**53 are exact in float64,
so what arrives is what was sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

AllReduceSum = Callable[[np.ndarray], np.ndarray]
EXACT_BELOW = 2**53


def gather_rows(
    row: Sequence[float], *, rank: int, world_size: int, all_reduce_sum: AllReduceSum
) -> np.ndarray:
    """Every rank's `row` (all the same length), as a [world_size, len(row)] array on every
    rank. Integers in it must stay below 2**53 to arrive exactly."""
    table = np.zeros((world_size, len(row)), dtype=np.float64)
    table[rank] = row
    return np.asarray(all_reduce_sum(table), dtype=np.float64)


def gather_texts(
    text: str, *, rank: int, world_size: int, all_reduce_sum: AllReduceSum
) -> list[str]:
    """Every rank's `text`, in rank order, on every rank. Two exchanges: the lengths, then the
    UTF-8 bytes padded to the longest, so no text is cut."""
    encoded = text.encode()
    lengths = gather_rows(
        [len(encoded)], rank=rank, world_size=world_size, all_reduce_sum=all_reduce_sum
    )[:, 0].astype(int)
    width = int(lengths.max())
    if width == 0:
        return [""] * world_size
    padded = list(encoded.ljust(width, b"\0"))
    table = gather_rows(
        padded, rank=rank, world_size=world_size, all_reduce_sum=all_reduce_sum
    ).astype(np.uint8)
    return [bytes(row[:length]).decode() for row, length in zip(table, lengths, strict=True)]


def broadcast_text(text: str, *, rank: int, world_size: int, all_reduce_sum: AllReduceSum) -> str:
    """The chief's (rank 0's) `text` on every rank."""
    sent = text if rank == 0 else ""
    return gather_texts(sent, rank=rank, world_size=world_size, all_reduce_sum=all_reduce_sum)[0]
