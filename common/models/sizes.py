"""Named model sizes for the size axis: presets and widths written `4096x4096` for the MLP,
`w<N>` for the CNN's width multiplier, `<model>:w<N>` for any model sized by model.width
(`resnet8:w4`); each becomes a `ModelConfig` and its `--set` overrides."""

from __future__ import annotations

from common.models import zoo
from common.models.config import ModelConfig

# MLP hidden widths for round parameter counts (common.models.weights.parameter_count):
PRESETS: dict[str, tuple[int, ...]] = {
    "0.1M": (128, 64),  # the seed MLP, 109,386
    "10M": (2816, 2816),  # 10,171,402
    "100M": (5632,) * 4,  # 99,652,618
    "300M": (6144,) * 9,  # 306,923,530
    "1B": (16384,) * 5,  # 1,086,832,650
}


def _width(text: str) -> int | None:
    """N of "w<N>" (N >= 1), else None."""
    digits = text[1:]
    return int(digits) if text.startswith("w") and digits.isdigit() and int(digits) else None


def size_model(size: str) -> ModelConfig:
    """The model of one size. Raises ValueError naming the accepted forms."""
    if size in PRESETS:
        return ModelConfig(name="mlp", hidden=PRESETS[size])
    name, _, width = size.rpartition(":")
    sized = [n for n, entry in zoo.MODELS.items() if entry.size_key == "width"]
    if _width(width) and (name in sized or not name):
        return ModelConfig(name=name or "cnn", width=_width(width) or 1)
    widths = size.split("x")
    if all(width.isdigit() and int(width) >= 1 for width in widths):
        return ModelConfig(name="mlp", hidden=tuple(int(width) for width in widths))
    raise ValueError(
        f"size {size!r}: give a preset ({', '.join(PRESETS)}), MLP hidden widths such as "
        f"4096x4096, w<N> for the CNN's width multiplier, or <model>:w<N> for "
        f"{', '.join(sized)}"
    )


def size_overrides(size: str) -> list[str]:
    """The `--set` overrides of one size."""
    model = size_model(size)
    if zoo.MODELS[model.name].size_key == "width":
        return [f"model.name={model.name}", f"model.width={model.width}"]
    return ["model.name=mlp", f"model.hidden=[{', '.join(map(str, model.hidden))}]"]
