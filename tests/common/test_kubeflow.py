"""The environment each Kubeflow operator gives a pod, read into ranks (the contract; no
Kubernetes API server runs here): TrainJob without torchrun (TensorFlow), PyTorchJob with one
process a pod, and what cannot work named with its fix."""

import pytest

from common.launch import cluster, environment

TRAINJOB = {
    "PET_NNODES": "3",
    "PET_NPROC_PER_NODE": "1",
    "PET_NODE_RANK": "2",
    "PET_MASTER_ADDR": "mnist-node-0-0.mnist",
    "PET_MASTER_PORT": "29500",
}
PYTORCHJOB = {
    "MASTER_ADDR": "mnist-master-0",
    "MASTER_PORT": "23456",
    "WORLD_SIZE": "2",
    "RANK": "1",
    "PET_NNODES": "2",
    "PET_NODE_RANK": "1",
    "PET_NPROC_PER_NODE": "1",
}


def test_a_trainjob_pod_without_torchrun_is_one_worker_named_by_its_jobset():
    spec = environment.from_environment(TRAINJOB)
    assert (spec.launcher, spec.rank, spec.world_size, spec.local_rank) == ("trainjob", 2, 3, 0)
    assert spec.hosts == ("mnist-node-0-0.mnist", "mnist-node-0-1.mnist", "mnist-node-0-2.mnist")
    assert spec.tf_ports == (29501, 29502, 29503) and spec.master_port == 29500
    assert spec.tf_config()["task"] == {"type": "worker", "index": 2}


def test_a_pytorchjob_pod_of_one_process_takes_rank_from_the_pod():
    spec = environment.from_environment(PYTORCHJOB)
    assert (spec.rank, spec.world_size, spec.local_rank, spec.local_world_size) == (1, 2, 0, 1)
    assert (spec.master_addr, spec.master_port) == ("mnist-master-0", 23456)


def test_an_elastic_node_range_is_torchruns_to_use():
    """A torchrun worker of a TrainJob with PET_NNODES=1:4: torchrun set this attempt's world."""
    worker = {**TRAINJOB, "PET_NNODES": "1:4", "RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": "3"}
    spec = environment.from_environment({**worker, "MASTER_ADDR": "a", "MASTER_PORT": "29400"})
    assert (spec.launcher, spec.rank, spec.world_size) == ("torchrun", 1, 3)


@pytest.mark.parametrize(
    "env, message",
    [
        ({**TRAINJOB, "PET_NNODES": "1:4"}, "PET_NNODES='1:4'.*elastic"),
        ({**PYTORCHJOB, "PET_NNODES": "1:4"}, "PET_NNODES='1:4'.*elastic"),
        ({**TRAINJOB, "PET_NODE_RANK": "3"}, "PET_NODE_RANK=3 is outside 0..2"),
        ({**TRAINJOB, "PET_NPROC_PER_NODE": "auto"}, "torchrun"),
        ({**TRAINJOB, "PET_MASTER_ADDR": "10.0.0.5"}, "not a JobSet name"),
        ({**PYTORCHJOB, "PET_NPROC_PER_NODE": "2"}, "RANK=1 is the pod's index.*torchrun"),
        ({**PYTORCHJOB, "RANK": "2"}, "rank 2 is outside 0..1"),
        ({**TRAINJOB, "PET_NODE_RANK": "abc"}, "PET_NODE_RANK='abc' is not an index of 0 or more"),
        ({**TRAINJOB, "PET_NODE_RANK": "-1"}, "PET_NODE_RANK='-1' is not an index of 0 or more"),
        ({**TRAINJOB, "PET_NNODES": "x"}, "PET_NNODES='x' is not a count of 1 or more"),
        ({**TRAINJOB, "PET_NPROC_PER_NODE": "two"}, "PET_NPROC_PER_NODE='two'.*give a number"),
        ({**TRAINJOB, "PET_MASTER_PORT": "abc"}, "PET_MASTER_PORT='abc'"),
        ({**PYTORCHJOB, "PET_NPROC_PER_NODE": "x"}, "PET_NPROC_PER_NODE='x'.*give a number"),
    ],
)
def test_what_cannot_work_is_named_with_its_fix(env, message):
    with pytest.raises(cluster.ClusterError, match=message):
        environment.from_environment(env)
