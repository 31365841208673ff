"""The start-up meeting TF runs before joining its peers: real sockets, real threads."""

import threading
import time
from dataclasses import replace

from common.launch.cluster import ClusterSpec, local_spec
from common.launch.ports import free_ports
from common.launch.rendezvous import RendezvousError, wait_for_peers


def _spec(rank: int, world: int, port: int) -> ClusterSpec:
    return local_spec(world, rank, master_port=port, tf_ports=tuple(range(40001, 40001 + world)))


def _run_ranks(ranks, world, port, timeout_s=5.0, attempts=1, delays=None):
    outcomes = {}

    def one(rank):
        time.sleep((delays or {}).get(rank, 0.0))
        try:
            wait_for_peers(_spec(rank, world, port), timeout_s, attempts)
            outcomes[rank] = "go"
        except RendezvousError as error:
            outcomes[rank] = str(error)

    threads = [threading.Thread(target=one, args=(rank,)) for rank in ranks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return outcomes


def test_all_ranks_meet_even_when_the_chief_starts_last():
    (port,) = free_ports(1)
    outcomes = _run_ranks([0, 1, 2], world=3, port=port, delays={0: 1.0})
    assert outcomes == {0: "go", 1: "go", 2: "go"}


def test_a_missing_worker_is_named_on_every_rank_after_the_attempts():
    (port,) = free_ports(1)
    started = time.monotonic()
    outcomes = _run_ranks([0, 1], world=3, port=port, timeout_s=1.0, attempts=2)
    waited = time.monotonic() - started
    assert "worker 2 (localhost:40003)" in outcomes[0]
    assert "within dist.startup_timeout_s=1 s (2 attempts)" in outcomes[0]
    assert "the chief gave up" in outcomes[1] and "worker 2" in outcomes[1]
    assert 0.9 < waited < 10  # the timeout in all, not per attempt


def test_a_worker_without_a_chief_gives_up_in_bounded_time():
    (port,) = free_ports(1)
    started = time.monotonic()
    outcomes = _run_ranks([1], world=2, port=port, timeout_s=0.5, attempts=2)
    assert "did not answer" in outcomes[1]
    assert time.monotonic() - started < 10


def test_one_process_needs_no_meeting():
    wait_for_peers(_spec(0, 1, 1), 0.1, 1)  # port 1 is never opened


def test_the_port_can_be_used_again_for_a_second_meeting():
    """TF's workers meet at start-up and again before they exit, on the same port."""
    (port,) = free_ports(1)
    assert _run_ranks([0, 1], 2, port) == {0: "go", 1: "go"}
    assert _run_ranks([0, 1], 2, port) == {0: "go", 1: "go"}


def test_without_hosts_the_meeting_tells_every_rank_the_same_workers():
    """torchrun tells a worker only MASTER_ADDR/PORT (the agent's store holds that port): the
    meeting on the next port gives every rank each rank's address and its own TF port."""
    (port,) = free_ports(1)
    learnt = {}

    def one(rank):
        bare = replace(_spec(rank, 3, port), hosts=(), tf_ports=(), master_addr="127.0.0.1")
        learnt[rank] = wait_for_peers(bare, 5.0, 1)

    threads = [threading.Thread(target=one, args=(rank,)) for rank in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert (
        len(learnt) == 3
        and len({spec.tf_config()["cluster"]["worker"][0] for spec in learnt.values()}) == 1
    )
    first = learnt[0]
    assert first.master_port == port + 1 and first.hosts == ("127.0.0.1",) * 3
    assert len(set(first.tf_ports)) == 3 and 0 not in first.tf_ports
    assert all(
        spec.tf_ports == first.tf_ports and spec.rank == rank for rank, spec in learnt.items()
    )
