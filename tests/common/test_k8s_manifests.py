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
KUSTOMIZATIONS = {  # each cluster's, and the image's, set once for both
    "trainer": REPO / "k8s",
    "operator-v1": REPO / "k8s" / "operator-v1",
}
IMAGE_COMPONENT = REPO / "k8s" / "image" / "kustomization.yaml"
MANIFESTS = sorted(
    path for path in (REPO / "k8s").rglob("*.yaml") if path.name != "kustomization.yaml"
)
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


def test_the_check_refuses_a_missing_required_field():
    """A JobSet's failure-policy rule needs its `name` (the CRD requires it; the API models'
    from_dict fills in '' and would not say)."""
    (document,) = documents(REPO / "k8s" / "jobset-tf.yaml")
    broken = copy.deepcopy(document)
    del broken["spec"]["failurePolicy"]["rules"][0]["name"]
    assert problems(broken) == ["JobSet.spec.failurePolicy.rules[0]: 'name' is a required property"]
    (tfjob,) = documents(REPO / "k8s" / "operator-v1" / "tfjob.yaml")
    del tfjob["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]["name"]
    assert problems(tfjob) == [
        "TFJob.spec.tfReplicaSpecs.Chief.template.spec.containers[0]: 'name' is a required property"
    ]


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
    (path_of,) = [path for path in MANIFESTS if path.name == name]
    (document,) = [doc for doc in documents(path_of) if doc["kind"] == kind]
    broken = copy.deepcopy(document)
    node = broken
    for key in path.split("."):
        node = node[key]
    node.update(value)
    assert any(found in line for line in problems(broken)), problems(broken)


def test_every_image_parses_and_the_training_image_is_set_in_one_place():
    component = yaml.safe_load(IMAGE_COMPONENT.read_text())
    named = {entry["name"] for entry in component["images"]}
    for path in MANIFESTS:
        for node in walk(documents(path)):
            if "image" in node and isinstance(node["image"], str):
                image = node["image"]
                assert IMAGE.fullmatch(image), f"{path.name}: {image!r} is not an image reference"
                unset = f"{path.name}: {image} is neither pinned nor set by k8s/kustomization.yaml"
                assert image in named or ":" in image, unset
    for entry in component["images"]:
        assert IMAGE.fullmatch(f"{entry['newName']}:{entry['newTag']}"), entry
    for folder in KUSTOMIZATIONS.values():
        kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
        assert kustomization["components"] in (["image"], ["../image"]), folder


RESTARTS = 3  # the group recoveries every job allows


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
            if kind == "TFJob":  # the operator sums its running pods' restart counts
                pods = sum(r["replicas"] for r in document["spec"]["tfReplicaSpecs"].values())
                assert document["spec"]["runPolicy"]["backoffLimit"] == pods * RESTARTS + 1
                for replica in document["spec"]["tfReplicaSpecs"].values():
                    assert replica["restartPolicy"] == "OnFailure", (name, replica)
                continue
            if kind == "TrainJob":
                continue  # its runtime holds the JobSet's template
            jobset = document["spec"] if kind == "JobSet" else document["spec"]["template"]["spec"]
            policy = jobset["failurePolicy"]
            assert policy["maxRestarts"] == RESTARTS, name
            reasons = {
                reason
                for rule in policy["rules"]
                if rule["action"] == "FailJobSet"
                for reason in rule["onJobFailureReasons"]
            }
            assert {"PodFailurePolicy", "DeadlineExceeded"} <= reasons, name
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
@pytest.mark.parametrize("cluster", KUSTOMIZATIONS)
def test_kustomize_renders_each_runtime_before_its_job_with_the_image_set(cluster):
    """`kubectl apply -k k8s` applies in this order: a TrainJob whose runtime does not exist
    yet is refused by Trainer's webhook, so the runtime must come first (sortOptions fifo).
    Each cluster's kustomization sets the one image of k8s/image/."""
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(KUSTOMIZATIONS[cluster])],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    kinds = [doc["kind"] for doc in objects]
    assert "PersistentVolumeClaim" in kinds, kinds
    if cluster == "trainer":
        assert kinds.index("TrainingRuntime") < kinds.index("TrainJob"), kinds
    else:
        assert kinds == ["PersistentVolumeClaim", "TFJob"], kinds
    (entry,) = yaml.safe_load(IMAGE_COMPONENT.read_text())["images"]
    images = {node["image"] for doc in objects for node in walk(doc) if "image" in node}
    assert images == {f"{entry['newName']}:{entry['newTag']}"}, images


def test_every_header_applies_its_manifest_through_a_kustomization():
    """`kubectl apply -f` of a manifest skips the kustomization, and its image then resolves to
    docker.io/library/dual-dist-mnist: every manifest of the training image says `-k`."""
    for path in MANIFESTS:
        text = path.read_text()
        header = text[: text.index("apiVersion:")]
        if "dual-dist-mnist" in text:
            assert "kubectl apply -k k8s/" in header, path.name
            assert "apply -f" not in header, path.name


def test_a_run_is_named_per_submission_and_kept_through_restarts():
    """The JobSets (the TrainJob's too) name the run after the JobSet's uid, which its restarts
    keep; the TFJob after RUN_NAME, said to change per submission."""
    for path in MANIFESTS:
        for document in documents(path):
            if document["kind"] not in JOBS:
                continue
            for command in commands(document):
                (name,) = [part for part in command if part.startswith("output.run_name=")]
                if document["kind"] == "TFJob":
                    assert name == "output.run_name=$(RUN_NAME)", path.name
                else:
                    assert name.endswith("-$(JOBSET_UID)"), (path.name, name)
            text = yaml.safe_dump(document)
            assert ("jobset.sigs.k8s.io/jobset-uid" in text) == (document["kind"] != "TFJob")


def test_every_container_requests_and_limits_its_cpu_and_memory():
    """A namespace with a ResourceQuota refuses a pod that does not. A TrainingRuntime's node
    takes its TrainJob's resourcesPerNode."""
    for path in MANIFESTS:
        for document in documents(path):
            if document["kind"] == "TrainingRuntime":
                continue
            if document["kind"] == "TrainJob":
                found = [document["spec"]["trainer"]["resourcesPerNode"]]
            else:
                found = [node["resources"] for node in walk(document) if "image" in node]
            for resources in found:
                for side in ("requests", "limits"):
                    assert {"cpu", "memory"} <= set(resources.get(side, {})), (path.name, side)


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
    # a variable the manifest itself expands, $(NAME), in another one's value or a command
    expanded = {
        name
        for doc in found
        for node in walk(doc)
        for text in [node.get("value"), *node.get("command", [])]
        if isinstance(text, str)
        for name in re.findall(r"\$\(([A-Z_]+)\)", text)
    }
    unread = sorted(name for name in named - expanded if f'"{name}"' not in READERS)
    assert not unread, f"{path.name} sets variables nothing reads: {unread}"
    claims = {node["claimName"] for doc in found for node in walk(doc) if "claimName" in node}
    assert claims <= {"dual-mnist-results"}
