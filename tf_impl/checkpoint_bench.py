"""Synchronous against asynchronous checkpoints with TensorFlow, the twin of
`torch_impl.checkpoint_bench`: the step time of an MWMS training loop that saves every N steps
with `tf.train.Checkpoint.write`, with the same and `CheckpointOptions(
experimental_enable_async_checkpoint=True)` (the state copied, written by a thread while
training goes on; the next save waits for the last, `Checkpoint.sync`), and without saving,
interleaved in one launch. With TensorFlow 2.21 and Keras 3.15 the asynchronous save fails: its
copy of the state to the CPU creates variables inside a tf.function, which TensorFlow refuses
("tf.function only supports singleton tf.Variables created on the first call"), on one worker
and on two; the bench says so and times the other ways. Every worker saves, as the suite's
checkpoints do (the chief's files and the others' temporary ones: `tf_impl.checkpoint`).

    python -m common.launch --nproc 2 -- python -m tf_impl.checkpoint_bench \\
        [--hidden 2048,2048] [--steps 60] [--every 10] [--repeats 3]

Worker 0 prints the median seconds per step of each way and what a checkpoint adds per step.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from common.core.config import config_io
from common.core.run import own_temp
from common.launch import environment
from tf_impl import dist
from tf_impl.model import build_model
from tf_impl.optim import build_optimizer
from tf_impl.step import make_train_step

WAYS = ("none", "sync", "async")
BATCH = 32  # per worker, as torch's bench


def train(step, batch, state, way: str, steps: int, every: int, folder: Path, info) -> float:
    """Seconds per step of `steps` steps, saving every `every` the `way` way."""
    asynchronous = tf.train.CheckpointOptions(experimental_enable_async_checkpoint=True)
    options = {"options": asynchronous} if way == "async" else {}
    dist.barrier(info)
    start = time.perf_counter()
    for number in range(1, steps + 1):
        float(step(*batch))  # the step has finished
        if way != "none" and number % every == 0:
            state.write(str(folder / f"{way}-{number}" / "state"), **options)
    if way == "async":
        state.sync()  # the last save is written before the clock stops
    dist.barrier(info)
    return (time.perf_counter() - start) / steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tf_impl.checkpoint_bench", description=__doc__)
    parser.add_argument("--hidden", default="2048,2048", help="the MLP's hidden widths")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    own_temp.take()  # AutoGraph's files, which os._exit would leave (common.core.run.own_temp)
    cfg = config_io.load_config(None, ["model.name=mlp", f"model.hidden=[{args.hidden}]"])
    info = dist.setup_distributed(cfg, environment.from_environment())
    with info.distribution.scope():
        model = build_model(cfg.net(), cfg.train.seed)
        optimizer = build_optimizer(cfg.optim)
        optimizer.build(model.trainable_variables)  # its slots before any trace, as training does
    rng = np.random.default_rng(info.rank)
    batch = (
        tf.constant(rng.standard_normal((BATCH, 28, 28, 1), dtype=np.float32)),
        tf.constant(rng.integers(0, 10, BATCH)),
        tf.constant(cfg.optim.lr, dtype=tf.float32),
    )
    step, _ = make_train_step(model, optimizer, info, BATCH * info.world_size)
    state = tf.train.Checkpoint(model=model, optimizer=optimizer)
    folder = Path(tempfile.mkdtemp(prefix=f"tf-checkpoint-bench-{info.rank}-"))
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    train(step, batch, state, "none", args.every, args.every, folder, info)  # warm-up
    failed: dict[str, str] = {}
    try:
        for _ in range(args.repeats):
            for way in (way for way in WAYS if way not in failed):
                try:
                    taken = train(step, batch, state, way, args.steps, args.every, folder, info)
                except ValueError as error:  # every worker fails alike, before its collectives
                    failed[way] = str(error).strip().splitlines()[-1][:200]
                    dist.barrier(info)
                    continue
                finally:
                    shutil.rmtree(folder, ignore_errors=True)
                    folder.mkdir()
                seconds[way].append(taken)
    except BaseException:  # a stopped bench leaves no checkpoints of 100s of MB behind
        shutil.rmtree(folder, ignore_errors=True)
        raise
    if info.is_chief:
        params = model.count_params()
        print(
            f"MLP {args.hidden} ({params / 1e6:.1f}M parameters, Adam), {info.world_size} "
            f"workers, MWMS, a checkpoint every {args.every} steps, {args.repeats} repeats"
        )
        plain = statistics.median(seconds["none"])
        for way, why in failed.items():
            print(f"{way:6} fails: {why}", flush=True)
        for way in (way for way in WAYS if way not in failed):
            median = statistics.median(seconds[way])
            added = (median - plain) * args.every
            print(
                f"{way:6} {median * 1e3:8.2f} ms/step   +{added * 1e3:7.1f} ms per checkpoint   "
                f"({', '.join(f'{s * 1e3:.2f}' for s in seconds[way])})",
                flush=True,
            )
    dist.leave_together(info, cfg.dist.timeout_s)
    shutil.rmtree(folder, ignore_errors=True)
    sys.stdout.flush()
    own_temp.give_back()
    os._exit(0)  # as tf_impl.train: the strategy's teardown stalls for tens of seconds


if __name__ == "__main__":
    raise SystemExit(main())
