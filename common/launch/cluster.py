"""Where every rank stands: `ClusterSpec` (its rank, its peers' hosts, the rendezvous address),
and what is built from it, TF_CONFIG above all.

`common.launch.environment.from_environment` is the one reader of the launchers' variables;
`write_tf_config` here is the one writer of TF_CONFIG, called by `common.launch.local` for the
environment of each rank it starts and by `tf_impl.dist` for its own process (TensorFlow reads
it from there).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

LAUNCHER_MARK = "SUITE_LAUNCHER"
# slurm/task.sh sets it to 1 after narrowing CUDA_VISIBLE_DEVICES to its task's own GPU.
TASK_GPU_BOUND = "SUITE_TASK_GPU_BOUND"
# common.launch names a file here; it writes into it why a rank failed, as soon as it sees it.
STOP_REASON_VARIABLE = "SUITE_STOP_REASON"
# A launcher (common.launch, slurm/run_slurm.sh, torch_impl.agent) names a file here; the chief
# writes its run folder into it, so that the launcher can end a run whose chief died
# (`python -m common.core.run.run_end --note FILE`).
RUN_DIR_VARIABLE = "SUITE_RUN_DIR_NOTE"
# The exit status of a preempted rank: "try again later" (EX_TEMPFAIL). It checkpointed at the
# end of the epoch on SIGUSR1; slurm/run_slurm.sh requeues the job, common.launch says so.
PREEMPTED_EXIT = 75
# The exit status of a run refused before it started (a bad config or launch; argparse's too):
# not worth a restart (k8s/'s podFailurePolicy rules fail the job on it).
REFUSED_EXIT = 2


class ClusterError(ValueError):
    """The launch variables are missing or contradict each other; the message names them."""


@dataclass(frozen=True)
class ClusterSpec:
    launcher: str  # "single", "local", "torchrun", "slurm", "tf_config" or "trainjob"
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    hosts: tuple[str, ...]  # host of every rank, in rank order; empty when the launcher hides it
    node: str  # this process's node
    master_addr: str
    master_port: int
    meeting_ports: int = 1  # ports from master_port on which TF's chief may hold its meeting
    launch_id: str = ""  # the same in every rank of one launch (job id, launcher's run id)
    tf_ports: tuple[int, ...] = ()  # TensorFlow port of every rank, in rank order
    stop_reason_file: str = ""  # where common.launch says why a rank failed
    run_dir_note: str = ""  # where the chief writes its run folder for the launcher
    cpus_per_task: int = 0  # SLURM_CPUS_PER_TASK: cores of this task (0: not said)
    slurm_job_id: str = ""  # SLURM_JOB_ID when inside a SLURM job (srun tasks, torchrun in a job)
    cluster_name: str = ""  # SLURM_CLUSTER_NAME: job ids are only unique within one cluster
    restart_count: int = 0  # SLURM_RESTART_COUNT: how often SLURM requeued this job
    attempt: int = 0  # TORCHELASTIC_RESTART_COUNT: restarts of the ranks by an elastic launcher
    max_restarts: int = 0  # TORCHELASTIC_MAX_RESTARTS: how many that launcher allows
    gpus_bound_per_task: bool = False  # SLURM (--gpus-per-task) or slurm/task.sh bound a GPU

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    def tf_config(self) -> dict[str, Any]:
        """The TF_CONFIG of this task: every rank is a worker, this process is worker `rank`."""
        if len(self.hosts) != self.world_size or len(self.tf_ports) != self.world_size:
            raise ClusterError(
                f"the {self.launcher} launcher does not tell every rank's host, so TF_CONFIG "
                "cannot be built; start TensorFlow with srun or python -m common.launch"
            )
        workers = [f"{host}:{port}" for host, port in zip(self.hosts, self.tf_ports, strict=True)]
        return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": self.rank}}


def local_spec(
    world_size: int,
    rank: int = 0,
    *,
    master_port: int,
    tf_ports: tuple[int, ...],
    launch_id: str = "",
) -> ClusterSpec:
    """Rank `rank` of `world_size` ranks on this machine, as `common.launch` starts them."""
    return ClusterSpec(
        launcher="local",
        rank=rank,
        local_rank=rank,
        world_size=world_size,
        local_world_size=world_size,
        hosts=("localhost",) * world_size,
        node="localhost",
        master_addr="127.0.0.1",
        master_port=master_port,
        launch_id=launch_id,
        tf_ports=tf_ports,
    )


def write_tf_config(spec: ClusterSpec, environ: MutableMapping[str, str]) -> None:
    """Set TF_CONFIG in `environ` (a rank's environment, or os.environ) for `spec`'s rank; one
    process alone gets none, so TensorFlow starts no gRPC server and no coordination service."""
    if spec.world_size > 1:
        environ["TF_CONFIG"] = json.dumps(spec.tf_config())
    else:
        environ.pop("TF_CONFIG", None)


class RankView:
    """rank / world_size / is_chief of an object holding a `spec: ClusterSpec`; both frameworks'
    DistInfo read them this way."""

    spec: ClusterSpec

    @property
    def rank(self) -> int:
        return self.spec.rank

    @property
    def world_size(self) -> int:
        return self.spec.world_size

    @property
    def is_chief(self) -> bool:
        return self.spec.is_chief


def unique_stamp() -> str:
    """Time to the second and 24 random bits: launches started in the same second differ."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
