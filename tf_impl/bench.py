"""The TensorFlow baseline for the benchmark (`python -m common.tools.bench`), in a process of its
own.

    python -m tf_impl.bench --model NAME [--train-limit 6400] [--repeats 3] [--batch 64]
                            [--device auto|cpu|gpu] [--timed 1] [--paired | --plain-only]

`plain loop`: a compiled step (the batch's gathers, forward, loss, gradients, optimizer) over
the same preloaded arrays as the launched runs, no strategy and no metrics, the model tested
after each pass as they test it, in a process set up as one launched worker's. `--paired`
also takes the suite's own step in turn with it (`paired_steps`; torch_impl.bench says why).
Prints one JSON line, as torch_impl.bench does.
"""

from __future__ import annotations

if __name__ == "__main__":  # a bad command line is refused before the framework's import
    from common.tools import measure as _early

    _early.baseline_arguments("python -m tf_impl.bench", __doc__, None)

import functools
import json
import statistics
import time

import keras
import numpy as np
import tensorflow as tf

from common.core.config import config_io, devices
from common.core.measure.clocks import HostStepClock, in_turn
from common.core.run.turns import Turns
from common.data import mnist
from common.launch import environment
from common.report.harness_ratio import PAIRED
from common.tools import measure
from common.tools.measure import cell_settings
from tf_impl import dist
from tf_impl.model import build_model
from tf_impl.optim import build_optimizer
from tf_impl.train import TfTrainer


def plain_step(model, optimizer, images: tf.Tensor, labels: tf.Tensor):
    """The plain loop's compiled step, given one step's indices into (images, labels)."""

    @tf.function
    def step(indices):
        # the step's samples gathered inside the compiled step, as the launched runs gather
        # them: eager gathers would charge this loop a per-op dispatch the suite does not pay
        batch_images, batch_labels = tf.gather(images, indices), tf.gather(labels, indices)
        with tf.GradientTape() as tape:
            logits = model(batch_images, training=True)
            loss = tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(batch_labels, logits, from_logits=True)
            )
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(list(zip(gradients, model.trainable_variables, strict=True)))
        return loss

    return step


def paired_steps(
    model_name: str, limit: int, batch: int, info: dist.DistInfo
) -> tuple[float, float]:
    """(the plain loop's median step, the suite's), in seconds, the two taken in turn over the
    same batches in this process, the order swapped at every step, so that a slow spell of a
    shared host slows both alike: the suite's is `TfTrainer.train_step` as `tf mwms x1 /
    tensor` launches it, under this process's MultiWorkerMirroredStrategy (`info`). Two
    epochs; the first warms both up and is not timed."""
    overrides = [*cell_settings(model_name, "tensor", limit, batch), "tf.strategy=mwms"]
    cfg = config_io.load_config(None, overrides)
    trainer = TfTrainer(cfg, info)
    trainer.build()
    images, labels = trainer.data.train_images, trainer.data.train_labels
    step = plain_step(build_model(cfg.net(), seed=0), build_optimizer(cfg.optim), images, labels)

    def plain(indices: np.ndarray) -> None:
        float(step(tf.constant(indices)))

    def suite(indices: np.ndarray) -> None:
        trainer.train_step(indices, cfg.optim.lr)

    # each step waited for (on a GPU the trainer's own clock takes the epoch's mean)
    waited = functools.partial(HostStepClock, trainer.synchronize)
    return in_turn(plain, suite, trainer.train_batches, waited)


def plain_loop(
    model_name: str,
    images: tf.Tensor,
    labels: tf.Tensor,
    batch: int,
    test: tuple[tf.Tensor, tf.Tensor],
    timed: int = 1,
    turns: Turns | None = None,
) -> tuple[list[float], float]:
    """([samples/s of each timed pass], median step seconds over them) of the `timed` passes
    over the data after the first, the model tested after each, as the tutorials' loops and the
    launched runs test it; each step on the launched runs' step clock (the host's, the loss read
    after each step). `turns`: each pass, this loop's first, in turn with a launched run's
    epochs (`common.core.run.turns`)."""
    cfg = config_io.load_config(None, [f"model.name={model_name}", "optim.name=adam"])
    model = build_model(cfg.net(), seed=0)
    step = plain_step(model, build_optimizer(cfg.optim), images, labels)

    @tf.function
    def correct(batch_images, batch_labels):
        predicted = tf.argmax(model(batch_images, training=False), axis=1)
        return tf.reduce_sum(tf.cast(tf.equal(predicted, batch_labels), tf.int64))

    def test_accuracy() -> float:
        """The tutorial's evaluation in batches of the suite's evaluation batch on this device."""
        (test_images, test_labels), total = test, int(test[1].shape[0])
        device = "gpu" if tf.config.get_visible_devices("GPU") else "cpu"
        size, right = devices.EVAL_BATCH[("tf", device)], 0
        for first in range(0, total, size):
            window = slice(first, first + size)
            right += int(correct(test_images[window], test_labels[window]))
        return right / total

    steps = int(labels.shape[0]) // batch
    rng = np.random.default_rng(0)
    speeds: list[float] = []
    step_s: list[float] = []
    # the passes after the first are timed, as the launched runs time their epochs after the first
    for done in range(1 + timed):
        order = rng.permutation(int(labels.shape[0]))
        clock = HostStepClock()
        start = time.perf_counter()
        for index in range(steps):
            clock.step_started()
            float(step(tf.constant(order[index * batch : (index + 1) * batch])))
            clock.step_done()
        seconds = time.perf_counter() - start
        test_accuracy()
        if turns is not None:  # the launched run's epoch, then this loop's next pass
            turns.give()
            turns.wait()
        if done:
            speeds.append(steps * batch / seconds)
            step_s += clock.step_times(seconds)
    return speeds, statistics.median(step_s)


def main(argv: list[str] | None = None) -> int:
    parser, args = measure.baseline_arguments("python -m tf_impl.bench", __doc__, argv)
    # the device, threads and strategy of a launched run (one worker), before any op
    cfg = config_io.load_config(None, [f"dist.device={args.device}"])
    try:
        info = dist.setup_distributed(cfg, environment.from_environment({}))
    except ValueError as error:
        parser.error(str(error))
    digits = mnist.load_mnist()
    images = tf.constant(mnist.normalize(digits.train_images[: args.train_limit])[..., np.newaxis])
    labels = tf.constant(digits.train_labels[: args.train_limit].astype(np.int64))
    # the test set in memory and tested after each epoch, as the launched runs hold and test it
    # (torch_impl.bench says why)
    test = (
        tf.constant(mnist.normalize(digits.test_images)[..., np.newaxis]),
        tf.constant(digits.test_labels.astype(np.int64)),
    )
    turns = Turns(args.in_turn)  # the launched run beside this loop (the bench's), if any
    plain = [
        plain_loop(args.model, images, labels, args.batch, test, args.timed, turns)
        for _ in range(args.repeats)
    ]
    passes = [speed for speeds, _ in plain for speed in speeds]
    speeds = {"plain loop": statistics.median(passes)}
    step_s = {"plain loop": statistics.median(step for _, step in plain)}
    said = {
        "model": args.model,
        "samples_per_s": speeds,
        "step_s": step_s,
        "passes": {"plain loop": passes},
    }
    if args.paired:
        plain_s, suite_s = paired_steps(args.model, args.train_limit, args.batch, info)
        speeds[PAIRED], step_s[PAIRED] = args.batch / suite_s, suite_s
        said["paired"] = {PAIRED: plain_s / suite_s}
    print(json.dumps(said))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
