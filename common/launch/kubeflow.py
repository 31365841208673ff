"""What Kubeflow's training operators put in a pod's environment, read into a `ClusterSpec`
(`common.launch.environment` asks here first when it sees them).

  TrainJob (Trainer v2)  PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR and
                         PET_MASTER_PORT: torch runs under torchrun, which reads them; a
                         TensorFlow pod (no runtime of its own) is read here: node i is
                         <job>-node-0-i.<job>, worker r listens on PET_MASTER_PORT + 1 + r.
  PyTorchJob (v1)        MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK = the pod's index.
  TFJob (v1)             TF_CONFIG, read by `common.launch.tf_config`.

An elastic node count (PET_NNODES=1:4) is torchrun's to use; a process torchrun does not start
has a fixed world, and an elastic count is refused there.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping

from common.launch.cluster import ClusterError, ClusterSpec

FIX = (
    "set PET_NNODES to one number: only torchrun's workers run elastic (PET_NNODES=MIN:MAX with "
    "torchrun in the pod)"
)


def _count(env: Mapping[str, str], name: str) -> int:
    value = env.get(name, "")
    if not value.isdigit() or int(value) < 1:
        hint = f"; {FIX}" if ":" in value else ""
        raise ClusterError(f"{name}={value!r} is not a count of 1 or more{hint}")
    return int(value)


def _index(env: Mapping[str, str], name: str) -> int:
    """A 0-based index the operator sets (PET_NODE_RANK), 0 where unset."""
    value = env.get(name, "0") or "0"
    if not value.isdigit():
        raise ClusterError(
            f"{name}={value!r} is not an index of 0 or more: the operator sets it to the pod's "
            "node index; unset it, or give a number"
        )
    return int(value)


def processes_per_pod(env: Mapping[str, str]) -> int:
    """PET_NPROC_PER_NODE as a number (1 where unset); 'auto' and other words refused."""
    if "PET_NPROC_PER_NODE" not in env:
        return 1
    value = env["PET_NPROC_PER_NODE"]
    if not value.isdigit():
        raise ClusterError(
            f"PET_NPROC_PER_NODE={value!r}: start the program with torchrun (it resolves "
            "'auto'), or give a number"
        )
    return int(value)


def check_pytorchjob(env: Mapping[str, str]) -> None:
    """A PyTorchJob pod's RANK is its index: with more processes per pod, only torchrun
    (which sets LOCAL_RANK) gives each process its own."""
    if "LOCAL_RANK" not in env and processes_per_pod(env) > 1:
        raise ClusterError(
            f"RANK={env.get('RANK')} is the pod's index with PET_NPROC_PER_NODE="
            f"{env['PET_NPROC_PER_NODE']} processes per pod: start them with torchrun in the "
            "pod (it reads PET_NPROC_PER_NODE and sets each process's RANK)"
        )


def node_host(master: str, node: int) -> str:
    """JobSet's name of node `node` (the pod of completion index `node`), from the master's
    (<job>-node-0-0.<job>...)."""
    named = re.sub(r"-node-0-0(?=\.|$)", f"-node-0-{node}", master, count=1)
    if named == master and node:
        raise ClusterError(
            f"PET_MASTER_ADDR={master!r} is not a JobSet name (<job>-node-0-0.<job>): the "
            "other nodes' names cannot be told; TensorFlow needs every worker's"
        )
    return named


def from_trainjob(env: Mapping[str, str]) -> ClusterSpec:
    """One process per pod of a TrainJob, started without torchrun (TensorFlow)."""
    nodes, node = _count(env, "PET_NNODES"), _index(env, "PET_NODE_RANK")
    if processes_per_pod(env) != 1:
        raise ClusterError(
            f"PET_NPROC_PER_NODE={env['PET_NPROC_PER_NODE']}: without torchrun a pod runs one "
            "process; set it to 1, or start torch with torchrun"
        )
    if not 0 <= node < nodes:
        raise ClusterError(f"PET_NODE_RANK={node} is outside 0..{nodes - 1} (PET_NNODES={nodes})")
    master = env.get("PET_MASTER_ADDR", "")
    port = env.get("PET_MASTER_PORT", "")
    if not master or not port.isdigit() or not 1 <= int(port) <= 65535 - nodes:
        raise ClusterError(
            f"PET_MASTER_ADDR={master!r} and PET_MASTER_PORT={port!r}: a TrainJob sets both "
            "(a host, and a port with room above it for one per worker)"
        )
    hosts = tuple(node_host(master, index) for index in range(nodes))
    return ClusterSpec(
        launcher="trainjob",
        rank=node,
        local_rank=0,
        world_size=nodes,
        local_world_size=1,
        hosts=hosts,
        node=socket.gethostname(),
        master_addr=master,
        master_port=int(port),
        tf_ports=tuple(int(port) + 1 + index for index in range(nodes)),
    )
