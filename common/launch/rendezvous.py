"""A start-up check before a framework joins its peers: every rank reports to the chief.

TensorFlow's MultiWorkerMirroredStrategy waits forever for a worker that never starts (seen here:
>400 s, whatever the collective timeout says). So before TF starts, the ranks meet over plain TCP
on the chief's rendezvous port (`ClusterSpec.master_port`, which TF itself does not use):

  chief    listens, collects one hello per rank; when all are in, answers every rank "go".
           It tries `attempts` times, `timeout_s` each, printing the missing ranks after each
           attempt; after the last one it answers "abort" with their names and raises.
  others   connect (retrying while the chief is not up yet), say their rank, wait for the answer.

So a missing worker is named in a clear error after at most attempts x timeout_s, on every rank.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from typing import Any

from common.launch.cluster import ClusterSpec

RETRY_S = 0.2


class RendezvousError(RuntimeError):
    """Not every rank arrived in time; the message names the missing ones."""


def _describe(spec: ClusterSpec, ranks: list[int]) -> str:
    def where(rank: int) -> str:
        if len(spec.hosts) == spec.world_size and len(spec.tf_ports) == spec.world_size:
            return f"worker {rank} ({spec.hosts[rank]}:{spec.tf_ports[rank]})"
        return f"rank {rank}"

    return ", ".join(where(rank) for rank in ranks)


def _send(connection: socket.socket, message: dict[str, Any]) -> None:
    try:
        connection.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        pass  # that rank is gone; it will fail on its own


def _serve(spec: ClusterSpec, timeout_s: float, attempts: int) -> None:
    server = socket.create_server(("", spec.master_port), reuse_port=False)
    server.settimeout(RETRY_S)
    arrived: dict[int, socket.socket] = {}
    try:
        for attempt in range(1, attempts + 1):
            deadline = time.monotonic() + timeout_s
            while len(arrived) < spec.world_size - 1 and time.monotonic() < deadline:
                try:
                    connection, _ = server.accept()
                except TimeoutError:
                    continue
                connection.settimeout(timeout_s)
                try:
                    hello = json.loads(connection.makefile().readline())
                    arrived[int(hello["rank"])] = connection
                except (OSError, ValueError, KeyError, TypeError):
                    connection.close()
            missing = [rank for rank in range(1, spec.world_size) if rank not in arrived]
            if not missing:
                for connection in arrived.values():
                    _send(connection, {"go": True})
                return
            print(
                f"rendezvous attempt {attempt}/{attempts}: after {timeout_s:g} s still waiting "
                f"for {_describe(spec, missing)}",
                file=sys.stderr,
                flush=True,
            )
        message = (
            f"{_describe(spec, missing)} did not reach the chief at "
            f"{spec.master_addr}:{spec.master_port} in {attempts} attempts of "
            f"dist.startup_timeout_s={timeout_s:g} s; check that every task started and can "
            "reach the first node"
        )
        for connection in arrived.values():
            _send(connection, {"go": False, "error": message})
        raise RendezvousError(message)
    finally:
        for connection in arrived.values():
            connection.close()
        server.close()


def _join(spec: ClusterSpec, timeout_s: float, attempts: int) -> None:
    deadline = time.monotonic() + timeout_s * attempts + 5.0  # the chief decides first
    address = (spec.master_addr, spec.master_port)
    while True:
        try:
            connection = socket.create_connection(address, timeout=RETRY_S * 5)
            break
        except OSError as error:
            if time.monotonic() > deadline:
                raise RendezvousError(
                    f"rank {spec.rank}: the chief at {address[0]}:{address[1]} did not answer "
                    f"within {attempts} x dist.startup_timeout_s={timeout_s:g} s ({error})"
                ) from None
            time.sleep(RETRY_S)
    with connection:
        connection.settimeout(max(1.0, deadline - time.monotonic()))
        try:
            _send(connection, {"rank": spec.rank})
            answer = json.loads(connection.makefile().readline() or "{}")
        except (OSError, ValueError) as error:
            raise RendezvousError(f"rank {spec.rank}: no answer from the chief ({error})") from None
    if not answer.get("go"):
        reason = answer.get("error", "the chief closed the connection")
        raise RendezvousError(f"rank {spec.rank}: the chief gave up: {reason}")


def wait_for_peers(spec: ClusterSpec, timeout_s: float, attempts: int) -> None:
    """Return once every rank of `spec` has arrived; raise RendezvousError naming who did not."""
    if spec.world_size == 1:
        return
    if spec.is_chief:
        _serve(spec, timeout_s, attempts)
    else:
        _join(spec, timeout_s, attempts)
