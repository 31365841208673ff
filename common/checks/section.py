"""The one base of every config section: what a section is, declared once."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section (or the config itself): unknown keys are refused, values are frozen
    once checked, and each field's docstring is its description (the reference page and the
    JSON Schema read it)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
