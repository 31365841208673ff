"""A damaged data file is named, never a traceback: a Keras MNIST cache cut short, as an
interrupted download leaves it. Real processes, the way a user runs the fetch."""

import subprocess
import sys

import numpy as np
import pytest


@pytest.mark.parametrize("cut", ["half", "header"])
def test_a_damaged_keras_cache_is_named_with_its_hash(digits, tmp_path, cut):
    """A cache an interrupted download left (a zip cut short, starting with 'PK'): one line
    naming the file, its SHA-256 and the fix, exit 1, and no file lands; a real process."""
    from common.data import mnist

    whole = tmp_path / "whole.npz"
    np.savez(
        whole,
        x_train=digits.train_images[:100],
        y_train=digits.train_labels[:100],
        x_test=digits.test_images[:10],
        y_test=digits.test_labels[:10],
    )
    raw = whole.read_bytes()
    cache = tmp_path / "mnist.npz"
    cache.write_bytes(raw[: len(raw) // 2] if cut == "half" else raw[:40])
    assert cache.read_bytes()[:2] == b"PK"
    command = [sys.executable, "-m", "common.data", "fetch", "--dir", str(tmp_path / "d")]
    done = subprocess.run(
        [*command, "--source", f"keras:{cache}"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert str(cache) in line and mnist.sha256_of(cache) in line and "delete it" in line, line
    assert not any((tmp_path / "d").glob("*-ubyte"))


def test_a_cut_gz_in_a_torchvision_root_is_named(digits, tmp_path):
    """A torchvision root whose .gz was cut short: the fetch names it, exit 1, no traceback."""
    import gzip

    from common.data import mnist

    raw = tmp_path / "root" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in mnist.CHECKSUMS:
        packed = gzip.compress(mnist.idx_bytes(np.zeros((4, 2), np.uint8)))
        (raw / f"{name}.gz").write_bytes(packed[: len(packed) // 2])
    command = [sys.executable, "-m", "common.data", "fetch", "--dir", str(tmp_path / "d")]
    done = subprocess.run(
        [*command, "--source", f"torchvision:{tmp_path / 'root'}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "train-images-idx3-ubyte" in line and "torchvision" in line, line
