"""SLURM's compressed notations, expanded the way SLURM does.

expand_hostlist("gpu-[01-03,7],cpu9") -> ["gpu-01", "gpu-02", "gpu-03", "gpu-7", "cpu9"]
expand_tasks_per_node("2(x3),1")      -> [2, 2, 2, 1]
ranks_to_hosts(["a", "b"], [2, 2], "block")  -> ("a", "a", "b", "b")
ranks_to_hosts(["a", "b"], [2, 2], "cyclic") -> ("a", "b", "a", "b")
"""

from __future__ import annotations

import itertools
import re


class HostlistError(ValueError):
    """A host list or task count that SLURM would not have produced."""


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    items, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested brackets in host list {text!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in host list {text!r}")
        if char == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in host list {text!r}")
    items.append("".join(current))
    return items


def _expand_range_set(body: str, text: str) -> list[str]:
    values = []
    for part in body.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if not match:
            raise HostlistError(f"bad range {part!r} in host list {text!r}")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise HostlistError(f"descending range {part!r} in host list {text!r}")
        width = len(low)  # SLURM keeps the zero padding of the range's first number
        values.extend(str(number).zfill(width) for number in range(int(low), int(high) + 1))
    return values


def expand_hostlist(text: str) -> list[str]:
    """Expand a SLURM host list, keeping SLURM's order (which is the rank order)."""
    if not text or not text.strip():
        raise HostlistError("empty host list")
    hosts = []
    for item in _split_top_level(text.strip()):
        if not item:
            raise HostlistError(f"empty entry in host list {text!r}")
        pieces = re.split(r"\[([^\]]*)\]", item)
        # pieces alternates literal text and bracket bodies: lit, body, lit, body, lit
        choices = [
            [piece] if index % 2 == 0 else _expand_range_set(piece, text)
            for index, piece in enumerate(pieces)
        ]
        hosts.extend("".join(combo) for combo in itertools.product(*choices))
    return hosts


def expand_tasks_per_node(text: str) -> list[int]:
    """Expand SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE, e.g. '2(x3),1'."""
    if not text or not text.strip():
        raise HostlistError("empty tasks-per-node list")
    counts = []
    for part in text.strip().split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            raise HostlistError(f"bad tasks-per-node entry {part!r} in {text!r}")
        count, repeat = int(match.group(1)), int(match.group(2) or 1)
        if count < 1 or repeat < 1:
            raise HostlistError(f"tasks-per-node entry {part!r} in {text!r} must be positive")
        counts.extend([count] * repeat)
    return counts


def ranks_to_hosts(nodes: list[str], counts: list[int], distribution: str) -> tuple[str, ...]:
    """The node of every rank, for SLURM's node-level task distribution block or cyclic."""
    if len(nodes) != len(counts):
        raise HostlistError(f"{len(nodes)} nodes but {len(counts)} task counts")
    kind = distribution.split(":")[0].split(",")[0] or "block"
    if kind == "block":
        return tuple(node for node, count in zip(nodes, counts, strict=True) for _ in range(count))
    if kind == "cyclic":
        left = list(counts)
        hosts: list[str] = []
        while any(left):
            for index, node in enumerate(nodes):
                if left[index]:
                    hosts.append(node)
                    left[index] -= 1
        return tuple(hosts)
    raise HostlistError(
        f"SLURM_DISTRIBUTION={distribution!r}: only block and cyclic task distributions map "
        "ranks to nodes here; use --distribution=block (the default) or cyclic"
    )
