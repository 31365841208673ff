"""The one place that reads the launch environment and turns it into a `ClusterSpec`.

Launchers understood, in this order: torchrun and common.launch (RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR/PORT); srun (SLURM_PROCID, SLURM_LOCALID, SLURM_STEP_NUM_TASKS,
SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE, SLURM_JOB_ID); TF_CONFIG alone (a Kubeflow
TFJob, `common.launch.tf_config`); PET_* alone (a Kubeflow TrainJob pod without torchrun,
`common.launch.kubeflow`); nothing (one process on this machine). Nothing else in the suite
reads these variables, and `common.launch.cluster.write_tf_config` is the one writer of
TF_CONFIG.

    python -m common.launch.environment rendezvous-endpoint   # torchrun's c10d endpoint of a job
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from typing import Any

from common.launch import kubeflow, tf_config
from common.launch.cluster import (
    LAUNCHER_MARK,
    RUN_DIR_VARIABLE,
    STOP_REASON_VARIABLE,
    TASK_GPU_BOUND,
    ClusterError,
    ClusterSpec,
)
from common.launch.hostlist import (
    HostlistError,
    expand_nodes,
    expand_tasks_per_node,
    ranks_to_hosts,
)
from common.launch.ports import PORT_SPAN, free_ports, slurm_port_base


def _int(env: Mapping[str, str], name: str) -> int:
    value = env.get(name)
    if value is None:
        raise ClusterError(f"{name} is not set")
    try:
        return int(value)
    except ValueError:
        raise ClusterError(f"{name}={value!r} is not an integer") from None


def _port(env: Mapping[str, str], name: str) -> int:
    port = _int(env, name)
    if not 1 <= port <= 65535:
        raise ClusterError(f"{name}={port} is not a TCP port: set it to one in 1..65535")
    return port


def _check_ranks(rank: int, local_rank: int, world: int, local_world: int, source: str) -> None:
    if world < 1:
        raise ClusterError(f"{source}: world size {world} must be >= 1")
    if not 0 <= rank < world:
        raise ClusterError(f"{source}: rank {rank} is outside 0..{world - 1}")
    if not 0 <= local_rank < local_world:
        raise ClusterError(f"{source}: local rank {local_rank} is outside 0..{local_world - 1}")


def _from_torchrun(env: Mapping[str, str]) -> ClusterSpec:
    rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
    pod = "PET_NNODES" in env and "LOCAL_RANK" not in env  # a PyTorchJob's own process
    # PET_NNODES=MIN:MAX is torchrun's elastic node range: its workers (LOCAL_RANK set) get
    # the world of each attempt; a process that torchrun did not start has a fixed one
    if pod and ":" in env.get("PET_NNODES", ""):
        raise ClusterError(f"PET_NNODES={env['PET_NNODES']!r}: {kubeflow.FIX}")
    if pod:
        kubeflow.check_pytorchjob(env)
    local_rank = 0 if pod else _int(env, "LOCAL_RANK")
    local_world = _int(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else world
    local_world = 1 if pod else local_world
    _check_ranks(rank, local_rank, world, local_world, "torchrun variables")
    hosts: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()
    if "TF_CONFIG" in env:  # written by common.launch: take the hosts and ports back from it
        described = tf_config.parse(env["TF_CONFIG"])
        if len(described.hosts) != world or described.rank != rank:
            raise ClusterError(
                f"TF_CONFIG lists {len(described.hosts)} tasks and this one as rank "
                f"{described.rank}, but WORLD_SIZE={world} and RANK={rank}"
            )
        hosts, ports = described.hosts, described.ports
    return ClusterSpec(
        launcher="local" if env.get(LAUNCHER_MARK) == "local" else "torchrun",
        rank=rank,
        local_rank=local_rank,
        world_size=world,
        local_world_size=local_world,
        hosts=hosts,
        node=socket.gethostname(),
        master_addr=env.get("MASTER_ADDR") or "127.0.0.1",
        master_port=_port(env, "MASTER_PORT"),
        launch_id=env.get("SUITE_RUN_ID") or env.get("TORCHELASTIC_RUN_ID", ""),
        tf_ports=ports,
        stop_reason_file=env.get(STOP_REASON_VARIABLE, ""),
        cpus_per_task=_cpus_per_task(env),  # torchrun under srun: the cores of the agent's task
        attempt=_count_of(env, "TORCHELASTIC_RESTART_COUNT"),
        max_restarts=_count_of(env, "TORCHELASTIC_MAX_RESTARTS"),
        **_slurm_job(env),
    )


def _count_of(env: Mapping[str, str], name: str) -> int:
    """A count an elastic launcher sets: torchrun's agent, `common.launch --max-restarts`, or
    slurm/run_slurm.sh's step restarts (SUITE_MAX_RESTARTS)."""
    text = env.get(name) or "0"
    if not text.isdigit():
        raise ClusterError(f"{name}={text!r} must be a count >= 0")
    return int(text)


