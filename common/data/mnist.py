"""MNIST as the same bytes for both frameworks: fetch, verify, parse IDX, normalize.

Files live uncompressed in one folder (the `data.dir` config key, else $MNIST_DIR, else
./data/mnist). Every file is checked against its SHA-256 before use, so a torch run and a
TensorFlow run that both start are known to read identical data.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.data import datasets, synthetic
from common.data.config import DataConfig

DEFAULT_DIR = "data/mnist"
# SHA-256 of the uncompressed files (the canonical LeCun MNIST).
CHECKSUMS = {
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
# Normalization used by both frameworks (the PyTorch MNIST example's constants).
PIXEL_MEAN = 0.1307
PIXEL_STD = 0.3081
MNIST = datasets.get("mnist")  # its shape, classes and sizes, written once
IMAGE_SHAPE = MNIST.image_shape
NUM_CLASSES = MNIST.classes
TRAIN_SAMPLES = MNIST.train_samples
TEST_SAMPLES = MNIST.test_samples

_IDX_UBYTE = 0x08


class DataError(RuntimeError):
    """A data file is missing, corrupt or cannot be fetched; the message says what to do."""


@dataclass(frozen=True)
class Mnist:
    train_images: np.ndarray  # uint8 [60000, 28, 28]
    train_labels: np.ndarray  # int64 [60000]
    test_images: np.ndarray  # uint8 [10000, 28, 28]
    test_labels: np.ndarray  # int64 [10000]


def resolve_dir(configured: str | None = None) -> Path:
    """The data folder: the config's value, else $MNIST_DIR, else ./data/mnist."""
    return Path(configured or os.environ.get("MNIST_DIR") or DEFAULT_DIR)


def stage(source: Path, stage_dir: Path) -> Path:
    """Copy the MNIST files from `source` (a shared file system) into `stage_dir` (a node's
    local disk) unless an intact copy is there; every rank of a node may call it at once: each
    copies into a file of its own and renames it into place, atomically."""
    stage_dir.mkdir(parents=True, exist_ok=True)
    for name, expected in CHECKSUMS.items():
        target = stage_dir / name
        if target.is_file() and sha256_of(target) == expected:
            continue
        partial = stage_dir / f".{name}.{os.getpid()}.partial"
        shutil.copyfile(check_files(source, verify=False) / name, partial)
        install_verified(partial, stage_dir, name)
    return stage_dir


def load_limited(data_cfg: DataConfig) -> Mnist:
    """MNIST from `data_cfg.dir` (staged to data.stage_dir first, when set), or the synthetic
    set (`common.data.synthetic`), cut to data.train_limit / data.test_limit samples (0 = all):
    what both frameworks train and evaluate on."""
    if data_cfg.name == "synthetic":
        return Mnist(
            *synthetic.split(synthetic.TRAIN, data_cfg.train_limit or TRAIN_SAMPLES),
            *synthetic.split(synthetic.TEST, data_cfg.test_limit or TEST_SAMPLES),
        )
    folder = resolve_dir(data_cfg.dir)
    if data_cfg.stage_dir:
        folder = stage(folder, Path(os.path.expandvars(data_cfg.stage_dir)))
    mnist = load_mnist(folder)

    def cut(array: np.ndarray, limit: int) -> np.ndarray:
        return array[:limit] if limit else array

    return Mnist(
        train_images=cut(mnist.train_images, data_cfg.train_limit),
        train_labels=cut(mnist.train_labels, data_cfg.train_limit),
        test_images=cut(mnist.test_images, data_cfg.test_limit),
        test_labels=cut(mnist.test_labels, data_cfg.test_limit),
    )


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


# Files this process has checked, as (path, size, mtime, checksum): a launch reads the same four
# files' checksums up to three times (the early refusal, the launch checks, the load).
_VERIFIED: set[tuple[str, int, int, str]] = set()


