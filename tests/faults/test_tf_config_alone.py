"""A TF_CONFIG set from outside, as a Kubeflow TFJob sets it (a chief and a worker, one process
per pod, nothing else), is a 2-worker run with the same losses as common.launch's: it was
silently ignored, and every pod trained alone. Real processes on this machine, each given
exactly one pod's environment, the pods' hosts being 127.0.0.1 and 127.0.0.2."""

import json
import os
import subprocess

from common.launch.ports import free_ports
from tests import run_store
from tests.launching import SMALL, train_command


def epochs(run_dir) -> list[tuple[float, float]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    found = [json.loads(line) for line in lines]
    return [(r["train_loss"], r["val_loss"]) for r in found if r["record"] == "epoch"]


def test_a_tfjob_chief_and_worker_train_together(tmp_path, tmp_path_factory):
    """At consecutive ports, as an operator may give them, and without MASTER_PORT: the
    rendezvous once took the chief's port + 1, the worker's, whose server then failed."""
    chief_port = free_ports(3)[0]  # the chief's, the worker's, the rendezvous'
    worker_port = chief_port + 1
    cluster = {"chief": [f"127.0.0.1:{chief_port}"], "worker": [f"127.0.0.2:{worker_port}"]}
    settings = [*SMALL, f"output.dir={tmp_path}", "output.run_name=tfjob"]
    pods = []
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD", "MASTER"))}
    for kind in ("chief", "worker"):
        config = {"cluster": cluster, "task": {"type": kind, "index": 0}, "environment": "cloud"}
        env = {**base, "TF_CONFIG": json.dumps(config)}
        pods.append(
            subprocess.Popen(
                train_command("tf_impl.train", 0, settings, ["--quiet"]),
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [pod.communicate(timeout=300)[0] for pod in pods]
    assert [pod.returncode for pod in pods] == [0, 0], outputs
    start = json.loads((tmp_path / "tfjob" / "metrics.jsonl").read_text().splitlines()[0])
    assert (start["world_size"], start["launcher"]) == (2, "tf_config"), start
    local = run_store.run(tmp_path_factory, "tf_impl.train", "local", 2)  # the reference
    assert epochs(tmp_path / "tfjob") == epochs(local)
