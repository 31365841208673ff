"""A real SLURM cluster on this machine, for the tests and the demo (root, Debian).

    python slurm/testcluster.py up [--nodes 2] [--dir /tmp/suite-slurm]   # prints the env to use
    python slurm/testcluster.py down [--dir /tmp/suite-slurm]

`up` installs Debian's slurmctld, slurmd, slurm-client and munge if they are missing, and
starts munged (unless one runs), slurmctld and one slurmd per node, without systemd. Every
node is a network namespace of its own (`suite-n1`, ...) on a bridge, with its own hostname
(`n1`, ...) and address (10.77.0.11, ...), so a job on two nodes really has two hosts, and
cores of its own: each slurmd (and so every task it starts) is pinned with taskset to its
share of this machine's cores, so that two "nodes" do not compete for the same ones.
/etc/hosts gets one line per node, marked, so names resolve everywhere. The config lives in
--dir; jobs find it through SLURM_CONF. `down` stops exactly the daemons that `up` recorded in
--dir, deletes the namespaces, the bridge and the /etc/hosts lines. Facts that shaped it:
EnforcePartLimits=ALL makes an impossible request fail at submission instead of pending
forever; batch_sched_delay=0 starts a batch job in about a second; there is no accounting
database, so jobs are followed with `scontrol show job` or `sbatch --wait`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
BRIDGE, SUBNET = "suite-br0", "10.77.0"
CTLD_PORT, SLURMD_PORT = 16817, 16818
HOSTS_MARK = "# suite-testcluster"
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


def address(node: str) -> str:
    return f"{SUBNET}.{10 + int(node[1:])}"


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


def set_hosts(nodes: list[str]) -> None:
    hosts = Path("/etc/hosts")
    kept = [line for line in hosts.read_text().splitlines() if HOSTS_MARK not in line]
    added = [f"{address(node)} {node} {HOSTS_MARK}" for node in nodes]
    hosts.write_text("\n".join(kept + added) + "\n")


def make_network(nodes: list[str]) -> None:
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    for node in nodes:
        namespace, veth = f"suite-{node}", f"suite-v{node}"
        sh("ip", "netns", "add", namespace)
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        sh("ip", "link", "set", veth, "master", BRIDGE, "up")
        sh("ip", "-n", namespace, "addr", "add", f"{address(node)}/24", "dev", "eth0")
        sh("ip", "-n", namespace, "link", "set", "eth0", "up")
        sh("ip", "-n", namespace, "link", "set", "lo", "up")


def remove_network() -> None:
    """Delete this script's namespaces (suite-n*) and bridge, if there are any."""
    listed = sh("ip", "netns", "list", check=False).stdout.split()
    for name in listed:
        if name.startswith("suite-n"):
            sh("ip", "netns", "del", name, check=False)
    sh("ip", "link", "del", BRIDGE, check=False)


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


def node_cores(index: int, count: int) -> list[int]:
    """The cores node `index` of `count` runs on: its contiguous share of this process's."""
    cores = sorted(os.sched_getaffinity(0))
    if count > len(cores):
        return [cores[index % len(cores)]]
    share = len(cores) // count
    return cores[index * share : (index + 1) * share]


def up(root: Path, count: int) -> dict:
    install()
    if (root / "started.json").exists():
        raise RuntimeError(f"a test cluster from {root} is still up; run `down` first")
    root.mkdir(parents=True, exist_ok=True)
    nodes = node_names(count)
    config = write_config(root, nodes)
    started: dict = {"nodes": nodes, "pids": {}, "conf": str(config)}
    (root / "started.json").write_text(json.dumps(started))
    if sh("pgrep", "-x", "munged", check=False).returncode != 0:
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        sh("runuser", "-u", "munge", "--", "munged")
        started["pids"]["munged"] = int(sh("pgrep", "-x", "munged").stdout.split()[0])
    remove_network()  # what a killed earlier run may have left (names are this script's own)
    make_network(nodes)
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
    env = {**os.environ, "SLURM_CONF": str(config)}

    def idle() -> bool:
        states = sh("sinfo", "-h", "-N", "-o", "%t", env=env, check=False).stdout.split()
        return len(states) == len(nodes) and all(state == "idle" for state in states)

    wait_until(idle, 30, "the nodes to become idle")
    return started


def down(root: Path) -> None:
    record = root / "started.json"
    if not record.exists():
        return
    started = json.loads(record.read_text())
    for pid in reversed(list(started["pids"].values())):
        if pid:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
                time.sleep(0.1)
            if Path(f"/proc/{pid}").exists():
                os.kill(pid, signal.SIGKILL)
    remove_network()
    set_hosts([])
    record.unlink()
    shutil.rmtree(root / "state", ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/suite-slurm"))
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("error: the test cluster needs root (packages, namespaces, daemons)", file=sys.stderr)
        return 2
    if args.action == "down":
        down(args.dir)
        return 0
    try:
        started = up(args.dir, args.nodes)
    except (RuntimeError, subprocess.CalledProcessError) as error:
        detail = getattr(error, "stderr", "") or ""
        print(f"error: {error} {detail}".strip(), file=sys.stderr)
        down(args.dir)
        return 1
    print(f"export SLURM_CONF={started['conf']}  # nodes: {','.join(started['nodes'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
