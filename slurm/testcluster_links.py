"""The test cluster's network (slurm/testcluster.py): a bridge, one namespace and veth per node,
/etc/hosts lines, shaping each node's link with tc, and reading each node's veth counters.
See testcluster.py's docstring for what they do."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import testcluster_claim as claim

BRIDGE, SUBNET = claim.BRIDGE, "10.77.0"
HOSTS_MARK = "# suite-testcluster"
# Jumbo frames, as HPC Ethernet often runs. A shaped link's tbf cuts the kernel's large segments
# into frames of the MTU, and each frame costs the host softirq work that no node's CPU quota is
# charged for. At 1,500 bytes, 8 nodes of a quarter core at 200 Mbit/s left the 2-core host 4%
# idle (softirq 37% of it), so the nodes got less than their size and TensorFlow's 8-rank
# all-reduce of 2.1 MB took 186-221 ms; at 9,000, 159-168 ms (the wire's own: 150 ms).
MTU = 9000


def sh(*command: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=check, text=True, capture_output=True)


RATE_UNITS = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3, "bit": 1.0}


def rate_bits(rate: str) -> float:
    """Bits per second of a tc rate such as 100mbit (ValueError for another form)."""
    for unit, factor in RATE_UNITS.items():
        number = rate[: -len(unit)]
        if rate.endswith(unit) and number.replace(".", "", 1).isdigit() and float(number) > 0:
            return float(number) * factor
    raise ValueError(f"link rate {rate!r}: give a number and a unit, e.g. 100mbit, 1gbit, 500kbit")


def shape(nodes: list[str], link: str) -> None:
    """Shape every node's link both ways (`link`: RATE[,DELAY] or off), see the docstring."""
    devices = [(None, f"suite-v{node}") for node in nodes]
    devices += [(f"suite-{node}", "eth0") for node in nodes]
    for namespace, device in devices:
        where = ["-n", namespace] if namespace else []
        sh("tc", *where, "qdisc", "del", "dev", device, "root", check=False)
    if link == "off":
        return
    rate, _, delay = link.partition(",")
    # 1 ms of the rate, 16 KiB at least: a larger bucket lets calls of a few hundred kB pass
    # at line speed, and the link tool's prices fall under what a step pays
    burst = max(16_384, int(rate_bits(rate) / 8 / 1000))
    for namespace, device in devices:
        where = ["-n", namespace] if namespace else []
        parent = ["root"]
        if delay:
            done = sh(
                "tc",
                *where,
                "qdisc",
                "add",
                "dev",
                device,
                "root",
                "handle",
                "1:",
                "netem",
                "delay",
                delay,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(
                    f"a link delay needs the netem qdisc, which this kernel lacks "
                    f"({done.stderr.strip()}); shape the rate alone (--link {rate})"
                )
            parent = ["parent", "1:1"]
        sh(
            "tc",
            *where,
            "qdisc",
            "add",
            "dev",
            device,
            *parent,
            "tbf",
            "rate",
            rate,
            "burst",
            str(burst),
            "latency",
            "400ms",
        )


def counters(nodes: list[str]) -> dict[str, dict[str, int]]:
    """Each node's bytes and packets sent and received, from the bridge end of its veth (its rx
    is what the node sent)."""
    found = {}
    for node in nodes:
        shown = json.loads(sh("ip", "-s", "-j", "link", "show", f"suite-v{node}").stdout)[0]
        stats = shown["stats64"]
        found[node] = {
            "sent_bytes": stats["rx"]["bytes"],
            "sent_packets": stats["rx"]["packets"],
            "received_bytes": stats["tx"]["bytes"],
            "received_packets": stats["tx"]["packets"],
        }
    return found


def address(node: str) -> str:
    return f"{SUBNET}.{10 + int(node[1:])}"


def set_hosts(nodes: list[str]) -> None:
    hosts = Path("/etc/hosts")
    kept = [line for line in hosts.read_text().splitlines() if HOSTS_MARK not in line]
    added = [f"{address(node)} {node} {HOSTS_MARK}" for node in nodes]
    hosts.write_text("\n".join(kept + added) + "\n")


def make_network(nodes: list[str]) -> None:
    sh("ip", "link", "add", BRIDGE, "mtu", str(MTU), "type", "bridge")
    sh("ip", "addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    for node in nodes:
        namespace, veth = f"suite-{node}", f"suite-v{node}"
        sh("ip", "netns", "add", namespace)
        mtu = ("mtu", str(MTU))
        peer = ("peer", "name", "eth0", *mtu, "netns", namespace)
        sh("ip", "link", "add", veth, *mtu, "type", "veth", *peer)
        sh("ip", "link", "set", veth, "master", BRIDGE, "up")
        sh("ip", "-n", namespace, "addr", "add", f"{address(node)}/24", "dev", "eth0")
        sh("ip", "-n", namespace, "link", "set", "eth0", "up")
        sh("ip", "-n", namespace, "link", "set", "lo", "up")
