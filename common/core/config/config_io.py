"""Build a `Config` from a YAML preset plus dotted `--set section.key=value` overrides.

Unknown sections or keys and values of the wrong type are refused with a ValueError that names
the key and what it accepts. The resolved config is written into every run folder, and its
hash (of the canonical JSON form) identifies runs that used the same settings.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from common.core.config.config import Config

CONFIG_FILENAME = "config.yaml"


def _describe(tp: Any) -> str:
    """How a type annotation reads in an error message."""
    if typing.get_origin(tp) is typing.Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(tp))
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return " or ".join(_describe(arg) for arg in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if typing.get_origin(tp) is tuple:
        return f"a list, each {_describe(typing.get_args(tp)[0])}"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        tp, str(tp)
    )


def _as_float(value: Any) -> float | None:
    """A number, or a string of one in any form Python reads ("1e-3", "1E4", "2.5e+2"); YAML
    1.1, PyYAML's resolver, reads exponents without a dot as strings. None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _check_value(key: str, value: Any, tp: Any) -> Any:
    """Return `value` as type `tp`, or raise ValueError naming `key` and the allowed values."""
    if typing.get_origin(tp) is typing.Literal:
        if value in typing.get_args(tp) and isinstance(value, str):
            return value
    elif isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        for option in typing.get_args(tp):
            try:
                return _check_value(key, value, option)
            except ValueError:
                continue
    elif tp is type(None):
        if value is None:
            return None
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        number = _as_float(value)
        if number is not None:
            if not math.isfinite(number):
                raise ValueError(f"{key}: expected a finite number, got {value!r}")
            return number
    elif tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, bool):
            raise ValueError(
                f"{key}: expected a string, got {value!r} (YAML reads yes/no/on/off/true/false "
                "as booleans: quote the value)"
            )
    elif typing.get_origin(tp) is tuple:  # tuple[T, ...]: a YAML list
        if isinstance(value, (list, tuple)):
            (item,) = (arg for arg in typing.get_args(tp) if arg is not Ellipsis)
            return tuple(_check_value(f"{key}[{i}]", v, item) for i, v in enumerate(value))
    else:
        raise TypeError(f"config field {key} has an unsupported annotation {tp!r}")
    raise ValueError(f"{key}: expected {_describe(tp)}, got {value!r}")


def _section_types(section_cls: type) -> dict[str, Any]:
    return typing.get_type_hints(section_cls)


def _sections() -> dict[str, type]:
    return typing.get_type_hints(Config)


def from_dict(raw: Mapping[str, Any]) -> Config:
    """Build a validated Config from nested mappings (as parsed from YAML)."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"a config is a mapping of sections, got {type(raw).__name__}")
    sections = _sections()
    built = {}
    for section_name, values in raw.items():
        if section_name not in sections:
            raise ValueError(
                f"Unknown config section: {section_name!r}; allowed: {', '.join(sections)}"
            )
        if values is None:
            values = {}
        if not isinstance(values, Mapping):
            raise ValueError(f"config section {section_name!r} must be a mapping of keys")
        fields = _section_types(sections[section_name])
        checked = {}
        for key, value in values.items():
            dotted = f"{section_name}.{key}"
            if key not in fields:
                raise ValueError(
                    f"Unknown config key: {dotted}; allowed in {section_name}: " + ", ".join(fields)
                )
            checked[key] = _check_value(dotted, value, fields[key])
        built[section_name] = sections[section_name](**checked)
    return Config(**built)


def to_dict(cfg: Config) -> dict[str, Any]:
    """Plain data (tuples become lists) for YAML, JSON and the hash."""
    return dataclasses.asdict(cfg, dict_factory=lambda items: {k: _plain(v) for k, v in items})


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


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
    return kind is not None and _section_types(kind).get(key) is str


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


def canonical_json(cfg: Config) -> str:
    return json.dumps(to_dict(cfg), sort_keys=True, separators=(",", ":"))


def config_hash(cfg: Config) -> str:
    """Stable across processes, machines and key order: sha256 of the canonical JSON, 12 hex."""
    return hashlib.sha256(canonical_json(cfg).encode()).hexdigest()[:12]


def save_config(cfg: Config, run_dir: str | Path) -> Path:
    """Write the resolved config (every field, defaults included) into the run folder."""
    path = Path(run_dir) / CONFIG_FILENAME
    header = f"# resolved config, hash {config_hash(cfg)}\n"
    path.write_text(header + yaml.safe_dump(to_dict(cfg), sort_keys=False))
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
