"""The `model` section of the config: which model, at which size."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictInt, field_validator, model_validator
from pydantic import StrictStr as Text

from common.checks.rules import Says, require
from common.checks.section import Section
from common.models.zoo import MODELS, blocks, describe


def _names() -> str:
    """model.name's description, from the registry: a new model shows without an edit here."""
    listed = "; ".join(f"{name}: {entry.summary}" for name, entry in MODELS.items())
    return f"One of `common.models.zoo.MODELS`: {listed}."


class ModelConfig(Section):
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

    activation_checkpointing: Literal["none", "blocks"] = "none"
    """none, or blocks: each residual block's activations are dropped after its forward and
    recomputed in the backward (torch.utils.checkpoint on the block, the unit FSDP wraps;
    TensorFlow's tf.recompute_grad): less memory for a second forward of the blocks. Only
    models with residual blocks (resnet8); the loss is unchanged."""

    @field_validator("name")
    @classmethod
    def _registered(cls, name: str) -> str:
        """A model of the registry (its error names them all)."""
        require(name in MODELS, f"model.name={name!r}: allowed: {', '.join(MODELS)}")
        return name

    @model_validator(mode="after")
    def _sized_by_its_own_key(self) -> Any:
        """Each model is sized by its own key; the others stay at their defaults."""
        sized_by = MODELS[self.name].size_key
        for key in dict.fromkeys(entry.size_key for entry in MODELS.values()):
            users = [name for name, entry in MODELS.items() if entry.size_key == key]
            require(
                key == sized_by or getattr(self, key) == type(self).model_fields[key].default,
                f"model.{key} sizes {', '.join(users)}; size {self.name} with model.{sized_by}",
            )
        return self

    @model_validator(mode="after")
    def _blocks_to_checkpoint(self) -> Any:
        """Checkpointing needs blocks: a model without them is refused, not run unchanged."""
        if self.activation_checkpointing == "none" or blocks(describe(self)):
            return self
        with_blocks = [
            name for name in MODELS if blocks(describe(type(self).model_construct(name=name)))
        ]
        raise ValueError(
            f"model.activation_checkpointing={self.activation_checkpointing}: {self.name} has "
            f"no blocks to checkpoint (models with residual blocks: {', '.join(with_blocks)}); "
            "set model.activation_checkpointing=none"
        )
