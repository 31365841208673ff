"""Nodes of a fixed CPU size on the test cluster (slurm/testcluster.py --node-cpu SHARE): each
node's slurmd, and so every task it starts, in a cgroup v1 CPU quota of its own, SHARE cores
per node whatever the number of nodes, as a real cluster's nodes are the same machine at 2 and
at 8 of them. Without it a node's size is its share of the host's cores (pinned by taskset),
which shrinks as nodes are added.

Every node's slurmd is also counted in one cpuacct group of the cluster's (`account`): its
jobs' CPU time, ended processes included, which no test reaps (tests/cost.py adds it)."""

from __future__ import annotations

import json
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup/cpu")  # cgroup v1's cpu controller
PREFIX = "suite-"  # one group per node: suite-n1, ...
MIN_QUOTA_US = 1_000  # the kernel's least quota a period
# cgroup v1's cpuacct: one group for the whole cluster, named apart from the node groups (where
# cpu and cpuacct share a hierarchy, `remove` must not take it)
ACCOUNT = Path("/sys/fs/cgroup/cpuacct/dist-mnist-cluster")


def period_us(share: float) -> int:
    """The shortest CFS period that holds `share` cores (its quota at least MIN_QUOTA_US): 4 ms
    for a quarter core. A node is then that size at every moment, as a slower machine is. A
    longer one (the kernel's 100 ms) lets a node that has idled compute at full speed until
    its quota runs out, so a rank that mostly waits (fsdp2 on 8 nodes) computes faster than one
    that does not (on 2), and no projection of a fixed overhead holds (docs/communication.md)."""
    return max(MIN_QUOTA_US, round(MIN_QUOTA_US / share))


def parse_share(text: str, cores: int) -> float | None:
    """A node's size in cores (`0.25`), or None for `off` (ValueError naming the fix)."""
    if text == "off":
        return None
    try:
        share = float(text)
    except ValueError:
        share = 0.0
    if not 0 < share <= cores:
        raise ValueError(
            f"--node-cpu {text!r}: give a node's size in cores, above 0 and at most this "
            f"machine's {cores} (0.25: a quarter of a core each), or off"
        )
    return share


def group(node: str) -> Path:
    return CGROUP / f"{PREFIX}{node}"


def size(pids: dict[str, int], share: float | None) -> None:
    """Put each node's slurmd (`pids`: node -> pid) in a quota of `share` cores, or, for None,
    back in the root group with its group removed. RuntimeError where this kernel has no cgroup
    v1 cpu controller with CFS quotas."""
    if share is not None and not (CGROUP / "cpu.cfs_quota_us").exists():
        raise RuntimeError(f"--node-cpu needs cgroup v1's cpu controller with CFS quotas: {CGROUP}")
    for node, pid in pids.items():
        folder = group(node)
        if share is None:
            if folder.exists():
                (CGROUP / "cgroup.procs").write_text(str(pid))
            continue
        folder.mkdir(exist_ok=True)
        period = period_us(share)
        (folder / "cpu.cfs_quota_us").write_text("-1")  # any quota fits the new period
        (folder / "cpu.cfs_period_us").write_text(str(period))
        (folder / "cpu.cfs_quota_us").write_text(str(round(share * period)))
        (folder / "cgroup.procs").write_text(str(pid))  # its children from now on follow
    if share is None:
        remove()


def size_running(root: Path, share: float | None) -> None:
    """Every node of the running cluster of `root` (its started.json) at `share` cores (None:
    its share of the machine again), and the record of it."""
    started = json.loads((root / "started.json").read_text())
    size({node: started["pids"][f"slurmd-{node}"] for node in started["nodes"]}, share)
    started["node_cpu"] = share
    (root / "started.json").write_text(json.dumps(started))


def remove() -> None:
    """Every node group of the test cluster, its processes moved to the root group first (a
    group with processes in it cannot be removed)."""
    for folder in sorted(CGROUP.glob(f"{PREFIX}*")) if CGROUP.is_dir() else []:
        for pid in (folder / "cgroup.procs").read_text().split():
            try:
                (CGROUP / "cgroup.procs").write_text(pid)
            except OSError:  # it has ended meanwhile
                pass
        try:
            folder.rmdir()
        except OSError:
            pass


def account(pid: int) -> None:
    """Count `pid` (a node's slurmd) and all it starts from now on in the cluster's cpuacct
    group; nothing where this kernel has no cgroup v1 cpuacct or forbids it."""
    try:
        ACCOUNT.mkdir(exist_ok=True)
        (ACCOUNT / "cgroup.procs").write_text(str(pid))
    except OSError:
        pass


def accounted_s() -> float | None:
    """CPU seconds of every process the cluster's nodes have run since it came up; None where
    nothing counts them."""
    try:
        return int((ACCOUNT / "cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
        return None


def unaccount() -> None:
    """The cluster's cpuacct group, gone, what is left in it moved to the root group first."""
    if not ACCOUNT.is_dir():
        return
    for pid in (ACCOUNT / "cgroup.procs").read_text().split():
        try:
            (ACCOUNT.parent / "cgroup.procs").write_text(pid)
        except OSError:  # it has ended meanwhile
            pass
    try:
        ACCOUNT.rmdir()
    except OSError:
        pass
