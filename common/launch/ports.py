"""The ports a launch listens on: a SLURM step's fixed ones, the same on every rank without any
exchange, and a local launch's free ones.

A step's ranks must agree on the torch rendezvous port and on every TensorFlow worker's port
before they can talk, so both follow from the job and step ids. They are taken outside the
kernel's ephemeral range, where connect() picks its own source ports: a port there may be
held by any outgoing connection on the node.
"""

from __future__ import annotations

import secrets
import socket
import sys
from pathlib import Path


class PortError(ValueError):
    """No fixed ports can be chosen; the message says why and what to do."""


# A step gets a window of PORT_SPAN ports, chosen by job and step id among the windows outside
# the ephemeral range. The torch rendezvous takes the window's first port, TensorFlow task k on
# a node first + 1 + k (its local rank).
PORT_FLOOR = 10000  # below it: well-known and commonly configured services
PORT_SPAN = 64
EPHEMERAL_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
LINUX_EPHEMERAL = (32768, 60999)  # the kernel's default


def ephemeral_range() -> tuple[int, int]:
    """This machine's ephemeral port range (every node of a cluster is assumed to share it)."""
    try:
        low, high = (int(value) for value in Path(EPHEMERAL_FILE).read_text().split())
        return low, high
    except (OSError, ValueError):
        return LINUX_EPHEMERAL


def port_windows(ephemeral: tuple[int, int]) -> tuple[int, int]:
    """(first port, number of PORT_SPAN windows) of the larger free stretch outside the
    ephemeral range: below it (from PORT_FLOOR) or above it (to 65535)."""
    low, high = ephemeral
    below = (PORT_FLOOR, max(0, low - PORT_FLOOR) // PORT_SPAN)
    above = (high + 1, max(0, 65536 - high - 1) // PORT_SPAN)
    best = max(below, above, key=lambda window: window[1])
    if best[1] == 0:
        raise PortError(
            f"the ephemeral port range {low}-{high} ({EPHEMERAL_FILE}) leaves no room for "
            f"{PORT_SPAN} fixed ports; narrow it, or set MASTER_PORT"
        )
    return best


def slurm_port_base(
    job_id: str, step_id: str = "", ephemeral: tuple[int, int] | None = None
) -> int:
    """The first port of a step's window: two steps of one job, running at once, get
    different windows (unless there are more steps than windows)."""
    try:
        number = int(job_id)
    except ValueError:
        raise PortError(f"SLURM_JOB_ID={job_id!r} is not an integer") from None
    step = int(step_id) if step_id.isdigit() and int(step_id) < 2**31 else 0  # batch: 0
    first, windows = port_windows(ephemeral or ephemeral_range())
    return first + ((number * 7 + step) % windows) * PORT_SPAN


# Windows this process chose, each held by an abstract Unix socket of its name until the process
# ends (`_claim`), so that no other launch on the host chooses them meanwhile.
_held: list[socket.socket] = []


def _claim(base: int, span: int) -> list[socket.socket] | None:
    """Hold the window of `span` ports at `base` against every other process of this host's
    network namespace that chooses ports here: an abstract Unix socket per PORT_SPAN ports,
    bound until closed or until this process ends (the kernel lets it go then, however the
    process ends). None where another process holds one; no sockets where there are no
    abstract sockets (not Linux)."""
    if not sys.platform.startswith("linux"):
        return []
    taken: list[socket.socket] = []
    for block in range(base, base + span, PORT_SPAN):
        held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        taken.append(held)
        try:
            held.bind(f"\0suite-ports-{block}")
        except OSError:
            for other in taken:
                other.close()
            return None
    return taken


def free_ports(count: int) -> list[int]:
    """`count` consecutive TCP ports, outside the ephemeral range, that nothing on this host held
    a moment ago and that no other launch on it has chosen while it runs (a window from a
    random start, held by this process until it ends: `_claim`).

    A port the kernel hands out for bind(0) is an ephemeral one: between the choice and the
    chief's listen, any outgoing connection on the host may take it as its source port (a
    clean clone's make test once failed so, its rendezvous port held by a peer's connection).
    And a window free a moment ago may be another launch's, chosen the same moment and not
    yet listened on: a clean clone's make test once failed with its chief's rendezvous port
    in use, most likely so (its two workers launch all the time; nothing else listens there)."""
    first, windows = port_windows(ephemeral_range())
    span = -(-count // PORT_SPAN) * PORT_SPAN  # whole windows
    windows = windows * PORT_SPAN // span
    start = secrets.randbelow(windows) if windows else 0
    for window in (*range(start, windows), *range(start)):
        base = first + window * span
        claimed = _claim(base, span)
        if claimed is None:
            continue  # another launch on this host chose it
        probes = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
        try:
            for offset, probe in enumerate(probes):
                probe.bind(("", base + offset))
            _held.extend(claimed)
            return [base + offset for offset in range(count)]
        except OSError:
            for held in claimed:
                held.close()
            continue
        finally:
            for probe in probes:
                probe.close()
    raise PortError(f"no {count} free ports in a row outside the ephemeral range; set MASTER_PORT")
