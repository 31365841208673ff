"""Build a `Config` from a YAML preset plus dotted `--set section.key=value` overrides.

Unknown sections or keys and values of the wrong type are refused with a ValueError that names
the key and what it accepts. The resolved config is written into every run folder, and its
hash (of the canonical JSON form) identifies runs that used the same settings.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from common.checks import error_lines
from common.core import whole_files
from common.core.config.config import Config

CONFIG_FILENAME = "config.yaml"


def _sections() -> dict[str, type[BaseModel]]:
    """The config's sections by name, each a pydantic model."""
    return {
        name: info.annotation
        for name, info in Config.model_fields.items()
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
    }


def from_dict(raw: Mapping[str, Any]) -> Config:
    """Build a validated Config from nested mappings (as parsed from YAML)."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"a config is a mapping of sections, got {type(raw).__name__}")
    try:
        return Config.model_validate({name: values or {} for name, values in raw.items()})
    except ValidationError as error:
        raise ValueError(error_lines.config_line(error, _sections())) from None


def to_dict(cfg: Config) -> dict[str, Any]:
    """Plain data (tuples become lists) for YAML, JSON and the hash."""
    return cfg.model_dump(mode="json")


def flatten(config: object, prefix: str = "") -> dict[str, Any]:
    """{"train": {"epochs": 3}} -> {"train.epochs": 3}; whatever a file holds (a value that is
    not a mapping stands for itself)."""
    if not isinstance(config, Mapping):
        return {prefix.rstrip("."): config} if prefix else {}
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _is_text(section: str, key: str) -> bool:
    """Whether config key section.key holds free text (a name, a path)."""
    kind = _sections().get(section)
    field = kind.model_fields.get(key) if kind is not None else None
    return field is not None and field.annotation is str


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply `section.key=value` strings; the value is parsed as a YAML scalar (0.5, true, null)."""
    merged = {name: dict(values or {}) for name, values in raw.items()}
    for override in overrides:
        dotted, sep, text = override.partition("=")
        parts = dotted.strip().split(".")
        if not sep or len(parts) != 2 or not all(parts):
            raise ValueError(
                f"override {override!r} must look like section.key=value (e.g. optim.lr=0.01)"
            )
        try:
            if _is_text(parts[0], parts[1]):  # as typed: run names like "on" or "1e3"
                value: Any = text
            else:
                value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as error:
            raise ValueError(f"override {override!r}: cannot parse value: {error}") from None
        merged.setdefault(parts[0], {})[parts[1]] = value
    return merged


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last
    one silently, so a preset could say two things and mean one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ValueError(
                    f"key {key!r} is given twice, on lines {seen[key]} and {line}: keep one"
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _UniqueKeyLoader.construct_mapping
)


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> Config:
    """Read a YAML preset (or start from defaults), apply overrides, validate."""
    raw: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"config file {path} does not exist (presets are in configs/)")
        try:
            raw = yaml.load(path.read_text(), Loader=_UniqueKeyLoader) or {}  # noqa: S506
        except yaml.YAMLError as error:
            raise ValueError(f"config file {path} is not valid YAML: {error}") from None
        except ValueError as error:
            raise ValueError(f"config file {path}: {error}") from None
        if not isinstance(raw, dict):
            raise ValueError(f"config file {path} must hold a mapping of sections")
    try:
        from_dict(raw)
    except ValueError as error:  # the preset alone is wrong: say so
        raise ValueError(f"{error} (in {path})") from None
    try:
        return from_dict(apply_overrides(raw, overrides))
    except ValueError as error:  # the preset was fine, so an override made it wrong
        raise ValueError(f"{error} (after --set {' '.join(overrides)})") from None


# Keys added after the hash was first published: left out of the hash while at their default,
# so that a config that sets nothing new keeps the hash it always had.
ADDED_KEYS = {
    "output.tensorboard": False,
    "train.steps_per_call": 1,
    "train.checkpoint_every_steps": 0,
    "output.profile_steps": 0,
    "train.accumulation_steps": 1,
    "model.activation_checkpointing": "none",
    "output.split_steps": 1,
}


def canonical_json(cfg: Config) -> str:
    plain = to_dict(cfg)
    for dotted, default in ADDED_KEYS.items():
        section, key = dotted.split(".")
        if plain[section].get(key) == default:
            del plain[section][key]
    return json.dumps(plain, sort_keys=True, separators=(",", ":"))


def config_hash(cfg: Config) -> str:
    """Stable across processes, machines and key order: sha256 of the canonical JSON, 12 hex."""
    return hashlib.sha256(canonical_json(cfg).encode()).hexdigest()[:12]


def save_config(cfg: Config, run_dir: str | Path) -> Path:
    """Write the resolved config (every field, defaults included) into the run folder."""
    path = Path(run_dir) / CONFIG_FILENAME
    header = f"# resolved config, hash {config_hash(cfg)}\n"
    whole_files.write_text(path, header + yaml.safe_dump(to_dict(cfg), sort_keys=False))
    return path


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML preset (see configs/)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one config value, e.g. --set optim.lr=0.01 (repeatable)",
    )


def config_from_args(args: argparse.Namespace) -> Config:
    return load_config(args.config, args.overrides)
