"""Each Kubernetes manifest's training command, run as its pod runs it (the pod's environment,
`$(NAME)` expanded as the kubelet does), exits with the code its restart rules key on: a refusal
(a bad config) exits 2, under torchrun too, so that the Job's podFailurePolicy rule on exit code
2 fails the job instead of restarting it. torchrun itself exits 1 whatever its worker's code."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from common.launch.ports import free_ports

REPO = Path(__file__).resolve().parents[2]
REFUSED = ["--set", "optim.name=nope"]  # refused before any peer is met
# What the downward API gives the fields the manifests read
FIELDS = {
    "metadata.labels['jobset.sigs.k8s.io/jobset-uid']": "4f1c9a7e-uid",
    "metadata.labels['jobset.sigs.k8s.io/jobset-name']": "mnist-tf",
    "metadata.annotations['batch.kubernetes.io/job-completion-index']": "0",
}


def walk(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def containers() -> list[tuple[str, list[str], list[dict]]]:
    """(where, command, env) of every training container the manifests start."""
    found = []
    for path in sorted((REPO / "k8s").rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if not document or document["kind"] not in ("TrainJob", "JobSet", "TFJob"):
                continue
            commands = [node for node in walk(document) if "command" in node]
            for index, node in enumerate(commands):
                where = f"{path.relative_to(REPO)}:{document['kind']}:{index}"
                found.append((where, node["command"], node.get("env", [])))
    return found


def pod_environment(kind: str, env: list[dict]) -> dict[str, str]:
    """What the pod's container sees: what its operator sets, then the manifest's own env."""
    port = free_ports(1)[0]
    given = {"PET_MASTER_PORT": str(port), "PET_MASTER_ADDR": "127.0.0.1"}
    if kind == "TrainJob":  # the torch plugin's, for a job of one node (no peer to wait for)
        given |= {"PET_NNODES": "1", "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": "0"}
    if kind == "TFJob":  # the operator's
        cluster = {"chief": [f"127.0.0.1:{port}"], "worker": [f"127.0.0.2:{port}"]}
        given["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}})
    for variable in env:
        if "value" in variable:
            given[variable["name"]] = expand(variable["value"], given)
        else:
            given[variable["name"]] = FIELDS[variable["valueFrom"]["fieldRef"]["fieldPath"]]
    return given


def expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's $(NAME): the variable's value where it is defined, else left as written."""
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), text)


CONTAINERS = containers()


@pytest.mark.parametrize(
    "where, command, env", CONTAINERS, ids=[where for where, _, _ in CONTAINERS]
)
def test_a_refused_config_exits_2_from_the_pods_command(where, command, env, tmp_path):
    kind = where.split(":")[1]
    given = pod_environment(kind, env)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TF_CONFIG"))}
    argv = [expand(part, given) for part in command]
    assert argv[0] == "python", f"{where}: the image's python starts {argv}"
    done = subprocess.run(
        [sys.executable, *argv[1:], *REFUSED],
        env={**base, **given, "TMPDIR": str(tmp_path)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, f"{where}: exit {done.returncode}\n{done.stderr[-3000:]}"
    assert "optim.name: expected one of" in done.stderr, done.stderr[-3000:]
