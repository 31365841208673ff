"""The `model` section of the config: which model, at which size."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelConfig:
    name: Literal["mlp", "cnn"] = "mlp"
    """mlp: 784-128-64-10; cnn: conv32-conv64-maxpool-dropout-fc128-fc10 (the PyTorch example)."""
    hidden: tuple[int, ...] = (128, 64)
    """The MLP's hidden widths, e.g. [4096, 4096] (20M parameters), [16384]*5 (1.1B)."""
    width: int = 1
    """The CNN's size: conv channels and fc1 units times this (1.2M parameters x width^2)."""
    dropout: bool = True
    """Dropout layers on (rates fixed per model in common.models) or off (for exact parity)."""

    def __post_init__(self) -> None:
        _check(
            len(self.hidden) >= 1 and all(size >= 1 for size in self.hidden),
            f"model.hidden is a list of one or more widths >= 1, got {list(self.hidden)}",
        )
        _check(self.width >= 1, f"model.width must be >= 1, got {self.width}")
        if self.name == "cnn" and self.hidden != (128, 64):
            raise ValueError("model.hidden sizes the MLP; size the CNN with model.width")
        if self.name == "mlp" and self.width != 1:
            raise ValueError("model.width sizes the CNN; size the MLP with model.hidden")
