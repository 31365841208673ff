"""Checkpoints with tf.train.Checkpoint, and the final model export.

`save_checkpoint` writes into the folder `common.core.train.loop` gives it
(`common.core.run.checkpoint_folders` decides where, marks it complete with a manifest of
checksums, and verifies it before a resume). Every
worker saves, since saving may run collectives: the chief into that folder, the others into
temporary folders beside it, deleted again, as TensorFlow's multi-worker guide asks. Every
worker restores from the chief's files.
"""

from __future__ import annotations

import shutil
import zlib
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from common.core.whole_files import whole
from common.launch import exchanges
from tf_impl.dist import DistInfo, all_reduce_sum, barrier
from tf_impl.model import get_weights

PREFIX = "state"  # the chief's files: state.index, state.data-00000-of-00001


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


def save_checkpoint(folder: Path, *, model, optimizer, info: DistInfo) -> None:
    """This worker's save (collective: every worker calls it)."""
    target = folder if info.is_chief else folder.parent / f"tmp-{folder.name}-worker-{info.rank}"
    target.mkdir(parents=True, exist_ok=True)
    _state(model, optimizer).write(str(target / PREFIX))
    barrier(info)
    if not info.is_chief:
        shutil.rmtree(target, ignore_errors=True)


def load_checkpoint(folder: Path, *, model, optimizer, info: DistInfo) -> None:
    """Restore model and optimizer (built first, so nothing is restored lazily) (collective)."""
    _state(model, optimizer).read(str(folder / PREFIX)).assert_existing_objects_matched()


def export_model(model: keras.Model, run_dir: Path, info: DistInfo) -> Path:
    """The final weights in the canonical (torch) layout as `model.npz`, written by the chief:
    the same names and shapes as torch_impl's model.pt, so the two can be compared directly.
    Mirrored training must leave every worker with the same weights: checked, bit for bit."""
    canonical = get_weights(model)
    digest = zlib.crc32(b"".join(array.tobytes() for array in canonical.values()))
    gathered = exchanges.gather_rows(
        [digest],
        rank=info.rank,
        world_size=info.world_size,
        all_reduce_sum=lambda values: all_reduce_sum(values, info),
    )[:, 0]
    digests = [int(value) for value in gathered]
    if len(set(digests)) != 1:
        raise RuntimeError(f"the workers hold different weights after training: crc32 {digests}")
    path = run_dir / "model.npz"
    if info.is_chief:
        with whole(path) as partial, partial.open("wb") as stream:  # never a part of it
            np.savez(stream, **canonical)  # type: ignore[arg-type]  # names as keywords
    barrier(info)
    return path
