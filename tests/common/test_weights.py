import json
import time

import numpy as np
import pytest

from common.core.measure import peak
from common.data import mnist
from common.models import layouts, weights, zoo
from common.models.config import ModelConfig
from tests import reference
from tests.reference import net


@pytest.mark.parametrize("model", sorted(zoo.MODELS))
def test_torch_and_keras_layouts_compute_the_same_logits(model, digits):
    described = net(model)
    canonical = reference.initial_weights(described, seed=0)
    if model == "resnet8":  # running statistics away from their start, so that they count
        rng = np.random.default_rng(0)
        for name in canonical:
            if name.endswith(("running_mean", "running_var", "bn1.weight")):
                canonical[name] = rng.uniform(0.5, 1.5, canonical[name].shape).astype("f4")
    images = mnist.normalize(digits.test_images[:16])
    torch_logits = reference.forward(described, reference.to_torch(canonical), images, "torch")
    keras_weights = layouts.to_keras(described, canonical)
    keras_logits = reference.forward(described, keras_weights, images, "keras")
    assert torch_logits.shape == (16, 10)
    np.testing.assert_allclose(keras_logits, torch_logits, rtol=0, atol=1e-12)


def test_a_wrong_flatten_order_would_be_caught(digits):
    """Guard the guard: transposing fc1 naively (no CHW->HWC reorder) changes the logits."""
    cnn = net("cnn")
    canonical = reference.initial_weights(cnn, seed=0)
    keras = layouts.to_keras(cnn, canonical)
    keras["fc1.kernel"] = canonical["fc1.weight"].T
    images = mnist.normalize(digits.test_images[:4])
    right = reference.forward(cnn, reference.to_torch(canonical), images, "torch")
    wrong = reference.forward(cnn, keras, images, "keras")
    assert np.abs(right - wrong).max() > 1e-3


def test_reference_conv_matches_the_definition():
    from common.models.layers import Conv

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 6, 6))
    kernel = rng.standard_normal((4, 3, 3, 3))
    out = reference._conv(x, kernel, Conv("c", 3, 4, kernel=3), channels_last=False)
    n, o, i, j = 1, 2, 3, 1
    by_hand = (x[n, :, i : i + 3, j : j + 3] * kernel[o]).sum()
    assert out.shape == (2, 4, 4, 4)
    assert out[n, o, i, j] == pytest.approx(by_hand)
    strided = reference._conv(x, kernel, Conv("c", 3, 4, 3, stride=2, padding=1), False)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    assert strided.shape == (2, 4, 3, 3)
    assert strided[n, o, 1, 2] == pytest.approx((padded[n, :, 2:5, 4:7] * kernel[o]).sum())


@pytest.mark.parametrize("model", sorted(zoo.MODELS))
def test_keras_conversion_round_trips(model):
    described = net(model)
    canonical = reference.initial_weights(described, seed=5)
    back = layouts.from_keras(described, layouts.to_keras(described, canonical))
    assert back.keys() == canonical.keys()
    assert all(np.array_equal(back[name], canonical[name]) for name in canonical)


def test_initial_weights_follow_seed_and_torch_default_bounds():
    cnn = net("cnn")
    first, again = reference.initial_weights(cnn, 1), reference.initial_weights(cnn, 1)
    other = reference.initial_weights(cnn, 2)
    assert all(np.array_equal(first[name], again[name]) for name in first)
    assert not np.array_equal(first["fc1.weight"], other["fc1.weight"])
    shapes = {name: array.shape for name, array in first.items()}
    assert shapes["conv2.weight"] == (64, 32, 3, 3) and shapes["fc1.weight"] == (128, 9216)
    for name, array in first.items():
        fan_in = np.prod(first[name.replace("bias", "weight")].shape[1:])
        bound = 1 / np.sqrt(fan_in)
        assert array.dtype == np.float32 and np.abs(array).max() <= bound
        if array.size >= 1000:  # uniform over the whole interval: std = bound / sqrt(3)
            assert abs(array.std() * np.sqrt(3) / bound - 1) < 0.05
            assert abs(array.mean()) < 0.05 * bound
    mlp = reference.initial_weights(net("mlp"), 0)
    assert sum(array.size for array in mlp.values()) == 784 * 128 + 128 + 128 * 64 + 64 + 650