def verify_file(path: Path, expected: str) -> None:
    """DataError unless `path`'s SHA-256 is `expected`; read once per process while the file
    keeps its size and modification time."""
    status = path.stat()
    key = (str(path.resolve()), status.st_size, status.st_mtime_ns, expected)
    if key in _VERIFIED:
        return
    actual = sha256_of(path)
    if actual != expected:
        raise DataError(
            f"{path}: SHA-256 is {actual}, expected {expected}. The file is corrupt or not "
            f"canonical MNIST; delete it and run `make data` (or python -m common.data fetch)."
        )
    _VERIFIED.add(key)


def idx_bytes(array: np.ndarray) -> bytes:
    """A uint8 array as the bytes of an IDX file (the format the four MNIST files are in)."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, _IDX_UBYTE, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    return header + array.tobytes()


def read_idx(path: str | Path, ndim: int) -> np.ndarray:
    """Parse an unsigned-byte IDX file with `ndim` dimensions, checking header and length."""
    path = Path(path)
    raw = path.read_bytes()
    if len(raw) < 4:
        raise DataError(f"{path}: truncated, {len(raw)} bytes is shorter than the IDX header")
    if raw[0] != 0 or raw[1] != 0 or raw[2] != _IDX_UBYTE or raw[3] != ndim:
        raise DataError(
            f"{path}: wrong magic number 0x{raw[:4].hex()}, expected "
            f"0x0000{_IDX_UBYTE:02x}{ndim:02x} (unsigned-byte IDX with {ndim} dimensions)"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: truncated inside the header ({len(raw)} of {header} bytes)")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = header + int(np.prod(dims))
    if len(raw) != expected:
        problem = "truncated" if len(raw) < expected else "has trailing bytes"
        raise DataError(
            f"{path}: {problem}: header says shape {dims}, so {expected} bytes, found {len(raw)}"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def _read_split(folder: Path, prefix: str) -> tuple[np.ndarray, np.ndarray]:
    images_path = folder / f"{prefix}-images-idx3-ubyte"
    labels_path = folder / f"{prefix}-labels-idx1-ubyte"
    images = read_idx(images_path, ndim=3)
    labels = read_idx(labels_path, ndim=1)
    if images.shape[1:] != IMAGE_SHAPE:
        raise DataError(f"{images_path}: images are {images.shape[1:]}, expected {IMAGE_SHAPE}")
    if len(images) != len(labels):
        raise DataError(
            f"{labels_path}: {len(labels)} labels but {images_path.name} has {len(images)} images"
        )
    if labels.size and labels.max() >= NUM_CLASSES:
        raise DataError(f"{labels_path}: label {labels.max()} outside 0..{NUM_CLASSES - 1}")
    return images, labels.astype(np.int64)


def check_files(folder: str | Path | None = None, verify: bool = True) -> Path:
    """The MNIST folder, after checking that every file is there (with its SHA-256 unless
    verify=False)."""
    folder = resolve_dir(str(folder) if folder else None)
    missing = [name for name in CHECKSUMS if not (folder / name).is_file()]
    if missing:
        raise DataError(
            f"MNIST files missing in {folder}: {', '.join(missing)}. Run `make data` "
            f"(or python -m common.data fetch --dir {folder})."
        )
    for name, expected in CHECKSUMS.items() if verify else ():
        verify_file(folder / name, expected)
    return folder


def load_mnist(folder: str | Path | None = None, verify: bool = True) -> Mnist:
    """All of MNIST as numpy arrays; every file is checksum-verified first unless verify=False."""
    folder = check_files(folder, verify)
    train_images, train_labels = _read_split(folder, "train")
    test_images, test_labels = _read_split(folder, "t10k")
    return Mnist(train_images, train_labels, test_images, test_labels)


def normalize(images: np.ndarray) -> np.ndarray:
    """uint8 pixels to float32 (x/255 - mean)/std, the exact input both frameworks train on."""
    scaled: np.ndarray = images.astype(np.float32) / np.float32(255.0)
    normalized: np.ndarray = (scaled - np.float32(PIXEL_MEAN)) / np.float32(PIXEL_STD)
    return normalized


def install_verified(source: Path, folder: Path, name: str) -> None:
    """Verify `source` and move it into place atomically; a bad file never lands."""
    verify_file(source, CHECKSUMS[name])
    os.replace(source, folder / name)
