"""The `model` section of the config: which model, at which size."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, model_validator
from pydantic import StrictStr as Text

from common.checks.rules import Says, require
from common.models.zoo import MODELS


def _names() -> str:
    """model.name's description, from the registry: a new model shows without an edit here."""
    listed = "; ".join(f"{name}: {entry.summary}" for name, entry in MODELS.items())
    return f"One of `common.models.zoo.MODELS`: {listed}."


class ModelConfig(BaseModel):
    # unknown keys refused, values frozen, field docstrings are the descriptions
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    name: Text = Field(default="mlp", description=_names())
    hidden: Annotated[
        tuple[Annotated[StrictInt, Field(ge=1)], ...],
        Field(min_length=1),
        Says("is a list of one or more widths, each at least 1"),
    ] = (128, 64)
    """The MLP's hidden widths, e.g. [4096, 4096] (20M parameters), [16384]*5 (1.1B)."""
    width: Annotated[StrictInt, Field(ge=1)] = 1
    """The CNN's and the ResNet's size: their channels and units times this (parameters x
    width^2: CNN 1.2M, ResNet-8 78k)."""
    dropout: StrictBool = True
    """Dropout layers on (rates fixed per model in common.models.zoo) or off (for exact parity);
    the ResNet has none."""

    @model_validator(mode="after")
    def _valid(self) -> Any:
        """A registered model, sized by its own key (a rule between keys)."""
        require(self.name in MODELS, f"model.name={self.name!r}: allowed: {', '.join(MODELS)}")
        sized_by = MODELS[self.name].size_key
        for key in dict.fromkeys(entry.size_key for entry in MODELS.values()):
            users = [name for name, entry in MODELS.items() if entry.size_key == key]
            require(
                key == sized_by or getattr(self, key) == type(self).model_fields[key].default,
                f"model.{key} sizes {', '.join(users)}; size {self.name} with model.{sized_by}",
            )
        return self
