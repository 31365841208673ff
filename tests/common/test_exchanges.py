"""Rows and texts travel as float64 sums (`common.launch.exchanges`); here 3 ranks are 3
threads
whose all-reduce is a real sum over what each of them sent."""

import threading

import numpy as np

from common.launch import exchanges


def on_ranks(world, work):
    """Run work(rank, all_reduce_sum) on `world` threads; their results in rank order."""
    sent = [None] * world
    meeting = threading.Barrier(world)
    results = [None] * world

    def all_reduce_sum(values):
        rank = threading.current_thread().rank
        sent[rank] = np.array(values, dtype=np.float64)
        meeting.wait()
        total = sum(sent)
        meeting.wait()  # nobody overwrites `sent` before every rank has summed it
        return total

    def body(rank):
        threading.current_thread().rank = rank
        results[rank] = work(rank, all_reduce_sum)

    threads = [threading.Thread(target=body, args=(rank,)) for rank in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    return results


def test_texts_of_any_length_arrive_whole_and_in_rank_order():
    texts = ["n1:cpu:cpu", "", "ünïcode-" + "x" * 400]

    def work(rank, reduce):
        return exchanges.gather_texts(texts[rank], rank=rank, world_size=3, all_reduce_sum=reduce)

    assert on_ranks(3, work) == [texts] * 3


def test_the_chiefs_text_reaches_every_rank():
    def work(rank, reduce):
        proposal = f"run-from-rank-{rank}"
        return exchanges.broadcast_text(proposal, rank=rank, world_size=3, all_reduce_sum=reduce)

    assert on_ranks(3, work) == ["run-from-rank-0"] * 3


def test_rows_of_large_integers_arrive_exactly():
    big = 2**52 + 1  # peak bytes and the like: exact below 2**53

    def work(rank, reduce):
        rows = exchanges.gather_rows(
            [big + rank, rank], rank=rank, world_size=3, all_reduce_sum=reduce
        )
        return [[int(value) for value in row] for row in rows]

    expected = [[big, 0], [big + 1, 1], [big + 2, 2]]
    assert on_ranks(3, work) == [expected] * 3
