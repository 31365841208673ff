"""Train an MNIST model with TensorFlow: MultiWorkerMirroredStrategy, custom loop, CPU or GPU.

    python -m tf_impl.train --config configs/mlp_adam.yaml [--set tf.communication=ring ...]

Start it with srun or `python -m common.launch --nproc N --`: every process is one worker.
Keras 3's `model.fit` breaks under this strategy (TensorFlow issue 72388, keras issue 20585),
so the loop is written out: `strategy.run` of a compiled step whose loss is
`tf.nn.compute_average_loss(..., global_batch_size=...)`, the same mean as on the torch side.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from common import config_io, metrics, run
from common.config import Config
from common.optim import learning_rate
from common.rendezvous import RendezvousError
from tf_impl import checkpoint, dist, memory
from tf_impl.data import TfData, build_dataset
from tf_impl.model import build_model
from tf_impl.optim import build_optimizer, set_learning_rate

TRAIN_CLOCK = (
    "the epoch's training steps: batch fetch, forward, backward, gradient all-reduce, optimizer "
    "step, each step's loss fetched to the host (device synchronized); excludes evaluation, "
    "checkpoints and metrics; epoch 1 includes tf.function tracing and warm-up"
)
POLICY = {"none": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
PRECISION = {"none": "fp32", "bf16": "bf16", "fp16": "fp16"}
# What a lost peer looks like from a surviving worker's collective.
PEER_ERRORS = (tf.errors.UnavailableError, tf.errors.CancelledError, tf.errors.AbortedError,
               tf.errors.DeadlineExceededError, tf.errors.InternalError)  # fmt: skip


def make_train_step(model: keras.Model, optimizer, info: dist.DistInfo, global_batch: int):
    """A compiled step; returns this worker's share of the global mean loss (the shares of all
    workers add up to the loss of the global batch)."""

    def replica_step(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            per_example = keras.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True
            )
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            scaled = optimizer.scale_loss(loss)  # loss scaling under fp16, else the loss
        gradients = tape.gradient(scaled, model.trainable_variables)
        # Keras sums the gradients over the workers: sum of (local sum / global batch) is the
        # gradient of the global mean, as DDP's average of local means is.
        optimizer.apply_gradients(list(zip(gradients, model.trainable_variables, strict=True)))
        return loss

    @tf.function
    def train_step(images, labels):
        per_replica = info.strategy.run(replica_step, args=(images, labels))
        return info.strategy.experimental_local_results(per_replica)[0]

    return train_step


def make_eval_step(model: keras.Model):
    @tf.function
    def eval_step(images, labels, weights):
        logits = tf.cast(model(images, training=False), tf.float32)
        losses = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        correct = tf.cast(tf.equal(tf.argmax(logits, axis=1), labels), tf.float32)
        return tf.stack([tf.reduce_sum(losses * weights), tf.reduce_sum(correct * weights),
                         tf.reduce_sum(weights)])  # fmt: skip

    return eval_step


def evaluate(eval_step, data: TfData, info: dist.DistInfo) -> tuple[float, float]:
    """(mean loss, accuracy) over the whole test set, summed over the workers."""
    totals = np.zeros(3)
    for images, labels, weights in data.eval_batches():
        totals += eval_step(images, labels, weights).numpy()
    totals = dist.all_reduce_sum(totals, info)
    return totals[0] / totals[2], totals[1] / totals[2]


def train_epoch(cfg: Config, epoch: int, step_fn, optimizer, data, info, writer) -> dict:
    """Train one epoch; return its global mean loss, clock readings and step times."""
    steps = data.steps_per_epoch
    loss_sum = 0.0
    step_times = []
    paused = 0.0  # time spent on step records: metrics, not training
    dist.barrier(info)
    start = last = time.perf_counter()
    for step, (images, labels) in enumerate(data.train_batches(epoch)):
        lr = learning_rate(cfg.optim, epoch, step, steps, cfg.train.epochs)
        set_learning_rate(optimizer, lr)
        loss = float(step_fn(images, labels))  # waits for the step: an honest step time
        loss_sum += loss
        now = time.perf_counter()
        step_times.append(now - last)
        global_step = epoch * steps + step + 1
        if cfg.train.log_every_steps and global_step % cfg.train.log_every_steps == 0:
            step_loss = dist.all_reduce_sum(np.array([loss]), info)[0]
            if writer:
                record = {"record": "step", "epoch": epoch + 1, "step": global_step,
                          "loss": float(step_loss), "lr": lr}  # fmt: skip
                writer.write(record)
            paused += time.perf_counter() - now
        last = time.perf_counter()
    train_time = time.perf_counter() - start - paused
    total = dist.all_reduce_sum(np.array([loss_sum]), info)[0]
    return {"loss": float(total) / steps, "time": train_time, "step_times": step_times,
            "lr": lr, "steps": steps}  # fmt: skip


def run_training(cfg: Config, info: dist.DistInfo, run_dir: Path, args, state: dict) -> None:
    data = build_dataset(cfg, info)
    state["data"] = data  # its iterators must outlive the loop
    keras.mixed_precision.set_global_policy(POLICY[cfg.tf.mixed_precision])
    with info.strategy.scope():
        model = build_model(cfg.model, cfg.train.seed)
        optimizer = build_optimizer(cfg.optim)
        if cfg.tf.mixed_precision == "fp16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)
    step_fn = make_train_step(model, optimizer, info, data.plan.global_batch)
    eval_step = make_eval_step(model)
    start_epoch, elapsed_before = 0, 0.0
    latest = checkpoint.latest_checkpoint(run_dir)
    if args.resume and latest is None:
        raise RuntimeError(f"--resume: no complete checkpoint under {run_dir}/checkpoints/tf")
    if latest is not None and (args.resume or args.auto_resume):
        extras = checkpoint.load_checkpoint(latest, model, optimizer, info)
        start_epoch, elapsed_before = extras["epoch"], extras["elapsed_s"]
        state["epochs"] = extras["epoch_records"]
    writer = state.get("writer")
    loop_start = time.perf_counter()
    for epoch in range(start_epoch, cfg.train.epochs):
        memory.reset_peak(info.device)
        trained = train_epoch(cfg, epoch, step_fn, optimizer, data, info, writer)
        eval_start = time.perf_counter()
        val_loss, val_accuracy = evaluate(eval_step, data, info)
        eval_time = time.perf_counter() - eval_start
        table = dist.gather_rows(memory.memory_row(info.device, model, optimizer), info)
        record = run.epoch_record(
            epoch + 1, trained, (val_loss, val_accuracy, eval_time), data.plan.global_batch,
            TRAIN_CLOCK, elapsed_before + time.perf_counter() - loop_start,
            memory.memory_entries(table, info.device),
        )  # fmt: skip
        state["epochs"].append(record)
        if writer:
            writer.write(record)
            print(metrics.console_line(record), flush=True)
        every = cfg.train.checkpoint_every_epochs
        preempted = dist.all_reduce_sum(np.array([float(run.preemption_requested())]), info)[0] > 0
        stopping = args.stop_after_epoch == epoch + 1 or preempted
        if (every and (epoch + 1) % every == 0) or stopping:
            extras = {"elapsed_s": record["elapsed_s"], "epoch_records": state["epochs"]}
            checkpoint.save_checkpoint(run_dir, epoch + 1, model, optimizer, info, extras)
        if preempted and epoch + 1 < cfg.train.epochs:
            raise run.Preempted(f"preempted (SIGUSR1): checkpointed epoch {epoch + 1}; resume")
        if stopping and epoch + 1 < cfg.train.epochs:
            raise run.Aborted(f"stopped after epoch {epoch + 1} (--stop-after-epoch); --resume")
    if cfg.output.save_model:
        checkpoint.export_model(model, cfg.model.name, run_dir, info)
    dist.leave_together(cfg, info)


def versions() -> dict[str, str]:
    found = {"tensorflow": tf.__version__, "keras": keras.__version__}
    build = tf.sysconfig.get_build_info()
    if tf.config.list_logical_devices("GPU"):
        found["cuda"] = str(build.get("cuda_version", ""))
        found["cudnn"] = str(build.get("cudnn_version", ""))
    return found


def start_run(cfg: Config, info: dist.DistInfo) -> tuple[Path, metrics.MetricsWriter | None]:
    name = dist.broadcast_text(run.run_name(cfg, "tf", "mwms", info.spec), info)
    run_dir = run.prepare_run_dir(cfg, name, info.is_chief)
    where = f"{info.spec.node}:{info.device}:{info.device_name}"
    devices = dist.gather_texts(where, info)
    if not info.is_chief:
        return run_dir, None
    writer = metrics.MetricsWriter(run_dir / metrics.METRICS_FILENAME)
    record = run.run_start_record(
        cfg, info.spec, run_id=name, framework="tf", framework_version=tf.__version__,
        strategy="mwms", device_type=info.device, devices=devices, versions=versions(),
        precision=PRECISION[cfg.tf.mixed_precision],
    )  # fmt: skip
    writer.write(record)
    print(metrics.console_line(record), flush=True)
    return run_dir, writer


def describe_failure(cfg: Config, info: dist.DistInfo, failure: Exception) -> str:
    text = " ".join(str(failure).split())[:600]
    if isinstance(failure, PEER_ERRORS):
        return (f"worker {info.rank}: lost a peer worker during a collective (it died or did not "
                f"answer within dist.timeout_s={cfg.dist.timeout_s:g} s): "
                f"{type(failure).__name__}: {text}")  # fmt: skip
    return f"worker {info.rank}: {type(failure).__name__}: {text}"


def main(argv: list[str] | None = None) -> int:
    args = run.parse_train_args("python -m tf_impl.train", __doc__, argv)
    try:
        cfg = config_io.config_from_args(args)
        info = dist.setup_distributed(cfg)
    except ValueError as error:  # bad config or launch variables: nothing has started
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (RendezvousError, RuntimeError, tf.errors.OpError) as error:  # peers did not come
        print(f"error: {error}", file=sys.stderr)
        return 1
    status, code = run.execute(
        cfg, args, start=lambda: start_run(cfg, info),
        train=lambda run_dir, state: run_training(cfg, info, run_dir, args, state),
        describe_failure=lambda failure: describe_failure(cfg, info, failure),
    )  # fmt: skip
    # Leave at once. The strategy's teardown (gRPC server, coordination service heartbeats,
    # tf.data threads of the distributed iterators) stalled workers here for 34-100 s after
    # their work was done; every worker has passed the final meeting, so nothing is lost.
    os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main())
