"""The model-size axis without a framework: sizes, layer-by-layer weights, synthetic data,
and the series compare.py draws."""

import numpy as np
import pytest

from common.core.config import config_io
from common.data import mnist, synthetic
from common.data.config import DataConfig
from common.models import layouts, size_names, weights, zoo
from common.models.config import ModelConfig
from common.report import size_table as size_axis
from common.report.render import tables
from common.report.runs import RecordedRun
from tests import reference
from tests.records import epoch, start
from tests.reference import net


def test_named_sizes_have_the_parameter_counts_they_say():
    counted = {name: size_params(name) for name in size_names.PRESETS}
    assert counted["0.1M"] == weights.parameter_count(net("mlp")) == 109_386
    assert counted["10M"] == 10_171_402 and counted["100M"] == 99_652_618
    assert counted["300M"] == 306_923_530 and counted["1B"] == 1_086_832_650
    # by hand: 784*301 + 301 + 301*203 + 203 + 203*10 + 10
    assert size_params("301x203") == (784 * 301 + 301) + (301 * 203 + 203) + 2_040
    cnn = weights.parameter_count(net("cnn", width=2))
    assert (
        cnn
        == size_params("w2")
        == (9 * 64 + 64) + (9 * 64 * 128 + 128) + (128 * 144 * 256 + 256) + (256 * 10 + 10)
    )
    assert size_params("resnet8:w2") == weights.parameter_count(net("resnet8", width=2))
    assert size_names.size_overrides("resnet8:w2") == ["model.name=resnet8", "model.width=2"]


@pytest.mark.parametrize("bad", ["", "12Q", "4096x", "w0", "0x10", "mlp:w2", "resnet8:2"])
def test_a_size_that_means_nothing_is_refused_with_the_forms(bad):
    with pytest.raises(
        ValueError, match=r"preset .* 4096x4096, w<N> .* cnn:w<N> \(model.width\), resnet8:w<N>"
    ):
        size_names.size_overrides(bad)


def test_model_size_keys_are_checked_where_they_are_set():
    cfg = config_io.load_config(None, ["model.hidden=[4096, 4096]"])
    assert cfg.model.hidden == (4096, 4096)
    assert config_io.to_dict(cfg)["model"]["hidden"] == [4096, 4096]  # YAML and JSON lists
    for override, message in (
        ("model.hidden=[]", "one or more widths"),
        ("model.hidden=[64, 0]", "one or more widths"),
        ("model.hidden=64", "model.hidden: expected a list, each an integer"),
        ("model.hidden=[1.5]", r"model.hidden\[0\]: expected an integer"),
        ("model.width=2", "size mlp with model.hidden"),
    ):
        with pytest.raises(ValueError, match=message):
            config_io.load_config(None, [override])
    for name in ("cnn", "resnet8"):
        with pytest.raises(ValueError, match=f"size {name} with model.width"):
            config_io.load_config(None, [f"model.name={name}", "model.hidden=[8]"])


def test_weights_drawn_in_pieces_equal_the_weights_drawn_at_once(monkeypatch):
    model = net(hidden=(301, 203))
    at_once = reference.initial_weights(model, seed=3)
    monkeypatch.setattr(weights, "CHUNK", 1000)  # fc1 (235,984 values) in 236 pieces
    in_pieces = reference.initial_weights(model, seed=3)
    assert all(np.array_equal(at_once[name], in_pieces[name]) for name in at_once)
    # and the seed-size layers are the very values the project always drew
    seed_mlp = reference.initial_weights(net("mlp"), 0)
    assert np.array_equal(
        seed_mlp["fc1.weight"],
        reference.initial_weights(zoo.describe(ModelConfig()), 0)["fc1.weight"],
    )


