"""What a run's nodes sent per training step: the veth counters (TCP payload: the counted bytes
less HEADERS per packet) between the epoch 1 and epoch 3 records, less the evaluation passes'
own traffic, and what the accounting (the epoch records' wire bytes) says they send
(tests/slurm/test_shaped_links.py, see its docstring)."""

import statistics

HEADERS = 66  # bytes of Ethernet (14), IPv4 (20) and TCP with timestamps (32) per packet


def names_of(nodes: int) -> list[str]:
    return [f"n{index}" for index in range(1, nodes + 1)]


def _payload(counters: dict, node: str) -> int:
    return counters[node]["sent_bytes"] - HEADERS * counters[node]["sent_packets"]


def expected_per_step(run, per_node: int, cross_node_only: bool) -> float:
    """Bytes the accounting says each node sends per training step (see test_shaped_links)."""
    traffic = next(epoch.traffic for epoch in run.epochs if epoch.traffic)
    total = 0.0
    for entry in traffic:
        if entry.phase != "train" or (cross_node_only and entry.kind != "all_reduce"):
            continue
        wire = entry.wire_bytes
        if entry.kind == "reduce_scatter" and run.start.framework == "torch":
            wire *= 2  # gloo runs it as an all_reduce: 2(n-1)/n of the buffer, not (n-1)/n
        total += wire
    return total * per_node


def _eval_bytes(run, per_node: int, cross_node_only: bool) -> float:
    traffic = next(epoch.traffic for epoch in run.epochs if epoch.traffic)
    return per_node * sum(
        entry.wire_bytes
        for entry in traffic
        if entry.phase == "eval" and not (cross_node_only and entry.kind != "all_reduce")
    )


def measured_per_step(run, seen: dict, per_node: int, cross_node_only: bool) -> float:
    assert 1 in seen and 3 in seen, f"epoch records seen: {sorted(seen)}"
    nodes = names_of(len(seen[1]))
    sent = statistics.mean(_payload(seen[3], n) - _payload(seen[1], n) for n in nodes)
    steps = sum(epoch.steps for epoch in run.epochs[1:])
    return (sent - 2 * _eval_bytes(run, per_node, cross_node_only)) / steps
