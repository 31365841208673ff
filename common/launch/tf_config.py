"""TF_CONFIG as a launcher sets it, read into the ranks of one cluster.

Two writers are understood: `common.launch` (every rank a worker, beside torchrun's variables)
and Kubeflow's TFJob, which sets TF_CONFIG alone:

    {"cluster": {"chief": ["job-chief-0.ns.svc:2222"], "worker": ["job-worker-0.ns.svc:2222"]},
     "task": {"type": "worker", "index": 0}, "environment": "cloud"}

The suite trains with MultiWorkerMirroredStrategy, where the chief is a worker too: the chief
is rank 0 and worker i is rank i + 1 (without a chief, worker i is rank i). Parameter servers
and evaluators have no place in it and are refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from common.launch.cluster import ClusterError

FIX = "set it as a TFJob or common.launch writes it (cluster.worker: one host:port per task)"
TRAINING_JOBS = ("chief", "worker")  # in rank order


@dataclass(frozen=True)
class TfCluster:
    hosts: tuple[str, ...]  # every rank's host, in rank order
    ports: tuple[int, ...]  # every rank's TensorFlow port, in rank order
    rank: int  # this task's


def _address(entry: object, job: str) -> tuple[str, int]:
    host, _, port = entry.rpartition(":") if isinstance(entry, str) else ("", "", "")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ClusterError(
            f"TF_CONFIG: {job} {entry!r} is not host:port with a port in 1..65535; {FIX}"
        )
    return host, int(port)


def parse(text: str) -> TfCluster:
    """The ranks TF_CONFIG describes, and this task's; ClusterError naming what is wrong."""
    try:
        config = json.loads(text)
        cluster, task = config["cluster"], config["task"]
        jobs = {job: cluster[job] for job in cluster}
        kind, index = task.get("type", "worker"), task["index"]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ClusterError(
            f"TF_CONFIG is not JSON with cluster and task.index: {text[:200]!r}; {FIX}"
        ) from None
    other = sorted(set(jobs) - set(TRAINING_JOBS))
    if other or kind not in TRAINING_JOBS:
        raise ClusterError(
            f"TF_CONFIG names {', '.join(other) or kind} tasks: MultiWorkerMirroredStrategy "
            "trains with a chief and workers only (no ps, no evaluator)"
        )
    if not all(isinstance(jobs.get(job, []), list) for job in TRAINING_JOBS):
        raise ClusterError(f"TF_CONFIG: cluster.chief and cluster.worker must be lists; {FIX}")
    if len(jobs.get("chief", [])) > 1 or not isinstance(index, int):
        raise ClusterError(f"TF_CONFIG: at most one chief, and an integer task.index; {FIX}")
    if not 0 <= index < len(jobs.get(kind, [])):
        raise ClusterError(
            f"TF_CONFIG: task {kind} {index} is not in its cluster, which has "
            f"{len(jobs.get(kind, []))} {kind} task(s); check task.index"
        )
    ranks = [_address(entry, job) for job in TRAINING_JOBS for entry in jobs.get(job, [])]
    rank = index + (len(jobs.get("chief", [])) if kind == "worker" else 0)
    return TfCluster(tuple(h for h, _ in ranks), tuple(p for _, p in ranks), rank)
