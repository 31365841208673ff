"""Real processes, each given exactly one Kubeflow pod's environment (the manifests' host names
mapped to 127.0.0.x by a hosts file of the pod's own), train to the same losses as the
local launcher: a TrainJob's TensorFlow pods (no torchrun), a PyTorchJob's pods of one process
each, and a PyTorchJob's pods of two processes under torchrun. The pods start cold, as a pod
does; the local launcher's reference runs come from the session's store (tests/run_store.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.launch.ports import free_ports
from tests import run_store
from tests.launching import SMALL, train_command

HOSTS = Path("/etc/hosts")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mapping pod names needs root")


def pod_names(names: dict[str, str], folder: Path):
    """A wrapper that runs a command with `names` resolvable, as a cluster's DNS resolves pod
    names: the machine's hosts file plus their lines, bind-mounted over /etc/hosts in a mount
    namespace of the command's own. The machine's file is never written, so the SLURM test
    cluster rewriting its own lines there at the same time (a parallel run) changes nothing."""
    hosts = folder / "pod-hosts"
    lines = [f"{address} {name}" for name, address in names.items()]
    hosts.write_text(HOSTS.read_text().rstrip("\n") + "\n" + "\n".join(lines) + "\n")
    mount = 'mount --bind "$0" /etc/hosts && exec "$@"'

    def in_pod(command: list[str]) -> list[str]:
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            mount,
            str(hosts),
            *command,
        ]

    return in_pod


def same_losses(pods_run, local_run) -> None:
    """Equal up to float32 rounding: a pod takes every core of its machine, where the local
    launcher's ranks split one machine's (other thread counts sum GEMMs in another order)."""
    ours, theirs = epochs(pods_run), epochs(local_run)
    assert len(ours) == len(theirs) == 2
    for mine, local in zip(ours, theirs, strict=True):
        assert mine == pytest.approx(local, rel=1e-6), (ours, theirs)


def epochs(run_dir) -> list[tuple[float, float]]:
    found = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["train_loss"], r["val_loss"]) for r in found if r["record"] == "epoch"]


def pods(commands_and_envs) -> list[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RANK", "WORLD", "MASTER", "LOCAL_", "PET_", "TF_CONFIG"))
    }
    started = [
        subprocess.Popen(
            command,
            env={**base, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for command, env in commands_and_envs
    ]
    outputs = [pod.communicate(timeout=300)[0] for pod in started]
    assert [pod.returncode for pod in started] == [0] * len(started), outputs
    return outputs


def test_trainjob_pods_of_tensorflow_train_as_the_local_launcher(tmp_path, tmp_path_factory):
    port = free_ports(3)[0]  # the rendezvous, then one TensorFlow port per worker
    settings = [*SMALL, f"output.dir={tmp_path}", "output.run_name=trainjob"]
    names = {"mnist-node-0-0.mnist": "127.0.0.1", "mnist-node-0-1.mnist": "127.0.0.2"}
    env = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "PET_MASTER_PORT": str(port)}
    env["PET_MASTER_ADDR"] = "mnist-node-0-0.mnist"
    in_pod = pod_names(names, tmp_path)
    command = in_pod(train_command("tf_impl.train", 0, settings, ["--quiet"]))
    pods([(command, {**env, "PET_NODE_RANK": str(node)}) for node in (0, 1)])
    start = json.loads((tmp_path / "trainjob" / "metrics.jsonl").read_text().splitlines()[0])
    assert (start["launcher"], start["world_size"]) == ("trainjob", 2)
    local = run_store.run(tmp_path_factory, "tf_impl.train", "local", 2)
    assert epochs(tmp_path / "trainjob") == epochs(local)


def test_pytorchjob_pods_of_one_process_train_as_the_local_launcher(tmp_path, tmp_path_factory):
    (port,) = free_ports(1)
    settings = [*SMALL, f"output.dir={tmp_path}", "output.run_name=pytorchjob"]
    env = {"MASTER_ADDR": "mnist-master-0", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    env |= {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "1"}
    in_pod = pod_names({"mnist-master-0": "127.0.0.1"}, tmp_path)
    command = in_pod(train_command("torch_impl.train", 0, settings, ["--quiet"]))
    pods([(command, {**env, "RANK": str(pod), "PET_NODE_RANK": str(pod)}) for pod in (0, 1)])
    local = run_store.run(tmp_path_factory, "torch_impl.train", "local", 2)
    same_losses(tmp_path / "pytorchjob", local)


def test_pytorchjob_pods_of_two_processes_under_torchrun_train_as_the_local_launcher(
    tmp_path, tmp_path_factory
):
    (port,) = free_ports(1)
    settings = [*SMALL, f"output.dir={tmp_path}", "output.run_name=torchrun"]
    env = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_MASTER_PORT": str(port)}
    env |= {"PET_MASTER_ADDR": "mnist-master-0", "WORLD_SIZE": "4", "MASTER_PORT": str(port)}
    program = train_command("torch_impl.train", 0, settings, ["--quiet"])[1:]  # after python
    in_pod = pod_names({"mnist-master-0": "127.0.0.1"}, tmp_path)
    torchrun = in_pod([*TORCHRUN, f"--log-dir={tmp_path / 'torchelastic'}", *program])
    pods([(torchrun, {**env, "PET_NODE_RANK": str(pod), "RANK": str(pod)}) for pod in (0, 1)])
    local = run_store.run(tmp_path_factory, "torch_impl.train", "local", 4)
    same_losses(tmp_path / "torchrun", local)


def test_trainjob_pods_of_torch_under_torchrun_train_as_the_local_launcher(
    tmp_path, tmp_path_factory
):
    """A TrainJob's torch pods get only PET_*: torchrun takes them as its defaults."""
    (port,) = free_ports(1)
    settings = [*SMALL, f"output.dir={tmp_path}", "output.run_name=trainjob-torch"]
    env = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "PET_MASTER_PORT": str(port)}
    env["PET_MASTER_ADDR"] = "mnist-node-0-0.mnist"
    program = train_command("torch_impl.train", 0, settings, ["--quiet"])[1:]
    in_pod = pod_names({"mnist-node-0-0.mnist": "127.0.0.1"}, tmp_path)
    torchrun = in_pod([*TORCHRUN, f"--log-dir={tmp_path / 'torchelastic'}", *program])
    pods([(torchrun, {**env, "PET_NODE_RANK": str(node)}) for node in (0, 1)])
    start = json.loads((tmp_path / "trainjob-torch" / "metrics.jsonl").read_text().splitlines()[0])
    assert (start["launcher"], start["world_size"]) == ("torchrun", 2)
    local = run_store.run(tmp_path_factory, "torch_impl.train", "local", 2)
    same_losses(tmp_path / "trainjob-torch", local)