def _slurm_job(env: Mapping[str, str]) -> dict[str, Any]:
    """Which SLURM job (and which start of it) this process belongs to, if any."""
    restarts = env.get("SLURM_RESTART_COUNT") or "0"
    return {
        "slurm_job_id": env.get("SLURM_JOB_ID", ""),
        "cluster_name": env.get("SLURM_CLUSTER_NAME", ""),
        "restart_count": int(restarts) if restarts.isdigit() else 0,
    }


def _cpus_per_task(env: Mapping[str, str]) -> int:
    if not env.get("SLURM_CPUS_PER_TASK"):
        return 0
    cpus = _int(env, "SLURM_CPUS_PER_TASK")
    if cpus < 1:
        raise ClusterError(
            f"SLURM_CPUS_PER_TASK={cpus} must be >= 1: ask for cores with --cpus-per-task=N"
        )
    return cpus


def _local_indices(hosts: tuple[str, ...]) -> list[int]:
    """For every rank, how many ranks before it share its host (its local rank)."""
    seen: dict[str, int] = {}
    indices = []
    for host in hosts:
        indices.append(seen.get(host, 0))
        seen[host] = indices[-1] + 1
    return indices


def _from_slurm(env: Mapping[str, str]) -> ClusterSpec:
    rank, local_rank = _int(env, "SLURM_PROCID"), _int(env, "SLURM_LOCALID")
    world = _int(env, "SLURM_STEP_NUM_TASKS")
    job_id = env.get("SLURM_JOB_ID", "")
    if not job_id:
        raise ClusterError("SLURM_JOB_ID is not set (needed to derive the ports)")
    distribution = env.get("SLURM_DISTRIBUTION", "block")
    try:
        nodes = expand_nodes(env.get("SLURM_STEP_NODELIST", ""))
        counts = expand_tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE", ""))
        if len(nodes) != len(counts):
            raise HostlistError(
                f"SLURM_STEP_NODELIST names {len(nodes)} nodes but SLURM_STEP_TASKS_PER_NODE "
                f"gives task counts for {len(counts)}"
            )
        hosts = ranks_to_hosts(nodes, counts, distribution)
    except HostlistError as error:
        raise ClusterError(str(error)) from None
    if len(hosts) != world:
        raise ClusterError(
            f"SLURM_STEP_TASKS_PER_NODE adds up to {len(hosts)} tasks, "
            f"SLURM_STEP_NUM_TASKS says {world}"
        )
    if max(counts) >= PORT_SPAN:
        raise ClusterError(f"at most {PORT_SPAN - 1} tasks per node are supported (ports)")
    local_index = _local_indices(hosts)
    node = hosts[rank] if 0 <= rank < world else ""
    local_world = counts[nodes.index(node)] if node else 1
    _check_ranks(rank, local_rank, world, local_world, "SLURM variables")
    if env.get("SLURMD_NODENAME") and env["SLURMD_NODENAME"] != node:
        raise ClusterError(
            f"SLURM_PROCID={rank} belongs on {node} under distribution {distribution!r}, but "
            f"SLURMD_NODENAME={env['SLURMD_NODENAME']}"
        )
    if local_index[rank] != local_rank:
        raise ClusterError(
            f"SLURM_LOCALID={local_rank} but rank {rank} is task {local_index[rank]} "
            f"on {node} under distribution {distribution!r}"
        )
    base = slurm_port_base(job_id, env.get("SLURM_STEP_ID", ""))
    return ClusterSpec(
        launcher="slurm",
        rank=rank,
        local_rank=local_rank,
        world_size=world,
        local_world_size=local_world,
        hosts=hosts,
        node=node,
        master_addr=env.get("MASTER_ADDR") or nodes[0],
        master_port=_port(env, "MASTER_PORT") if env.get("MASTER_PORT") else base,
        launch_id=f"job{job_id}",
        tf_ports=tuple(base + 1 + index for index in local_index),
        cpus_per_task=_cpus_per_task(env),
        attempt=_count_of(env, "TORCHELASTIC_RESTART_COUNT"),  # slurm/run_slurm.sh's restarts
        max_restarts=_count_of(env, "TORCHELASTIC_MAX_RESTARTS"),
        **_slurm_job(env),
        gpus_bound_per_task=bool(env.get("SLURM_GPUS_PER_TASK")) or env.get(TASK_GPU_BOUND) == "1",
    )


