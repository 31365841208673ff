"""A start-up check before a framework joins its peers: every rank reports to the chief.

TensorFlow's MultiWorkerMirroredStrategy waits forever for a worker that never starts. So before
it starts, the ranks meet over plain TCP on the chief's rendezvous port: the chief acknowledges
each hello, names the missing ranks after each of `attempts` equal parts of the timeout, and
answers "go" or "abort"; the others retry until the chief is up, then wait for its answer. The
whole start-up is bounded by dist.startup_timeout_s (and GRACE_S), a missing worker is named on
every rank, and a rank that reached something that never answers says so (`what_is_at`).

Where the launcher does not tell the peers' hosts (torchrun gives only MASTER_ADDR), the
meeting learns them: each rank says its TensorFlow port, the chief reads each address off its
connection and answers the list. It meets on the first free port of MASTER_PORT + 1 ... +
MEETING_PORTS: torchrun's MASTER_PORT comes from bind(0), odd on Linux, and the even port after
it is one that outgoing connections take. A chief answers the ranks of its own job only.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import replace
from typing import Any

from common.launch.cluster import ClusterSpec
from common.launch.ports import free_ports

RETRY_S = 0.2
GRACE_S = 2.0  # how long past timeout_s a worker waits for the chief's verdict
PROBE_S = 2.0  # how long `what_is_at` waits for a TCP connection
SILENT = "a process there accepts connections but never answers"
MEETING_PORTS = 8  # under torchrun: the ports after MASTER_PORT where the chief may meet
HUNT_S = 5.0  # where the chief may be on several ports: how long a rank waits for one to answer


class RendezvousError(RuntimeError):
    """Not every rank arrived in time; the message names the missing ones."""


def _describe(spec: ClusterSpec, ranks: list[int]) -> str:
    def where(rank: int) -> str:
        if len(spec.hosts) == spec.world_size and len(spec.tf_ports) == spec.world_size:
            return f"worker {rank} ({spec.hosts[rank]}:{spec.tf_ports[rank]})"
        return f"rank {rank}"

    return ", ".join(where(rank) for rank in ranks)


def what_is_at(host: str, port: int) -> str:
    """What a rank finds at host:port when its rendezvous did not complete, for the error: a
    listener that accepts and stays silent (a stopped chief; a stale process that still holds
    the job's port), nothing at all (connection refused), or no answer to a TCP connect."""
    try:
        with socket.create_connection((host, port), timeout=PROBE_S):
            return (
                f"{SILENT} (a stopped chief, or a stale process that still holds the port: "
                "end it, or give this launch another port)"
            )
    except ConnectionRefusedError:
        return "nothing listens there (connection refused: the chief did not start, or died)"
    except TimeoutError:
        return f"no answer to a TCP connect in {PROBE_S:g} s (the host is down or filters the port)"
    except OSError as error:
        return f"cannot connect ({error.strerror or error})"


def _ports(spec: ClusterSpec) -> list[int]:
    return list(range(spec.master_port, spec.master_port + spec.meeting_ports))


def listen(spec: ClusterSpec) -> socket.socket:
    """The chief's listening socket on the first free one of the meeting's ports;
    RendezvousError naming them when other processes hold all of them."""
    for port in _ports(spec):
        try:
            return socket.create_server(("", port), reuse_port=False)
        except OSError as error:
            reason = os.strerror(error.errno) if error.errno else str(error)
    where = f"port {spec.master_port}" if spec.meeting_ports == 1 else f"ports {_ports(spec)}"
    raise RendezvousError(
        f"rank {spec.rank}: cannot listen for the rendezvous on {where} ({reason}): another "
        "process holds it (a stale run?); end it, or set MASTER_PORT to a free port"
    )


def _send(connection: socket.socket, message: dict[str, Any]) -> None:
    try:
        connection.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        pass  # that rank is gone; it will fail on its own


def _serve(spec: ClusterSpec, timeout_s: float, attempts: int, own_port: int) -> list[str]:
    """Every rank's "host:port" (the address it came from, the port it said; the chief's own
    first) once all have arrived."""
    server = listen(spec)
    server.settimeout(RETRY_S)
    arrived: dict[int, socket.socket] = {}
    workers = {0: f"{spec.master_addr}:{own_port}"}
    try:
        part = timeout_s / attempts  # the chief says who is missing after each part
        for attempt in range(1, attempts + 1):
            deadline = time.monotonic() + part
            while len(arrived) < spec.world_size - 1 and time.monotonic() < deadline:
                try:
                    connection, (address, *_) = server.accept()
                except TimeoutError:
                    continue
                connection.settimeout(timeout_s)
                try:
                    hello = json.loads(connection.makefile().readline())
                    rank = int(hello["rank"])
                    if hello.get("job") != spec.master_port:  # another job's rank
                        _send(connection, {"arrived": False, "error": "another job's meeting"})
                        connection.close()
                        continue
                    if rank in arrived:  # it gave up waiting for this answer and came back
                        arrived[rank].close()
                    arrived[rank] = connection
                    workers[rank] = f"{address}:{int(hello.get('tf_port', 0))}"
                    _send(connection, {"arrived": True})
                except (OSError, ValueError, KeyError, TypeError):
                    connection.close()
            missing = [rank for rank in range(1, spec.world_size) if rank not in arrived]
            if not missing:
                listed = [workers[rank] for rank in range(spec.world_size)]
                for connection in arrived.values():
                    _send(connection, {"go": True, "workers": listed})
                return listed
            print(
                f"rendezvous attempt {attempt}/{attempts}: after {attempt * part:g} s of "
                f"dist.startup_timeout_s={timeout_s:g} s still waiting for "
                f"{_describe(spec, missing)}",
                file=sys.stderr,
                flush=True,
            )
        message = (
            f"{_describe(spec, missing)} did not reach the chief at "
            f"{spec.master_addr}:{server.getsockname()[1]} within "
            f"dist.startup_timeout_s={timeout_s:g} s ({attempts} attempts); check that every "
            "task started and can reach the first node"
        )
        for connection in arrived.values():
            _send(connection, {"go": False, "error": message})
        raise RendezvousError(message)
    finally:
        for connection in arrived.values():
            connection.close()
        server.close()


def _hello(spec: ClusterSpec, port: int, own_port: int, wait_s: float) -> tuple[Any, str]:
    """(the connection and its reader, "") once this job's chief on `port` has taken this rank
    in; else (None, why not)."""
    where = f"{spec.master_addr}:{port}"
    try:
        connection = socket.create_connection((spec.master_addr, port), timeout=RETRY_S * 5)
    except OSError as error:
        return None, f"the chief at {where} did not answer ({error})"
    connection.settimeout(wait_s)  # a live chief answers at once
    answers = connection.makefile()
    try:
        _send(connection, {"rank": spec.rank, "tf_port": own_port, "job": spec.master_port})
        answer = json.loads(answers.readline() or "{}")
    except TimeoutError:
        answer = {"error": f"no rendezvous at {where}: {SILENT}"}
    except (OSError, ValueError) as error:
        answer = {"error": f"no answer from the chief at {where} ({error})"}
    if answer.get("arrived"):
        return (connection, answers), ""
    connection.close()
    return None, answer.get("error", f"the chief at {where} closed the connection")


def _join(spec: ClusterSpec, timeout_s: float, own_port: int) -> list[str]:
    """The chief's list of every rank's "host:port", once all have arrived."""
    deadline = time.monotonic() + timeout_s + GRACE_S  # the chief decides first
    wait_s = HUNT_S if spec.meeting_ports > 1 else timeout_s + GRACE_S  # one port: its chief
    found = None
    while found is None:
        whys = []
        for port in _ports(spec):
            left = max(1.0, deadline - time.monotonic())
            found, why = _hello(spec, port, own_port, min(left, wait_s))
            if found is not None:
                break
            whys.append(why)
        if found is None and time.monotonic() > deadline:
            hint = (
                " (a stopped chief, or a stale process that still holds the port: end it, or "
                "give this launch another port)"
                if any(SILENT in why for why in whys)
                else ""
            )
            raise RendezvousError(
                f"rank {spec.rank}: {'; '.join(whys)}, within "
                f"dist.startup_timeout_s={timeout_s:g} s{hint}"
            )
        if found is None:
            time.sleep(RETRY_S)
    connection, answers = found
    with connection:
        connection.settimeout(max(1.0, deadline - time.monotonic()))
        try:  # the go, once every rank is in
            answer = json.loads(answers.readline() or "{}")
        except (OSError, ValueError) as error:
            raise RendezvousError(f"rank {spec.rank}: no answer from the chief ({error})") from None
    if not answer.get("go"):
        reason = answer.get("error", "the chief closed the connection")
        raise RendezvousError(f"rank {spec.rank}: the chief gave up: {reason}")
    return list(answer.get("workers", []))


def wait_for_peers(spec: ClusterSpec, timeout_s: float, attempts: int) -> ClusterSpec:
    """Return once every rank of `spec` has arrived (raise RendezvousError naming who did not):
    `spec`, or, where it has no hosts, `spec` with every rank's host and TensorFlow port learnt
    at the meeting (held on one of MEETING_PORTS after MASTER_PORT) and those ports as its
    rendezvous ports."""
    if spec.world_size == 1:
        return spec
    learn = not spec.hosts
    own_port = 0
    if learn:
        spec = replace(spec, master_port=spec.master_port + 1, meeting_ports=MEETING_PORTS)
        own_port = free_ports(1)[0]
    if spec.is_chief:
        workers = _serve(spec, timeout_s, attempts, own_port)
    else:
        workers = _join(spec, timeout_s, own_port)
    if not learn:
        return spec
    hosts, ports = zip(*(worker.rsplit(":", 1) for worker in workers), strict=True)
    return replace(spec, hosts=tuple(hosts), tf_ports=tuple(int(port) for port in ports))
