"""The Kubernetes manifests: a strict check of every object against the operators' own API models
(`tests.k8s_schema`: Kubeflow Trainer v2.3.0 with its JobSet and core models, the training
operator v1.9.4 for the TFJob), no unknown or mistyped field anywhere, as the API server would
otherwise drop it silently; images that parse and are set in one place; a fixed group never
restarted; and only environment variables that the suite's launch code reads (no API server
runs here: the pods' environments are tested in tests/faults/test_kubeflow_pods.py)."""

import copy
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.k8s_schema import IMAGE, problems, versions

REPO = Path(__file__).resolve().parents[2]
KUSTOMIZATION = REPO / "k8s" / "kustomization.yaml"
MANIFESTS = sorted(path for path in (REPO / "k8s").glob("*.yaml") if path != KUSTOMIZATION)
READERS = "".join(path.read_text() for path in (REPO / "common" / "launch").glob("*.py"))
JOBS = {"TrainJob", "JobSet", "TFJob"}


def documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


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


def test_the_models_checked_against_are_the_versions_the_docs_name():
    found = versions()
    assert found["kubeflow-trainer-api"] == "2.3.0" and found["kubeflow-training"] == "1.9.4"
    text = (REPO / "docs" / "kubernetes.md").read_text()
    assert "Trainer v2.3.0" in text and "v1.9.4" in text


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.name)
def test_every_object_passes_a_strict_check_against_its_operators_schema(path):
    for document in documents(path):
        assert problems(document) == [], f"{path.name}: {problems(document)}"


@pytest.mark.parametrize(
    ("name", "kind", "path", "value", "found"),
    [
        (
            "trainjob-torch.yaml",
            "TrainingRuntime",
            "spec.mlPolicy.torch",
            {"numProcPerNode": 1},
            "spec.mlPolicy.torch.numProcPerNode: not a field of TrainerV1alpha1TorchMLPolicySource",
        ),
        ("trainjob-torch.yaml", "TrainJob", "spec.trainer", {"numNodes": "two"}, "valid integer"),
        (
            "jobset-tf.yaml",
            "JobSet",
            "spec.network",
            {"subdomian": "x"},
            "spec.network.subdomian: not a field of JobsetV1alpha2Network",
        ),
        (
            "tfjob.yaml",
            "TFJob",
            "spec.runPolicy",
            {"backoffLimit": "0"},
            "spec.runPolicy.backoffLimit: int is expected",
        ),
        (
            "results-pvc.yaml",
            "PersistentVolumeClaim",
            "spec",
            {"accesModes": []},
            "spec.accesModes: not a field of IoK8sApiCoreV1PersistentVolumeClaimSpec",
        ),
    ],
)
def test_the_check_refuses_an_unknown_or_mistyped_field(name, kind, path, value, found):
    (document,) = [doc for doc in documents(REPO / "k8s" / name) if doc["kind"] == kind]
    broken = copy.deepcopy(document)
    node = broken
    for key in path.split("."):
        node = node[key]
    node.update(value)
    assert any(found in line for line in problems(broken)), problems(broken)


def test_every_image_parses_and_the_training_image_is_set_in_one_place():
    kustomization = yaml.safe_load(KUSTOMIZATION.read_text())
    named = {entry["name"] for entry in kustomization["images"]}
    for path in MANIFESTS:
        for node in walk(documents(path)):
            if "image" in node and isinstance(node["image"], str):
                image = node["image"]
                assert IMAGE.fullmatch(image), f"{path.name}: {image!r} is not an image reference"
                unset = f"{path.name}: {image} is neither pinned nor set by k8s/kustomization.yaml"
                assert image in named or ":" in image, unset
    assert {path.name for path in MANIFESTS} >= set(kustomization["resources"])
    for entry in kustomization["images"]:
        assert IMAGE.fullmatch(f"{entry['newName']}:{entry['newTag']}"), entry


