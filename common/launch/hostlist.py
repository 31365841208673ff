"""SLURM's compressed notations, expanded the way SLURM does.

expand_hostlist("gpu-[01-03,7],cpu9") -> ["gpu-01", "gpu-02", "gpu-03", "gpu-7", "cpu9"]
expand_tasks_per_node("2(x3),1")      -> [2, 2, 2, 1]
ranks_to_hosts(["a", "b"], [2, 2], "block")  -> ("a", "a", "b", "b")
ranks_to_hosts(["a", "b"], [2, 2], "cyclic") -> ("a", "b", "a", "b")
"""

from __future__ import annotations

import itertools
import math
import re
import shutil
import subprocess

# SLURM refuses a bracket range of more than 65,536 hosts ("Too many hosts in range"); no
# allocation comes near the total bound below, which keeps a bad list from exhausting memory.
MAX_RANGE = 65_536
MAX_HOSTS = 2**20


class HostlistError(ValueError):
    """A host list or task count that SLURM would not have produced."""


def _split_top_level(text: str) -> list[str]:
    """Split on commas and whitespace that are not inside brackets (SLURM takes both); an
    empty entry between commas is refused."""
    items: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text + ",":
        if char == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested brackets in host list {text!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in host list {text!r}")
        if depth == 0 and (char == "," or char.isspace()):
            if current:
                items.append("".join(current))
            elif char == ",":
                raise HostlistError(f"empty entry in host list {text!r}")
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in host list {text!r}")
    return items


def _expand_range_set(body: str, text: str) -> list[str]:
    values: list[str] = []
    for part in body.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if not match:
            raise HostlistError(f"bad range {part!r} in host list {text!r}")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise HostlistError(f"descending range {part!r} in host list {text!r}")
        if int(high) - int(low) + 1 > MAX_RANGE:
            raise HostlistError(
                f"range {part!r} in host list {text!r} holds more than {MAX_RANGE:,} hosts "
                "(SLURM refuses it too)"
            )
        width = len(low)  # SLURM keeps the zero padding of the range's first number
        values.extend(str(number).zfill(width) for number in range(int(low), int(high) + 1))
    return values


def expand_hostlist(text: str) -> list[str]:
    """Expand a SLURM host list, in SLURM's order (which is the rank order). With several
    brackets in one name SLURM varies the last one fastest, then the others from the first
    on: a[1-2]b[3-4]c[5-6] -> a1b3c5 a1b3c6 a2b3c5 a2b3c6 a1b4c5 ..."""
    if not text or not text.strip():
        raise HostlistError("empty host list")
    hosts: list[str] = []
    for item in _split_top_level(text.strip()):
        pieces = re.split(r"\[([^\]]*)\]", item)
        # pieces alternates literal text and bracket bodies: lit, body, lit, body, lit
        literals, ranges = pieces[0::2], [_expand_range_set(p, text) for p in pieces[1::2]]
        if len(hosts) + math.prod(len(values) for values in ranges) > MAX_HOSTS:
            raise HostlistError(f"host list {text!r} names more than {MAX_HOSTS:,} hosts")
        order = [*range(len(ranges) - 2, -1, -1), len(ranges) - 1] if ranges else []
        for combo in itertools.product(*(ranges[index] for index in order)):
            chosen = dict(zip(order, combo, strict=True))
            hosts.append(
                "".join(
                    literal + (chosen[index] if index < len(ranges) else "")
                    for index, literal in enumerate(literals)
                )
            )
    return hosts


def expand_with_slurm(text: str) -> list[str] | None:
    """`scontrol show hostnames` of `text`, when scontrol is on the path and answers; None
    otherwise (no SLURM here, or no configuration it can reach)."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return None
    try:
        done = subprocess.run(
            [scontrol, "show", "hostnames", text], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    hosts = done.stdout.split()
    return hosts if done.returncode == 0 and hosts else None


def expand_nodes(text: str) -> list[str]:
    """A step's node list: SLURM's own expansion where it can be asked, else the built-in one
    (the same on every list SLURM produces; tests/slurm compares them)."""
    return expand_with_slurm(text) or expand_hostlist(text)


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
