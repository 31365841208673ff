"""Checkpoints with tf.train.CheckpointManager, and the final model export.

Every worker saves (saving may run collectives): the chief into `<run>/checkpoints/tf/`, the
others into their own temporary folders, which are deleted again, as TensorFlow's multi-worker
guide asks. After all have saved, the chief writes `epoch-NNNN.json` (epoch, elapsed time, the
epoch records so far); --resume takes the newest checkpoint that has one, so a checkpoint cut
off half-way is ignored. Every worker restores from the chief's folder.
"""

from __future__ import annotations

import json
import shutil
import zlib
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from common import collectives
from tf_impl.dist import DistInfo, all_reduce_sum, barrier
from tf_impl.model import get_weights


def checkpoint_root(run_dir: Path) -> Path:
    return run_dir / "checkpoints" / "tf"


def _state(model, optimizer) -> tf.train.Checkpoint:
    """What a checkpoint holds: weights, optimizer slots and step, and the dropout layers' seed
    generator states (tf.train.Checkpoint does not reach those through the model, and without
    them a resumed run draws other dropout masks)."""
    seeds = {
        f"{layer.name}": layer.seed_generator.state.value
        for layer in model.layers
        if getattr(layer, "seed_generator", None) is not None
    }
    return tf.train.Checkpoint(model=model, optimizer=optimizer, dropout_seeds=seeds)


def _manager(run_dir: Path, model, optimizer, info: DistInfo) -> tf.train.CheckpointManager:
    root = checkpoint_root(run_dir)
    directory = root if info.is_chief else run_dir / "checkpoints" / f"tmp-worker-{info.rank}"
    return tf.train.CheckpointManager(_state(model, optimizer), str(directory), max_to_keep=2)


def save_checkpoint(
    run_dir: Path, epoch: int, *, model, optimizer, info: DistInfo, extras: dict
) -> Path:
    """Save after `epoch` epochs (collective: every worker calls it); the marker's path."""
    manager = _manager(run_dir, model, optimizer, info)
    path = manager.save(checkpoint_number=epoch)
    barrier(info)
    if info.is_chief:
        record = {"epoch": epoch, "checkpoint": Path(path).name, **extras}
        target = checkpoint_root(run_dir) / f"epoch-{epoch:04d}.json"
        partial = target.with_suffix(".json.partial")
        partial.write_text(json.dumps(record), encoding="utf-8")
        partial.replace(target)
    else:
        shutil.rmtree(manager.directory, ignore_errors=True)
    barrier(info)
    return checkpoint_root(run_dir) / f"epoch-{epoch:04d}.json"


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest `epoch-NNNN.json` whose checkpoint files are all there, or None."""
    for marker in sorted(checkpoint_root(run_dir).glob("epoch-*.json"), reverse=True):
        name = json.loads(marker.read_text(encoding="utf-8"))["checkpoint"]
        if (marker.parent / f"{name}.index").is_file():
            return marker
    return None


def load_checkpoint(path: Path, *, model, optimizer, info: DistInfo) -> dict:
    """Restore model and optimizer (built first, so nothing is restored lazily) from the
    checkpoint whose marker is `path`; the extras."""
    extras = json.loads(path.read_text(encoding="utf-8"))
    _state(model, optimizer).restore(
        str(path.parent / extras["checkpoint"])
    ).assert_existing_objects_matched()
    return extras


def export_model(model: keras.Model, run_dir: Path, info: DistInfo) -> Path:
    """The final weights in the canonical (torch) layout as `model.npz`, written by the chief:
    the same names and shapes as torch_impl's model.pt, so the two can be compared directly.
    Mirrored training must leave every worker with the same weights: checked, bit for bit."""
    canonical = get_weights(model, model.name)  # build_model names the model after the config
    digest = zlib.crc32(b"".join(array.tobytes() for array in canonical.values()))
    digests = collectives.gather_rows(
        [digest],
        rank=info.rank,
        world_size=info.world_size,
        all_reduce_sum=lambda values: all_reduce_sum(values, info),
    )[:, 0]
    digests = [int(value) for value in digests]
    if len(set(digests)) != 1:
        raise RuntimeError(f"the workers hold different weights after training: crc32 {digests}")
    path = run_dir / "model.npz"
    if info.is_chief:
        np.savez(path, **canonical)
    barrier(info)
    return path