RESTARTS = 3  # what every job allows


def commands(document: dict) -> list[list[str]]:
    return [[str(part) for part in node["command"]] for node in walk(document) if "command" in node]


def test_a_group_restarts_whole_and_only_from_its_checkpoints():
    """A lost pod restarts the group at most RESTARTS times, each attempt going on from the run
    volume's newest checkpoint: a JobSet's Job fails at its first failed pod (Never, 0) and the
    JobSet restarts every Job, except for a refusal (exit 2); a TFJob restarts its pods."""
    for path in MANIFESTS:
        for document in documents(path):
            kind, name = document["kind"], path.name
            if kind not in JOBS and kind != "TrainingRuntime":
                continue
            for command in commands(document):
                assert "--auto-resume" in command, (name, command)
                settings = " ".join(command)
                assert "output.run_name=" in settings, (name, "a restart must find its folder")
                assert "train.checkpoint_every_steps=" in settings, (name, "nothing to go on from")
            if kind == "TFJob":
                assert document["spec"]["runPolicy"]["backoffLimit"] == RESTARTS
                for replica in document["spec"]["tfReplicaSpecs"].values():
                    assert replica["restartPolicy"] == "OnFailure", (name, replica)
                continue
            if kind == "TrainJob":
                continue  # its runtime holds the JobSet's template
            jobset = document["spec"] if kind == "JobSet" else document["spec"]["template"]["spec"]
            policy = jobset["failurePolicy"]
            assert policy["maxRestarts"] == RESTARTS, name
            assert {"action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]} in policy[
                "rules"
            ], name
            for job in jobset["replicatedJobs"]:
                spec = job["template"]["spec"]
                assert spec["backoffLimit"] == 0 and spec["template"]["spec"]["restartPolicy"] == (
                    "Never"
                ), name
                (rule,) = spec["podFailurePolicy"]["rules"]
                assert rule["action"] == "FailJob" and rule["onExitCodes"]["values"] == [2], name


def test_every_job_has_a_deadline():
    for path in MANIFESTS:
        for document in documents(path):
            if document["kind"] in JOBS:
                assert "activeDeadlineSeconds" in yaml.safe_dump(document), f"{path.name}"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (its kustomize) not here")
def test_kustomize_renders_each_runtime_before_its_job_with_the_image_set():
    """`kubectl apply -k k8s` applies in this order: a TrainJob whose runtime does not exist
    yet is refused by Trainer's webhook, so the runtime must come first (sortOptions fifo)."""
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(REPO / "k8s")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    kinds = [doc["kind"] for doc in objects]
    assert kinds.index("TrainingRuntime") < kinds.index("TrainJob"), kinds
    (entry,) = yaml.safe_load(KUSTOMIZATION.read_text())["images"]
    images = {node["image"] for doc in objects for node in walk(doc) if "image" in node}
    assert images == {f"{entry['newName']}:{entry['newTag']}"}, images


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.name)
def test_a_manifest_names_only_variables_the_code_reads(path):
    found = documents(path)
    assert found and all("kind" in doc and "apiVersion" in doc for doc in found)
    named = {
        node["name"]
        for doc in found
        for node in walk(doc)
        if "valueFrom" in node
        or ("value" in node and "name" in node and re.fullmatch(r"[A-Z_]+", str(node["name"])))
    }
    # a variable the manifest itself expands into another one's value, $(NAME)
    expanded = {
        name
        for doc in found
        for node in walk(doc)
        if isinstance(node.get("value"), str)
        for name in re.findall(r"\$\(([A-Z_]+)\)", node["value"])
    }
    unread = sorted(name for name in named - expanded if f'"{name}"' not in READERS)
    assert not unread, f"{path.name} sets variables nothing reads: {unread}"
    claims = {node["claimName"] for doc in found for node in walk(doc) if "claimName" in node}
    assert claims <= {"dual-mnist-results"}
