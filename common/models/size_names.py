"""Named model sizes for the size axis: presets and widths written `4096x4096` for the MLP,
`w<N>` for the CNN's width multiplier, and `<model>:<letter><N>` for any model sized by an
integer key, the key's first letter (`resnet8:w4` sets model.width=4); each becomes a
`ModelConfig` and its `--set` overrides. The forms come from the model registry
(`common.models.zoo.MODELS`, each entry's `size_key`)."""

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
BARE = "cnn"  # the model a bare `w<N>` sizes


def _integer_sized() -> dict[str, str]:
    """Model name -> its integer size key, for the models sized by one."""
    fields = ModelConfig.model_fields
    return {
        name: entry.size_key
        for name, entry in zoo.MODELS.items()
        if isinstance(fields[entry.size_key].default, int)
    }


def _number(text: str, letter: str) -> int | None:
    """N of "<letter><N>" (N >= 1), else None."""
    digits = text[1:]
    return int(digits) if text[:1] == letter and digits.isdigit() and int(digits) else None


def size_model(size: str) -> ModelConfig:
    """The model of one size. Raises ValueError naming the accepted forms."""
    if size in PRESETS:
        return ModelConfig(name="mlp", hidden=PRESETS[size])
    sized = _integer_sized()
    name, _, amount = size.rpartition(":")
    name = name or BARE
    if name in sized and (number := _number(amount, sized[name][0])):
        return ModelConfig.model_validate({"name": name, sized[name]: number})
    widths = size.split("x")
    if all(width.isdigit() and int(width) >= 1 for width in widths):
        return ModelConfig(name="mlp", hidden=tuple(int(width) for width in widths))
    forms = ", ".join(f"{model}:{key[0]}<N> (model.{key})" for model, key in sized.items())
    raise ValueError(
        f"size {size!r}: give a preset ({', '.join(PRESETS)}), MLP hidden widths such as "
        f"4096x4096, w<N> for the CNN's width multiplier, or one of {forms}"
    )


def size_overrides(size: str) -> list[str]:
    """The `--set` overrides of one size."""
    model = size_model(size)
    key = zoo.MODELS[model.name].size_key
    value = getattr(model, key)
    text = f"[{', '.join(map(str, value))}]" if isinstance(value, tuple) else str(value)
    return [f"model.name={model.name}", f"model.{key}={text}"]
