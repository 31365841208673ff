"""A real SLURM cluster on this machine, for the tests and the demo (root, Debian).

    python slurm/testcluster.py up [--nodes 2] [--dir DIR] [--owner PID] [--link RATE[,DELAY]]
                                   [--node-cpu CORES]
    python slurm/testcluster.py link --link RATE[,DELAY]|off | cpu --node-cpu CORES|off [--dir DIR]
    python slurm/testcluster.py counters|down [--dir DIR]         (DIR: /tmp/suite-slurm)

`up` installs slurmctld, slurmd, slurm-client and munge where missing and starts them without
systemd: a network namespace per node (`n1`, 10.77.0.11, ...) on a bridge, links of MTU 9000,
each slurmd pinned to its share of the cores, or held to CORES each by a CPU quota
(slurm/testcluster_cpu.py). One cluster runs on a machine at a time: `up` refuses (exit 3, the
owner named) while a live owner's cluster is up, and takes down a stale one; `down` stops
exactly what `up` recorded in --dir. `--link` shapes every node's veth both ways with tc's tbf
(kernels without netem refuse a delay, saying so); `counters` prints the veths' bytes and packets.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import testcluster_claim as claim
import testcluster_cpu
from testcluster_claim import read_pid, wait_until
from testcluster_links import SUBNET, address, counters, make_network, rate_bits, set_hosts, shape

PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
BUSY_EXIT = 3
CTLD_PORT, SLURMD_PORT = 16817, 16818
CPUS_PER_NODE = 2


def sh(*command: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=check, text=True, capture_output=True, **kwargs)


def install() -> None:
    if all(shutil.which(tool) for tool in ("slurmctld", "slurmd", "sbatch", "munged")):
        return
    print("installing " + " ".join(PACKAGES), file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    sh("apt-get", "update", "-qq", env=env)
    sh("apt-get", "install", "-y", "-qq", *PACKAGES, env=env)


def node_names(nodes: int) -> list[str]:
    return [f"n{index}" for index in range(1, nodes + 1)]


def write_config(root: Path, nodes: list[str]) -> Path:
    for folder in ("state", "log", "spool"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    lines = [
        "ClusterName=suite",
        f"SlurmctldHost={socket.gethostname()}({SUBNET}.1)",
        f"SlurmctldPort={CTLD_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        "SlurmUser=root",
        "AuthType=auth/munge",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/slurmctld.pid",
        f"SlurmdPidFile={root}/slurmd-%n.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        f"SlurmdLogFile={root}/log/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SchedulerParameters=batch_sched_delay=0",
        "EnforcePartLimits=ALL",
        "SlurmdParameters=config_overrides",  # trust the CPU counts below, not the probe
        "ReturnToService=2",
        "MpiDefault=none",
        "JobCompType=jobcomp/none",
        "AccountingStorageType=accounting_storage/none",
        "GresTypes=gpu",
        "KillWait=5",
        "MinJobAge=300",
    ]
    for node in nodes:
        lines.append(f"NodeName={node} NodeAddr={address(node)} CPUs={CPUS_PER_NODE} State=UNKNOWN")
    lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    config = root / "slurm.conf"
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return config


def node_cores(index: int, count: int) -> list[int]:
    """The cores node `index` of `count` runs on: its contiguous share of this process's."""
    cores = sorted(os.sched_getaffinity(0))
    if count > len(cores):
        return [cores[index % len(cores)]]
    share = len(cores) // count
    return cores[index * share : (index + 1) * share]


def claim_cluster(root: Path, owner: int) -> None:
    """Record `owner` as the cluster's (claim.Busy while a live owner has it), after taking
    down a stale cluster, or what an interrupted `up` left."""
    with claim.registry_lock():
        record = claim.read()
        if record and claim.owner_alive(record):
            raise claim.Busy(
                f"the machine's test cluster is in use ({claim.describe(record)}); it is taken "
                "down when that run ends, or by `down` with its --dir"
            )
        if record or claim.leftovers() or (root / "started.json").exists():
            said = claim.describe(record) if record else "no owner recorded"
            print(f"taking down a stale test cluster whose owner is gone ({said})", file=sys.stderr)
            take_down(Path(record.get("dir", root)), record)
        claim.write(
            {
                "dir": str(root),
                "owner": owner,
                "owner_start": claim.start_time(owner),
                "since": time.time(),
                "netns": {},
            }
        )