def test_the_resnet_s_layers_its_batch_norm_start_and_its_size():
    """ResNet-8: a stem and three basic blocks (the later two halve the image and widen it,
    with a 1x1 convolution on the shortcut), 28 -> 14 -> 7, 16/32/64 channels."""
    resnet = net("resnet8")
    start = reference.initial_weights(resnet, 0)
    convs = [name for name in start if name.endswith("weight") and start[name].ndim == 4]
    assert convs == [
        "conv1.weight",
        "block1.conv1.weight",
        "block1.conv2.weight",
        "block2.conv1.weight",
        "block2.conv2.weight",
        "block2.shortcut.weight",
        "block3.conv1.weight",
        "block3.conv2.weight",
        "block3.shortcut.weight",
    ]
    assert start["block3.shortcut.weight"].shape == (64, 32, 1, 1)
    assert start["fc.weight"].shape == (10, 64) and "conv1.bias" not in start
    assert np.all(start["bn1.weight"] == 1) and np.all(start["bn1.running_var"] == 1)
    assert np.all(start["block2.bn2.bias"] == 0) and np.all(start["bn1.running_mean"] == 0)
    params = weights.parameter_count(resnet)
    wide = weights.parameter_count(net("resnet8", width=2))
    assert params == 77_754 and 3.9 < wide / params < 4.0  # width^2, less the fixed head


def test_unknown_model_is_refused():
    with pytest.raises(ValueError, match="model.name='resnet': allowed: mlp, cnn, resnet8"):
        ModelConfig(name="resnet")


def test_training_flops_per_sample_follow_the_layer_shapes():
    """By hand. CNN: conv1 26*26 outputs x 32 channels x 1*3*3, conv2 24*24 x 64 x 32*3*3,
    fc1 9216 x 128, fc2 128 x 10. MLP: 784 x 128, 128 x 64, 64 x 10. Training: 6 per MAC.
    ResNet-8: stride-2 convolutions and their 1x1 shortcuts at the halved size."""
    cnn = 26 * 26 * 32 * 9 + 24 * 24 * 64 * 32 * 9 + 9216 * 128 + 128 * 10
    assert weights.forward_macs(net("cnn")) == cnn == 11_992_448
    assert weights.train_flops_per_sample(net("cnn")) == 6 * cnn == 71_954_688
    assert weights.forward_macs(net("mlp")) == 784 * 128 + 128 * 64 + 64 * 10 == 109_184
    assert weights.train_flops_per_sample(net("mlp")) == 655_104
    wide = net("cnn", width=2)  # channels x2: conv2 and fc1 MACs x4
    assert weights.forward_macs(wide) == 26 * 26 * 64 * 9 + 24 * 24 * 128 * 64 * 9 + (
        18432 * 256 + 256 * 10
    )
    resnet = 28 * 28 * 16 * 9 + 2 * 28 * 28 * 16 * 16 * 9  # stem, block 1
    resnet += 14 * 14 * 32 * 16 * 9 + 14 * 14 * 32 * 32 * 9 + 14 * 14 * 32 * 16  # block 2
    resnet += 7 * 7 * 64 * 32 * 9 + 7 * 7 * 64 * 64 * 9 + 7 * 7 * 64 * 32 + 64 * 10
    assert weights.forward_macs(net("resnet8")) == resnet == 9_345_920


def probe(flops: float) -> peak.Probe:
    return peak.Probe(flops=flops, size=2048, products=5, spread=0.01)


def test_the_peak_is_measured_once_per_host_and_cached_with_how(tmp_path, monkeypatch):
    monkeypatch.setenv(peak.CACHE_VARIABLE, str(tmp_path))
    calls = []

    def measure():
        calls.append(1)
        return probe(3.0e11)

    first = peak.peak_flops(device="cpu:x", precision="fp32", threads=2, measure=measure)
    again = peak.peak_flops(device="cpu:x", precision="fp32", threads=2, measure=measure)
    other = peak.peak_flops(device="cpu:x", precision="bf16", threads=2, measure=measure)
    assert first == (3.0e11, "measured now") and again[0] == 3.0e11
    assert again[1].startswith("cached in") and len(calls) == 2  # bf16 is another figure
    assert other[0] == 3.0e11
    (entry,) = [e for key, e in json.loads(peak.cache_path().read_text()).items() if "fp32" in key]
    assert entry["flops"] == 3.0e11 and entry["size"] == 2048 and entry["spread"] == 0.01
    assert entry["cores"] >= 1 and entry["load_1min"] >= 0 and entry["measured"].endswith("+00:00")
    assert peak.mfu(1000.0, 71_954_688, 3.0e11) == pytest.approx(0.23985, rel=1e-4)
    assert peak.mfu(1000.0, 1, 0.0) is None


