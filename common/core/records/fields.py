"""How a record's field says what it means (`doc`), and the base every record and entry is built
on: a pydantic model whose fields check their types strictly (a JSON string is not a number, a
bool is not an int), so that the JSON Schema, the checked reader and the docs all come from the
same classes."""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError, PydanticUndefined

DIVERGED = "; NaN or Infinity if it diverged"
READING = "reading a metrics file"  # the validation context of common.core.records.record_json


class Meaning:
    """A field's metadata beyond its type, and how it shows in the JSON Schema. `added`: absent
    from files written before it (read as None; when written, null only if `nullable`).
    `diverges`: NaN and infinity are valid values (a diverged loss); every other float must be
    finite. The values a string may take are its `Literal` type's."""

    def __init__(self, added: bool, nullable: bool, diverges: bool):
        self.added, self.nullable, self.diverges = added, nullable, diverges

    def __call__(self, schema: dict[str, Any]) -> None:
        schema.pop("title", None)
        schema.pop("default", None)
        if self.diverges:
            schema["description"] += DIVERGED
        if self.added and not self.nullable and "anyOf" in schema:
            (kept,) = [part for part in schema.pop("anyOf") if part != {"type": "null"}]
            schema.update(kept)


def doc(
    text: str,
    *,
    added: bool = False,
    nullable: bool = False,
    diverges: bool = False,
    choice: bool = False,
) -> Any:
    """A field with its meaning (see `Meaning`), checked strictly (the items of a list or a
    dict are checked by their own annotation: StrictFloat, a record entry ...)."""
    default: Any = None if added else PydanticUndefined
    return Field(
        default=default,
        description=text,
        strict=None if choice else True,  # a Literal admits its own values only
        allow_inf_nan=True if diverges else None,
        json_schema_extra=Meaning(added, nullable, diverges),
    )


def meaning(kind: type[BaseModel], name: str) -> Meaning:
    extra = kind.model_fields[name].json_schema_extra
    if not isinstance(extra, Meaning):
        raise TypeError(f"{kind.__name__}.{name} is not declared with doc()")
    return extra


class Fields(BaseModel):
    """A record or an entry: frozen, keyword-made, unknown keys in a file ignored (a newer
    suite may add fields), every field checked."""

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _null(cls, raw: Any, info: ValidationInfo) -> Any:
        """Null for a field that cannot be null, only when reading a file (`context=READING`):
        in code, None means unknown, and the record leaves it out."""
        if not isinstance(raw, dict):
            return raw
        for name in cls.model_fields:
            said = meaning(cls, name)
            value = raw.get(name)
            if name not in raw:
                continue
            if info.context == READING and value is None and said.added and not said.nullable:
                raise PydanticCustomError("not_null", "{name} is not null", {"name": name})
        return raw

    @model_serializer(mode="wrap")
    def _known(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The fields as JSON values, less each field added after version 1 whose value is
        unknown (None where null is not one of its values), as in a file written before it."""
        return {
            name: value
            for name, value in handler(self).items()
            if value is not None or not _unknown_is_left_out(type(self), name)
        }


def _unknown_is_left_out(kind: type[BaseModel], name: str) -> bool:
    said = meaning(kind, name)
    return said.added and not said.nullable