def _free_of_tasks(ports: tuple[int, ...]) -> int:
    """The rendezvous port of a TF_CONFIG cluster: the first above rank 0's TensorFlow port that
    no task of the cluster uses (two tasks of one host may hold consecutive ports), else the
    first such below it."""
    taken = set(ports)
    above = (port for port in range(ports[0] + 1, 65536) if port not in taken)
    below = (port for port in range(ports[0] - 1, 0, -1) if port not in taken)
    return next(above, None) or next(below)


def _from_tf_config(env: Mapping[str, str]) -> ClusterSpec:
    """TF_CONFIG alone (a Kubeflow TFJob): one process per task. The rendezvous is on rank
    0's host, at MASTER_PORT if set, else the first port above rank 0's TensorFlow port that no
    task of the cluster uses (`_free_of_tasks`)."""
    described = tf_config.parse(env["TF_CONFIG"])
    first_port = _free_of_tasks(described.ports)
    return ClusterSpec(
        launcher="tf_config",
        rank=described.rank,
        local_rank=0,
        world_size=len(described.hosts),
        local_world_size=1,
        hosts=described.hosts,
        node=socket.gethostname(),
        master_addr=env.get("MASTER_ADDR") or described.hosts[0],
        master_port=_port(env, "MASTER_PORT") if env.get("MASTER_PORT") else first_port,
        tf_ports=described.ports,
        cpus_per_task=_cpus_per_task(env),
    )


def _single(env: Mapping[str, str]) -> ClusterSpec:
    master_port, tf_port = free_ports(2)
    return ClusterSpec(
        launcher="single",
        rank=0,
        local_rank=0,
        world_size=1,
        local_world_size=1,
        hosts=("localhost",),
        node=socket.gethostname(),
        master_addr="127.0.0.1",
        master_port=master_port,
        tf_ports=(tf_port,),
        cpus_per_task=_cpus_per_task(env),  # a batch script's own process in an allocation
    )


def from_environment(env: Mapping[str, str] | None = None) -> ClusterSpec:
    """Read the launcher's variables (os.environ unless `env` is given) into a ClusterSpec."""
    env = os.environ if env is None else env
    if "RANK" in env or "WORLD_SIZE" in env:
        spec = _from_torchrun(env)
    elif "SLURM_STEP_NUM_TASKS" in env and "SLURM_PROCID" in env:
        spec = _from_slurm(env)
    elif "TF_CONFIG" in env:
        spec = _from_tf_config(env)
    elif "PET_NNODES" in env:
        spec = kubeflow.from_trainjob(env)
    else:
        spec = _single(env)
    return dataclasses.replace(spec, run_dir_note=env.get(RUN_DIR_VARIABLE, ""))


def rendezvous_endpoint(env: Mapping[str, str] | None = None) -> str:
    """host:port for torchrun's c10d rendezvous in a SLURM job: the job's first node, and the
    last port of the job's range (the torch master port and TF's ports take the others)."""
    env = os.environ if env is None else env
    try:
        first = expand_nodes(env.get("SLURM_JOB_NODELIST", ""))[0]
    except (HostlistError, IndexError):
        raise ClusterError("SLURM_JOB_NODELIST is not set: not inside a SLURM job") from None
    return f"{first}:{slurm_port_base(env.get('SLURM_JOB_ID', '')) + PORT_SPAN - 1}"


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["rendezvous-endpoint"]:
        print("usage: python -m common.launch.environment rendezvous-endpoint", file=sys.stderr)
        raise SystemExit(2)
    try:
        print(rendezvous_endpoint())
    except ValueError as error:  # ClusterError, ports.PortError
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
