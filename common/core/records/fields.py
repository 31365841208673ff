"""How a record's field says what it means (`doc`): the metadata the JSON Schema, the checked
reader and the docs are generated from."""

from __future__ import annotations

from dataclasses import MISSING, field
from typing import Any


def doc(
    text: str,
    *,
    added: bool = False,
    nullable: bool = False,
    diverges: bool = False,
    choices: tuple[str, ...] = (),
) -> Any:
    """A field with its meaning. `added`: absent from files written before it (read as None;
    when written, null only if `nullable`). `diverges`: NaN and infinity are valid values (a
    diverged loss); every other float must be finite. `choices`: the values a string may take."""
    meta = {
        "doc": text,
        "added": added,
        "nullable": nullable,
        "diverges": diverges,
        "choices": choices,
    }
    return field(default=None if added else MISSING, metadata=meta)
