"""Every pydantic error a user can meet, as the one line they see.

- `config_line`: a config that did not validate, in the words of the key and what it accepts
  ("train.epochs must be at least 1, got 0"); pydantic's own words are not meant for a YAML file.
- `record_line`: a metrics record that breaks the schema, naming the file, line and field
  ("metrics.jsonl:3 (epoch): field 'epoch' must be int, got str 'x'").
- `file_line`: any other file checked by a model (a link profile), as "field: problem".

A bound or pattern a config field declares is said by `rules.refusal`, the words of the
reference page.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from common.checks import rules

QUOTED = 200  # characters of a value a line quotes at most
NOT_A_RECORD = "not_a_record"  # the records' union's error: the object's "record" names no kind

# What a config key accepts, by the type of pydantic's error about its value.
CONFIG_EXPECTED = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "int_parsing": "an integer",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "string_type": "a string",
    "float_type": "a number",
    "float_parsing": "a number",
    "tuple_type": "a list, each an integer",  # model.hidden, the one list key
    "list_type": "a list, each an integer",
}
# What a record's field must be, by the type of pydantic's error about it (JSON's types).
RECORD_EXPECTED = {
    "int_type": "int",
    "float_type": "int or float",
    "string_type": "str",
    "bool_type": "bool",
    "list_type": "list",
    "dict_type": "dict",
    "model_type": "object",
    "model_attributes_type": "object",
    "int_from_float": "int",
}


def first_problem(error: ValidationError) -> dict[str, Any]:
    """The first of pydantic's errors: a user fixes one thing at a time."""
    return dict(error.errors(include_url=False)[0])


def quote(value: Any, limit: int = QUOTED) -> str:
    """`repr(value)`, cut to `limit` characters with its length said: a line about a value
    stays one readable line however big the value is."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = len(value) if isinstance(value, (str, bytes, list, dict)) else len(text)
    return f"{text[:limit]}... ({size:,} characters)"


def config_line(error: ValidationError, sections: Mapping[str, type[BaseModel]]) -> str:
    """A config's first problem as one line naming the key, the bad value and what the key
    accepts; `sections`: the config's sections by name."""
    problem = first_problem(error)
    where = [str(part) for part in problem["loc"]]
    kind, value = problem["type"], problem.get("input")
    if kind == "extra_forbidden":
        if len(where) == 1:
            return f"Unknown config section: {where[0]!r}; allowed: {', '.join(sections)}"
        allowed = ", ".join(sections[where[0]].model_fields)
        return f"Unknown config key: {'.'.join(where)}; allowed in {where[0]}: {allowed}"
    said = str(problem.get("ctx", {}).get("error", ""))
    if kind == "value_error" and (not where or said.startswith(tuple(sections))):
        return said  # a check of the config or a section: it names its keys itself
    key = where[0] + "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in where[1:])
    if kind == "value_error":  # a key's own check (a number that is not finite)
        return f"{key}: {said}"
    field = sections[where[0]].model_fields[where[1]] if len(where) > 1 else None
    if kind in rules.CONSTRAINT_ERRORS and field is not None:  # a bound or pattern it declares
        at = "".join(f"[{part}]" for part in where[2:])  # an item of a list key
        return rules.refusal(key.removesuffix(at), field, value, at)
    if kind == "model_type":
        return f"config section {where[0]!r} must be a mapping of keys"
    if kind == "literal_error" and field is not None:
        choices = ", ".join(repr(choice) for choice in typing.get_args(field.annotation))
        return f"{key}: expected one of {choices}, got {value!r}"
    if kind == "string_type" and isinstance(value, bool):
        return (
            f"{key}: expected a string, got {value!r} (YAML reads yes/no/on/off/true/false as "
            "booleans: quote the value)"
        )
    return f"{key}: expected {CONFIG_EXPECTED.get(kind, problem['msg'])}, got {value!r}"


def record_line(
    error: ValidationError, kinds: Mapping[str, type[BaseModel]], raw: Any, where: str
) -> str:
    """A record's first problem as one line: `where` (file, line), the record's kind, the field,
    inside its entry where it is one ("memory[1]: field 'rank'"), and what it must be. `error`:
    pydantic's, from the records' union tagged by `kinds`' names."""
    problem = first_problem(error)
    if problem["type"] == NOT_A_RECORD:  # the union found no kind to check the object by
        if not isinstance(raw, dict):
            return f"{where}: a record is a JSON object, got {type(raw).__name__}"
        return (
            f"{where}: field 'record' is {quote(raw.get('record'))}, expected one of "
            f"{', '.join(kinds)}"
        )
    tag, *loc = problem["loc"]
    return _field_line(problem, list(loc), kinds[str(tag)], raw, f"{where} ({tag})")


def _field_line(
    problem: dict[str, Any], loc: list[Any], kind: type[BaseModel], raw: Any, where: str
) -> str:
    value = problem["input"]
    place, owner = where, kind
    if problem["type"] == "not_null":
        loc.append(problem["ctx"]["name"])
    while len(loc) > 1:  # into an entry: "where memory[1]: field 'rank' ..."
        name, *loc = loc
        owner, raw = _item_kind(owner, str(name)), raw[name]
        if loc and isinstance(loc[0], int):  # an entry of a list
            index, *loc = loc
            place, raw = f"{place} {name}[{index}]", raw[index]
        else:  # an object of its own: "where step_split: field 'wall_s' ..."
            place = f"{place} {name}"
    name = str(loc[0]) if loc else "?"
    if problem["type"] == "not_null":
        value = raw.get(name) if isinstance(raw, dict) else None
    said = f"{place}: field '{name}'"
    error_type = problem["type"]
    if error_type == "missing":
        return f"{said} is missing"
    if error_type == "finite_number":
        return f"{said} is {value}, expected a finite number"
    if error_type == "literal_error":
        choices = typing.get_args(owner.model_fields[name].annotation)
        return f"{said} is {quote(value)}, expected one of {', '.join(map(repr, choices))}"
    if error_type == "not_null":
        annotation = str(owner.model_fields[name].annotation).replace(" | None", "")
        return f"{said} is null, expected {annotation}"
    got = "bool" if isinstance(value, bool) else f"{type(value).__name__} {quote(value)}"
    return f"{said} must be {RECORD_EXPECTED.get(error_type, problem['msg'])}, got {got}"


def file_line(error: ValidationError) -> str:
    """A file's first problem as "field.path: what pydantic says" ("the file" at its top)."""
    problem = first_problem(error)
    field = ".".join(str(part) for part in problem["loc"]) or "the file"
    return f"{field}: {problem['msg']}"


def _item_kind(kind: type[BaseModel], name: str) -> type[BaseModel]:
    """The model of field `name`'s items (a list of entries) or value, else `kind` itself."""
    for arg in getattr(kind.model_fields[name].annotation, "__args__", ()):
        for item in getattr(arg, "__args__", (arg,)):
            if isinstance(item, type) and issubclass(item, BaseModel):
                return item
    return kind