@pytest.mark.parametrize(
    "model",
    [net(hidden=(96, 80, 64)), net("cnn", width=2), net("resnet8", width=2)],
    ids=["mlp", "cnn", "resnet8"],
)
def test_a_resized_model_keeps_torch_and_keras_layouts_equal(model, digits):
    canonical = reference.initial_weights(model, seed=0)
    images = mnist.normalize(digits.test_images[:4])
    torch_logits = reference.forward(model, reference.to_torch(canonical), images, "torch")
    keras_logits = reference.forward(model, layouts.to_keras(model, canonical), images, "keras")
    np.testing.assert_allclose(keras_logits, torch_logits, rtol=0, atol=1e-12)
    back = layouts.from_keras(model, layouts.to_keras(model, canonical))
    assert all(np.array_equal(back[name], canonical[name]) for name in canonical)


def test_synthetic_data_is_fixed_learnable_and_cut_like_mnist():
    full = mnist.load_limited(DataConfig(name="synthetic"))
    again = mnist.load_limited(DataConfig(name="synthetic", train_limit=500, test_limit=50))
    assert full.train_images.shape == (60_000, 28, 28) and full.test_images.shape == (
        10_000,
        28,
        28,
    )
    assert full.train_images.dtype == np.uint8 and full.train_labels.dtype == np.int64
    assert np.array_equal(again.train_images, full.train_images[:500])
    assert np.array_equal(again.test_labels, full.test_labels[:50])
    assert not np.array_equal(full.train_images[:100], full.test_images[:100])
    counts = np.bincount(full.train_labels, minlength=10)
    assert counts.min() > 0.09 * 60_000 and counts.max() < 0.11 * 60_000  # balanced classes
    # learnable: matching each test image against the class templates finds its label
    patterns = synthetic.templates().astype(np.float64) * 2 / 127 - 1  # +1 on, -1 off
    centred = full.test_images.reshape(-1, 784).astype(np.float64) - 63.5  # the noise's mean
    assert np.array_equal((centred @ patterns.T).argmax(axis=1), full.test_labels)
    # fixed bytes, whatever the platform: a digest of the first images, measured once
    assert int(full.train_images[:8].astype(np.int64).sum()) == 794_848
    assert full.train_labels[:10].tolist() == [7, 9, 9, 0, 7, 7, 8, 7, 6, 5]


def _sized_run(name: str, hidden: list[int], samples_per_s: float) -> RecordedRun:
    cfg = config_io.load_config(None, [f"model.hidden={hidden}"])
    epochs = []
    for number in (1, 2):
        record = epoch(number, 0.5, 2.0 * number)
        memory = [
            entry.model_copy(update={"baseline_bytes": 2**20, "peak_above_baseline_bytes": 0})
            for entry in record.memory
        ]
        epochs.append(record.model_copy(update={"samples_per_s": samples_per_s, "memory": memory}))
    return RecordedRun(f"{name}/metrics.jsonl", [start(name, cfg), *epochs])


def test_size_rows_need_two_sizes_of_one_series():
    small, big = _sized_run("small", [64], 500.0), _sized_run("big", [256, 256], 100.0)
    assert big.start.model_params == 784 * 256 + 256 + 256 * 256 + 256 + 2570
    rows = size_axis.size_rows([big, small])
    assert [(row.params, row.samples_s) for row in rows] == [
        (50_890, 500.0),
        (269_322, 100.0),
    ]
    assert rows[0].state_mib == 1600 / 2**20 and rows[0].above_mib == 0
    assert size_axis.size_rows([small]) == []  # one size: no axis
    other = _sized_run("other", [256, 256], 90.0)
    other.start.config["optim"]["lr"] = 0.5  # another experiment: its own series
    assert len(size_axis.size_rows([small, other])) == 0
    lines = tables.size_table_lines(rows)
    assert lines[0][:2] == ["parameters", "framework"] and lines[1][0] == "0.1M"


def size_params(size: str) -> int:
    """Parameters of a size (the same count the runs record)."""
    return weights.parameter_count(zoo.describe(size_names.size_model(size)))


def test_every_model_is_sized_by_a_key_of_the_model_config():
    for name, entry in zoo.MODELS.items():
        assert entry.size_key in ModelConfig.model_fields, name
        unsized = ModelConfig(name=name)
        assert getattr(unsized, entry.size_key) == ModelConfig.model_fields[entry.size_key].default
