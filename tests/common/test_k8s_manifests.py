"""The Kubernetes manifests parse as YAML, mount the one results volume, and name only
environment variables that the suite's launch code reads (no API server runs here: the pods'
environments are tested in tests/faults/test_kubeflow_pods.py)."""

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((REPO / "k8s").glob("*.yaml"))
READERS = "".join(path.read_text() for path in (REPO / "common" / "launch").glob("*.py"))


def walk(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def test_there_is_a_manifest_per_launch_path():
    names = {path.name for path in MANIFESTS}
    assert {"trainjob-torch.yaml", "jobset-tf.yaml", "tfjob.yaml", "results-pvc.yaml"} <= names


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.name)
def test_a_manifest_parses_and_names_only_variables_the_code_reads(path):
    documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert documents and all("kind" in doc and "apiVersion" in doc for doc in documents)
    named = {
        node["name"]
        for doc in documents
        for node in walk(doc)
        if "valueFrom" in node
        or ("value" in node and "name" in node and re.fullmatch(r"[A-Z_]+", str(node["name"])))
    }
    unread = sorted(name for name in named if f'"{name}"' not in READERS)
    assert not unread, f"{path.name} sets variables nothing reads: {unread}"
    claims = {node["claimName"] for doc in documents for node in walk(doc) if "claimName" in node}
    assert claims <= {"dual-mnist-results"}
