"""Who owns the SLURM test cluster of this machine (slurm/testcluster.py), and taking down one
whose owner is gone.

The cluster's names are machine-wide (the bridge, the node namespaces, the subnet, the ports,
the /etc/hosts lines), so one cluster runs per machine at a time. `/run/suite-testcluster.json`
says whose it is: the owner's pid and start time (a test session, or the shell that ran `up`),
its --dir, and the network namespaces of its nodes. A cluster whose owner is alive is busy; one
whose owner is gone (a killed or interrupted run) is stale, and the next `up` takes it down:
its daemons, every process left in its namespaces (orphaned slurmstepd and their tasks), the
namespaces, links and bridge, the hosts lines.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REGISTRY = Path("/run/suite-testcluster.json")
REGISTRY_LOCK = Path("/run/suite-testcluster.lock")
NAMESPACE_PREFIX, LINK_PREFIX, BRIDGE = "suite-n", "suite-v", "suite-br0"


class Busy(RuntimeError):
    """The cluster belongs to a live owner; the message names it."""


def start_time(pid: int) -> int | None:
    """The start time of process `pid` (clock ticks after boot): with the pid, an identity
    that survives pid reuse. None if there is no such process."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def owner_alive(record: dict[str, Any]) -> bool:
    pid = record.get("owner")
    return isinstance(pid, int) and start_time(pid) == record.get("owner_start")


def describe(record: dict[str, Any]) -> str:
    since = time.strftime("%H:%M:%S", time.localtime(record.get("since", 0)))
    try:
        command = Path(f"/proc/{record['owner']}/cmdline").read_bytes().replace(b"\0", b" ")
        what = f" ({command.decode(errors='replace').strip()[:120]})"
    except (OSError, KeyError):
        what = ""
    return f"owner pid {record.get('owner')}{what}, --dir {record.get('dir')}, up since {since}"


@contextmanager
def registry_lock() -> Iterator[None]:
    """Held while the registry is read and changed: two `up`s never both claim the cluster."""
    REGISTRY_LOCK.parent.mkdir(parents=True, exist_ok=True)
    handle = os.open(REGISTRY_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def read() -> dict[str, Any]:
    try:
        found = json.loads(REGISTRY.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def write(record: dict[str, Any]) -> None:
    REGISTRY.write_text(json.dumps(record))


def namespace_inodes() -> dict[str, int]:
    """The inode of each of this script's network namespaces, by name."""
    found = {}
    for path in Path("/run/netns").glob(f"{NAMESPACE_PREFIX}*"):
        try:
            found[path.name] = path.stat().st_ino
        except OSError:
            continue
    return found


def processes_in(inodes: set[int]) -> list[int]:
    """Every process whose network namespace is one of `inodes`: the nodes' daemons, and their
    orphans once the namespace lost its name."""
    found = []
    for link in Path("/proc").glob("[0-9]*/ns/net"):
        try:
            inode = os.stat(link).st_ino
        except OSError:
            continue
        if inode in inodes:
            found.append(int(link.parent.parent.name))
    return found


def kill_all(pids: list[int], grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s` to those still there."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + grace_s
        while sig == signal.SIGTERM and time.monotonic() < deadline:
            if not any(Path(f"/proc/{pid}").exists() for pid in pids):
                return
            time.sleep(0.1)


def remove_network() -> None:
    """Delete this script's namespaces, the host ends of their links and the bridge. A link whose
    other end sits in a namespace kept alive by a process would stay, and the next `up`
    would fail on it with "RTNETLINK answers: File exists"; it is deleted by name."""
    for name in namespace_inodes():
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith(LINK_PREFIX):
            subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)


def take_down(record: dict[str, Any], daemons: list[int]) -> None:
    """Stop `daemons` and every process in the cluster's namespaces (those the record names and
    those that still have a name), then remove its network."""
    inodes = set(record.get("netns", {}).values()) | set(namespace_inodes().values())
    kill_all([*daemons, *processes_in(inodes)])
    left = processes_in(inodes)
    if left:
        kill_all(left)
    remove_network()


def leftovers() -> bool:
    """Whether anything of a cluster is on this machine (for a stale one without a registry)."""
    bridge = subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode == 0
    return bridge or bool(namespace_inodes())


def wait_until(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.2)


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None