def up(
    root: Path, count: int, owner: int, link: str = "off", node_cpu: float | None = None
) -> dict:
    install()
    claim_cluster(root, owner)
    root.mkdir(parents=True, exist_ok=True)
    nodes = node_names(count)
    config = write_config(root, nodes)
    started: dict = {"nodes": nodes, "pids": {}, "conf": str(config), "node_cpu": node_cpu}
    (root / "started.json").write_text(json.dumps(started))
    if sh("pgrep", "-x", "munged", check=False).returncode != 0:
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        sh("runuser", "-u", "munge", "--", "munged")
        started["pids"]["munged"] = int(sh("pgrep", "-x", "munged").stdout.split()[0])
    claim.remove_network()  # what an interrupted `up` may have left (names are this script's own)
    make_network(nodes)
    shape(nodes, link)
    with claim.registry_lock():  # the namespaces' identities, to find their orphans later
        claim.write({**claim.read(), "netns": claim.namespace_inodes()})
    set_hosts(nodes)
    sh("slurmctld", "-f", str(config))
    wait_until(lambda: read_pid(root / "slurmctld.pid"), 10, "slurmctld")
    started["pids"]["slurmctld"] = read_pid(root / "slurmctld.pid")
    (root / "started.json").write_text(json.dumps(started))
    for index, node in enumerate(nodes):
        # nsenter keeps /sys/fs/cgroup visible (ip netns exec would hide it); unshare gives
        # the node its own hostname; taskset its own cores.
        cores = ",".join(map(str, node_cores(index, count)))
        sh(
            "taskset",
            "-c",
            cores,
            "nsenter",
            f"--net=/run/netns/suite-{node}",
            "unshare",
            "--uts",
            "sh",
            "-c",
            f"hostname {node} && exec slurmd -f {config} -N {node}",
        )
        pid_file = root / f"slurmd-{node}.pid"
        wait_until(lambda pid_file=pid_file: read_pid(pid_file), 10, f"slurmd on {node}")
        started["pids"][f"slurmd-{node}"] = read_pid(pid_file)
        (root / "started.json").write_text(json.dumps(started))
        testcluster_cpu.account(started["pids"][f"slurmd-{node}"])  # the jobs' CPU time
        if node_cpu is not None:  # before any job: its tasks inherit slurmd's group
            testcluster_cpu.size({node: started["pids"][f"slurmd-{node}"]}, node_cpu)
    env = {**os.environ, "SLURM_CONF": str(config)}

    def idle() -> bool:
        states = sh("sinfo", "-h", "-N", "-o", "%t", env=env, check=False).stdout.split()
        return len(states) == len(nodes) and all(state == "idle" for state in states)

    wait_until(idle, 30, "the nodes to become idle")
    return started


def take_down(root: Path, record: dict) -> None:
    """Stop the daemons `root` recorded and everything in the cluster's namespaces, remove its
    network and hosts lines, and forget it."""
    try:
        started = json.loads((root / "started.json").read_text())
    except (OSError, ValueError):
        started = {"pids": {}}
    daemons = [pid for pid in started["pids"].values() if pid]
    claim.take_down(record, daemons)
    testcluster_cpu.remove()
    testcluster_cpu.unaccount()
    set_hosts([])
    (root / "started.json").unlink(missing_ok=True)
    shutil.rmtree(root / "state", ignore_errors=True)
    claim.REGISTRY.unlink(missing_ok=True)


def down(root: Path) -> None:
    """Take down the cluster `up --dir root` started (claim.Busy if it is another's)."""
    with claim.registry_lock():
        record = claim.read()
        if record and record.get("dir") != str(root) and claim.owner_alive(record):
            raise claim.Busy(
                f"the machine's test cluster is not this --dir's: {claim.describe(record)}"
            )
        if record or (root / "started.json").exists() or claim.leftovers():
            take_down(root, record)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("action", choices=["up", "down", "link", "counters", "cpu"])
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/suite-slurm"))
    parser.add_argument(
        "--owner",
        type=int,
        default=os.getppid(),
        help="the process the cluster belongs to: while it lives, another `up` is refused; "
        "once it is gone, the next `up` takes the cluster down (default: the caller)",
    )
    parser.add_argument(
        "--link",
        default="off",
        help="shape every node's link both ways: RATE[,DELAY] in tc's units (100mbit, "
        "100mbit,1ms), or off (the default)",
    )
    parser.add_argument(
        "--node-cpu",
        default="off",
        help="each node's size in cores, the same at any number of nodes (a cgroup v1 CPU "
        "quota on its slurmd: 0.25 is a quarter of a core), or off (the default: each node "
        "its share of this machine's cores)",
    )
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("error: the test cluster needs root (packages, namespaces, daemons)", file=sys.stderr)
        return 2
    try:
        if args.link != "off":
            rate_bits(args.link.partition(",")[0])  # a bad rate before anything starts
        node_cpu = testcluster_cpu.parse_share(args.node_cpu, os.cpu_count() or 1)
        if args.action == "down":
            down(args.dir)
            return 0
        if args.action == "cpu":
            try:
                testcluster_cpu.size_running(args.dir, node_cpu)
            except RuntimeError as error:  # no CPU quotas in this kernel: the cluster stays
                print(f"error: {error}", file=sys.stderr)
                return 2
            return 0
        if args.action in ("link", "counters"):
            nodes = json.loads((args.dir / "started.json").read_text())["nodes"]
            if args.action == "counters":
                print(json.dumps(counters(nodes)))
                return 0
            try:
                shape(nodes, args.link)
            except RuntimeError as error:  # the cluster stays up, unshaped
                shape(nodes, "off")
                print(f"error: {error}", file=sys.stderr)
                return 2
            return 0
        started = up(args.dir, args.nodes, args.owner, args.link, node_cpu)
    except claim.Busy as busy:
        print(f"busy: {busy}", file=sys.stderr)
        return BUSY_EXIT
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(
            f"error: no test cluster in {args.dir} ({error.strerror}): run `up` first",
            file=sys.stderr,
        )
        return 2
    except (RuntimeError, subprocess.CalledProcessError) as error:
        detail = getattr(error, "stderr", "") or ""
        print(f"error: {error} {detail}".strip(), file=sys.stderr)
        down(args.dir)
        return 1
    print(f"export SLURM_CONF={started['conf']}  # nodes: {','.join(started['nodes'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