def test_a_higher_probe_replaces_the_cached_peak_and_a_lower_one_does_not(tmp_path, monkeypatch):
    monkeypatch.setenv(peak.CACHE_VARIABLE, str(tmp_path))
    asked = {"device": "cpu:x", "precision": "fp32", "threads": 2}
    peak.peak_flops(**asked, measure=lambda: probe(1.0e11))  # measured under load: low
    lower = peak.peak_flops(**asked, measure=lambda: probe(0.5e11), fresh=True)
    assert lower[0] == 1.0e11 and "a new probe read less" in lower[1]
    higher = peak.peak_flops(**asked, measure=lambda: probe(2.0e11), fresh=True)
    assert higher == (2.0e11, "measured now")
    assert peak.peak_flops(**asked, measure=lambda: probe(9e99))[0] == 2.0e11  # cached now


def swamped():
    """Every cached peak as if measured while the machine was swamped."""
    table = json.loads(peak.cache_path().read_text())
    for entry in table.values():
        entry["load_1min"], entry["cores"] = 1e6, 2
    peak.cache_path().write_text(json.dumps(table))


def test_a_peak_measured_on_a_busy_machine_is_measured_again_when_it_is_quieter(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(peak.CACHE_VARIABLE, str(tmp_path))
    asked = {"device": "cpu:x", "precision": "fp32", "threads": 2}
    peak.peak_flops(**asked, measure=lambda: probe(1.0e11))
    swamped()
    assert peak.peak_flops(**asked, measure=lambda: probe(3.0e11)) == (3.0e11, "measured now")


def test_a_busy_peak_that_a_quieter_probe_confirms_is_not_measured_again(tmp_path, monkeypatch):
    """A figure from a swamped machine is measured again once it is quieter; when that probe
    reads less, the figure stands and the entry says the quieter load, so the next run reuses
    it instead of probing again at every launch."""
    monkeypatch.setenv(peak.CACHE_VARIABLE, str(tmp_path))
    asked = {"device": "cpu:x", "precision": "fp32", "threads": 2}
    peak.peak_flops(**asked, measure=lambda: probe(3.0e11))
    swamped()
    checked = peak.peak_flops(**asked, measure=lambda: probe(1.0e11))
    assert checked[0] == 3.0e11 and "a new probe read less" in checked[1]
    (entry,) = json.loads(peak.cache_path().read_text()).values()
    assert entry["flops"] == 3.0e11 and entry["load_1min"] < 1e6  # the load it was checked at
    assert entry["checked"].endswith("+00:00")


def test_the_gemm_probe_grows_its_matrices_to_a_time_and_stops_within_its_budget():
    def make(size):
        return lambda: time.sleep(0.02 * (size / 256) ** 3)  # 0.02 s, then 0.16 s

    start = time.monotonic()
    found = peak.probe_gemm(make, max_size=8192)
    assert found.size in (256, 512) and 2 <= found.products <= peak.REPEATS
    assert time.monotonic() - start < 3 * (peak.BUDGET_S + 1)  # never the 8192 product (2.7 h)


def test_the_peak_cache_tells_processors_apart(tmp_path, monkeypatch):
    """A virtual machine keeps its host name on other hardware: the processor is in the key."""
    monkeypatch.setenv(peak.CACHE_VARIABLE, str(tmp_path))
    zen5 = tmp_path / "zen5"
    zen5.write_text("processor\t: 0\nmodel name\t: AMD EPYC\ncpu family\t: 26\nmodel\t\t: 2\n")
    zen4 = tmp_path / "zen4"
    zen4.write_text("processor\t: 0\nmodel name\t: AMD EPYC\ncpu family\t: 25\nmodel\t\t: 17\n")
    assert peak.processor(zen5) == "AMD EPYC 26 2"
    assert peak.processor(tmp_path / "missing") == ""
    real = peak.processor
    for cpuinfo, value in ((zen4, 3.2e11), (zen5, 4.0e11)):
        monkeypatch.setattr(peak, "processor", lambda cpuinfo=cpuinfo: real(cpuinfo))
        measured = peak.peak_flops(
            device="cpu:cpu", precision="fp32", threads=2, measure=lambda value=value: probe(value)
        )
        assert measured == (value, "measured now")  # not the other processor's cached figure
