"""The start-up meeting TF runs before joining its peers: real sockets, real threads."""

import socket
import threading
import time
from dataclasses import replace

from common.launch.cluster import ClusterSpec, local_spec
from common.launch.ports import free_ports
from common.launch.rendezvous import RendezvousError, wait_for_peers


def _spec(rank: int, world: int, port: int) -> ClusterSpec:
    return local_spec(world, rank, master_port=port, tf_ports=tuple(range(40001, 40001 + world)))


def _meet(specs, timeout_s=10.0, attempts=1, delays=None):
    """Each of `specs` meets at once, a thread each, rank r `delays[r]` seconds late:
    {(its master_port, rank): the spec wait_for_peers returned, or its error}."""
    found = {}

    def one(spec):
        time.sleep((delays or {}).get(spec.rank, 0.0))
        try:
            found[spec.master_port, spec.rank] = wait_for_peers(spec, timeout_s, attempts)
        except RendezvousError as error:
            found[spec.master_port, spec.rank] = str(error)

    threads = [threading.Thread(target=one, args=(spec,)) for spec in specs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return found


def _outcomes(found):
    """{rank: "go", or its error}."""
    return {rank: got if isinstance(got, str) else "go" for (_, rank), got in found.items()}


def _run_ranks(ranks, world, port, timeout_s=5.0, attempts=1, delays=None):
    specs = [_spec(rank, world, port) for rank in ranks]
    return _outcomes(_meet(specs, timeout_s, attempts, delays))


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


def _meet_bare(jobs, timeout_s=10.0):
    """Each job's ranks as torchrun starts them (MASTER_ADDR/PORT only), all at once: per job
    (master_port, world), every rank's spec after the meeting, or its error."""
    bare = [
        replace(_spec(rank, world, port), hosts=(), tf_ports=(), master_addr="127.0.0.1")
        for port, world in jobs
        for rank in range(world)
    ]
    return _meet(bare, timeout_s)


def test_without_hosts_the_meeting_tells_every_rank_the_same_workers():
    """torchrun tells a worker only MASTER_ADDR/PORT (the agent's store holds that port): the
    meeting on the next port gives every rank each rank's address and its own TF port."""
    (port,) = free_ports(1)
    learnt = {rank: spec for (_, rank), spec in _meet_bare([(port, 3)]).items()}
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


def _held_by_a_connection(port: int) -> tuple[socket.socket, socket.socket]:
    """An outgoing connection whose source port is `port` (and what it connects to)."""
    target = socket.create_server(("127.0.0.1", 0))
    holder = socket.socket()
    holder.bind(("", port))
    holder.connect(target.getsockname())
    return holder, target


def test_a_port_after_master_port_held_by_a_connection_moves_the_meeting():
    """torchrun --standalone's MASTER_PORT comes from bind(0), which Linux answers with odd
    ports, and connect() takes even ones for its source ports: MASTER_PORT + 1 is one of those.
    A clean clone's make test failed so (that port held for both attempts of a torchrun run);
    the chief now holds the meeting on the next free port, and every rank finds it there."""
    (port,) = free_ports(1)
    holder, target = _held_by_a_connection(port + 1)
    with holder, target:
        learnt = _meet_bare([(port, 2)])
        assert all(not isinstance(spec, str) for spec in learnt.values()), learnt
        assert learnt[port, 0].tf_ports == learnt[port, 1].tf_ports
        # the exit meeting, with the hosts learnt, looks for the chief the same way
        assert _outcomes(_meet([learnt[port, 0], learnt[port, 1]])) == {0: "go", 1: "go"}


def test_a_rank_never_joins_another_jobs_meeting():
    """Two torchrun jobs on one host whose meetings look on the same ports: job A's chief moves
    past a held port onto the one where job B's chief would meet first. B's ranks ask there,
    are turned away (the chief answers its own job only), and meet on the next."""
    (port,) = free_ports(1)
    holder, target = _held_by_a_connection(port + 1)
    with holder, target:
        learnt = _meet_bare([(port, 2), (port + 1, 3)])
    assert all(not isinstance(spec, str) for spec in learnt.values()), learnt
    a = {learnt[port, rank].tf_ports for rank in range(2)}
    b = {learnt[port + 1, rank].tf_ports for rank in range(3)}
    assert len(a) == 1 and len(b) == 1
    assert len(next(iter(a))) == 2 and len(next(iter(b))) == 3
    assert not set(next(iter(a))) & set(next(iter(b)))
