"""A strict schema check of Kubernetes manifests against the operators' own published API models,
the way `kubeconform -strict` checks a manifest against a CRD: every field must be one the
object's schema declares (the API server drops an unknown one silently), every field the schema
requires must be there (the API server refuses the object without it), and every value must
have the declared type.

The models are the operators' Python packages from PyPI, not copies of their YAML:
- `kubeflow-trainer-api` (Kubeflow Trainer's OpenAPI models, pydantic): TrainingRuntime, TrainJob,
  the JobSet API they build on, and the core objects (Pod, PersistentVolumeClaim);
- `kubeflow-training` (the training operator v1.9's models, on the `kubernetes` client's): TFJob.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from importlib import metadata

from pydantic import BaseModel, ValidationError

PACKAGES = ("kubeflow-trainer-api", "kubeflow-training")


def versions() -> dict[str, str]:
    """The installed version of each package whose models the check uses."""
    return {name: metadata.version(name) for name in PACKAGES}


def root_model(api_version: str, kind: str) -> type | None:
    """The model of a manifest's top-level object, or None for a kind no package describes."""
    from kubeflow.training import models as training
    from kubeflow_trainer_api import models as trainer

    roots = {
        (
            "trainer.kubeflow.org/v1alpha1",
            "TrainingRuntime",
        ): trainer.TrainerV1alpha1TrainingRuntime,
        ("trainer.kubeflow.org/v1alpha1", "TrainJob"): trainer.TrainerV1alpha1TrainJob,
        ("jobset.x-k8s.io/v1alpha2", "JobSet"): trainer.JobsetV1alpha2JobSet,
        ("v1", "Pod"): trainer.IoK8sApiCoreV1Pod,
        ("v1", "PersistentVolumeClaim"): trainer.IoK8sApiCoreV1PersistentVolumeClaim,
        ("kubeflow.org/v1", "TFJob"): training.KubeflowOrgV1TFJob,
    }
    return roots.get((api_version, kind))


# --- the two kinds of generated model: pydantic (Trainer) and the kubernetes client's (TFJob) ---

PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float), "datetime": str}


def _legacy_class(name: str) -> type:
    from kubeflow.training import models as training
    from kubernetes.client import models as core

    found = getattr(training, name, None) or getattr(core, name, None)
    if found is None:
        raise LookupError(f"no model named {name}")
    return found


def _legacy_problems(kind: str, node: object, path: str) -> list[str]:
    """`node` against the kubernetes-client type string `kind` ('V1PodSpec', 'list[V1Container]',
    'dict(str, str)', 'int', 'object')."""
    if node is None or kind == "object":
        return []
    if kind.startswith("list["):
        if not isinstance(node, list):
            return [f"{path}: a list is expected, not {type(node).__name__}"]
        return [
            p
            for i, item in enumerate(node)
            for p in _legacy_problems(kind[5:-1], item, f"{path}[{i}]")
        ]
    if kind.startswith("dict("):
        if not isinstance(node, dict):
            return [f"{path}: a mapping is expected, not {type(node).__name__}"]
        inner = kind[5:-1].split(", ", 1)[1]
        return [
            p for key, item in node.items() for p in _legacy_problems(inner, item, f"{path}.{key}")
        ]
    if kind in PRIMITIVES:
        ok = isinstance(node, PRIMITIVES[kind]) and not (kind == "int" and isinstance(node, bool))
        return [] if ok else [f"{path}: {kind} is expected, not {node!r}"]
    model = _legacy_class(kind)
    if not isinstance(node, dict):
        return [f"{path}: an object ({kind}) is expected, not {node!r}"]
    keys = {key: attribute for attribute, key in model.attribute_map.items()}
    found = [f"{path}.{key}: not a field of {kind}" for key in node if key not in keys]
    found += [
        f"{path}: {model.attribute_map[attribute]!r} is a required property"
        for attribute in _legacy_required(kind)
        if model.attribute_map[attribute] not in node
    ]
    for key, value in node.items():
        if key in keys:
            found += _legacy_problems(model.openapi_types[keys[key]], value, f"{path}.{key}")
    return found


@functools.cache
def _legacy_required(kind: str) -> tuple[str, ...]:
    """The attributes a kubernetes-client model requires: the generator writes a setter that
    refuses None for each ("Invalid value for `name`, must not be `None`")."""
    source = inspect.getsource(_legacy_class(kind))
    return tuple(re.findall(r"Invalid value for `(\w+)`, must not be `None`", source))


def _models_in(annotation: object) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through Optional, List, Dict, Union)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]


def _field_problems(model: type[BaseModel], node: object, path: str) -> list[str]:
    """Every key of `node` (and below) that its pydantic model does not declare."""
    if isinstance(node, list):
        return [
            p for i, item in enumerate(node) for p in _field_problems(model, item, f"{path}[{i}]")
        ]
    if not isinstance(node, dict):
        return []
    if "actual_instance" in model.model_fields:  # a oneOf of scalars (Quantity, IntOrString)
        return []
    fields = {field.alias or name: field for name, field in model.model_fields.items()}
    found = [
        f"{path}: {key!r} is a required property"
        for key, field in fields.items()
        if field.is_required() and key not in node
    ]
    for key, value in node.items():
        if key not in fields:
            found.append(f"{path}.{key}: not a field of {model.__name__}")
            continue
        annotation = fields[key].annotation
        inner = _models_in(annotation)
        origin = typing.get_origin(annotation)
        args = typing.get_args(annotation)
        mapping = origin is dict or any(typing.get_origin(a) is dict for a in args)
        if inner and mapping and isinstance(value, dict):
            for sub, item in value.items():
                found += _field_problems(inner[0], item, f"{path}.{key}.{sub}")
        elif inner:
            found += _field_problems(inner[0], value, f"{path}.{key}")
    return found


def problems(document: dict) -> list[str]:
    """What a strict check finds in one manifest document: unknown kinds, unknown fields, missing
    required fields and values of the wrong type, each as 'path: what'."""
    model = root_model(document.get("apiVersion", ""), document.get("kind", ""))
    if model is None:
        return [f"{document.get('apiVersion')}/{document.get('kind')}: no schema for this kind"]
    if not issubclass(model, BaseModel):
        return _legacy_problems(model.__name__, document, document["kind"])
    found = _field_problems(model, document, document["kind"])
    try:  # the package's own parser: it also reads the oneOfs (a quantity: "10Gi" or 2)
        model.from_dict(document)
    except ValidationError as error:
        for item in error.errors():
            where = ".".join(str(part) for part in item["loc"])
            found.append(f"{document['kind']}.{where}: {item['msg']}")
    except ValueError as error:  # a oneOf that matched none of its schemas
        found.append(f"{document['kind']}: {str(error).splitlines()[0]}")
    return found


# A reference to an image as the container runtimes parse it: lower-case path components, an
# optional registry with a port, then a tag or a digest (distribution/reference's grammar).
COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE = re.compile(
    rf"(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?{COMPONENT}(?:/{COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?"
)
