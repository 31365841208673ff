"""Which groups of ranks a link tool times besides the whole launch: `--groups` (the first N
ranks) and `--tiers` (each node's ranks, and one rank of every node), and the rules that refuse
them where the framework or the launch cannot give them (`common.projection.link_bench`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.projection.link_profile import TierName

if TYPE_CHECKING:
    from common.projection.link_bench import Side


def group_sizes(text: str, world_size: int, framework: str, sub_groups: bool) -> list[int]:
    """The sizes `--groups` names, each from 2 to below the world (the whole world is always
    timed), where the framework has `sub_groups`; ValueError naming the problem and the fix."""
    if not text.strip():
        return []
    try:
        sizes = sorted({int(part) for part in text.split(",")})
    except ValueError:
        raise ValueError(f"--groups {text!r}: give sizes as whole numbers, e.g. 2,4") from None
    if not sub_groups:
        raise ValueError(
            f"--groups {text}: {framework}'s collectives run over every worker only "
            "(MultiWorkerMirroredStrategy has no sub-groups); time each size as a launch of "
            "its own"
        )
    wrong = [size for size in sizes if not 2 <= size < world_size]
    if wrong:
        raise ValueError(
            f"--groups {text}: a group has 2 ranks or more and fewer than the launch's "
            f"{world_size} (the whole launch is always timed), not {wrong[0]}"
        )
    return sizes


def tiers_offered(framework: str, sub_groups: bool) -> None:
    """ValueError where the framework has no `sub_groups` to time (before any work)."""
    if not sub_groups:
        raise ValueError(
            f"--tiers: {framework}'s collectives run over every worker only "
            "(MultiWorkerMirroredStrategy has no sub-groups); measure the tiers with "
            "torch_impl.links"
        )


def _by_node(hosts: list[str]) -> dict[str, list[int]]:
    nodes: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        nodes.setdefault(host, []).append(rank)
    return nodes


def tiers_fit(hosts: list[str]) -> bool:
    """Whether ranks on these hosts (in rank order) have two tiers to time: 2 nodes or more,
    each with the same number of ranks, 2 or more."""
    per_node = {len(ranks) for ranks in _by_node(hosts).values()}
    return len(per_node) == 1 and len(_by_node(hosts)) > 1 and min(per_node) > 1


def tier_partitions(hosts: list[str], side: Side) -> dict[TierName, list[list[int]]]:
    """`--tiers`: the ranks of each node (intra_node) and the i-th rank of every node
    (inter_node), from every rank's host; ValueError naming the problem and the fix."""
    tiers_offered(side.framework, side.partition_timer is not None)
    nodes = _by_node(hosts)
    if not tiers_fit(hosts):
        counts = ", ".join(f"{host}: {len(ranks)}" for host, ranks in nodes.items())
        raise ValueError(
            f"--tiers: the ranks per node are {counts}; the tiers take 2 nodes or more with "
            "the same number of ranks on each, 2 or more (e.g. srun -N2 --ntasks-per-node=2)"
        )
    local = len(nodes[hosts[0]])
    return {
        "intra_node": list(nodes.values()),
        "inter_node": [[ranks[index] for ranks in nodes.values()] for index in range(local)],
    }
