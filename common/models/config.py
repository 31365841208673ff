"""The `model` section of the config: which model, at which size."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, model_validator
from pydantic import StrictStr as Text

from common.models.zoo import MODELS


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


class ModelConfig(BaseModel):
    # unknown keys refused, values frozen, field docstrings are the descriptions
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    name: Text = "mlp"
    """One of `common.models.zoo.MODELS`: mlp (784-128-64-10), cnn (conv32-conv64-maxpool-
    dropout-fc128-fc10, the PyTorch example), resnet8 (3 residual stages with batch
    normalization)."""
    hidden: tuple[StrictInt, ...] = (128, 64)
    """The MLP's hidden widths, e.g. [4096, 4096] (20M parameters), [16384]*5 (1.1B)."""
    width: StrictInt = 1
    """The CNN's and the ResNet's size: their channels and units times this (parameters x
    width^2: CNN 1.2M, ResNet-8 78k)."""
    dropout: StrictBool = True
    """Dropout layers on (rates fixed per model in common.models.zoo) or off (for exact parity);
    the ResNet has none."""

    @model_validator(mode="after")
    def _valid(self) -> Any:
        _check(
            len(self.hidden) >= 1 and all(size >= 1 for size in self.hidden),
            f"model.hidden is a list of one or more widths >= 1, got {list(self.hidden)}",
        )
        _check(self.width >= 1, f"model.width must be >= 1, got {self.width}")
        if self.name not in MODELS:
            raise ValueError(f"model.name={self.name!r}: allowed: {', '.join(MODELS)}")
        sized_by = MODELS[self.name].size_key
        for key in dict.fromkeys(entry.size_key for entry in MODELS.values()):
            if key != sized_by and getattr(self, key) != type(self).model_fields[key].default:
                users = [name for name, entry in MODELS.items() if entry.size_key == key]
                raise ValueError(
                    f"model.{key} sizes {', '.join(users)}; size {self.name} with model.{sized_by}"
                )
        return self
