"""The suite's stop vote against TensorFlow's `PreemptionCheckpointHandler`, under MWMS.

What each costs a step, and how long each takes from a signal on one worker to a checkpoint
written on every worker:

  vote      the suite's way (`common.core.train.mid_epoch`): after every call, the workers
            all-reduce one float64 (did a SIGUSR1 reach anyone?) and save at that boundary
  handler   `tf.distribute.experimental.PreemptionCheckpointHandler.run` around every call: the
            worker that got the signal writes the step to save at into the coordination service;
            a thread on every worker waits for that key, so no step runs a collective for it.
            Its save goes through `save_fn`: the same `tf_impl.checkpoint.save_checkpoint`.

    python -m common.launch --nproc 2 -- python -m tf_impl.preemption_bench \\
        [--steps 200] [--repeats 3] [--latency vote|sigterm|watcher] [--signal-at 20]

The steps of each way are timed interleaved, `--repeats` times. Then one latency measurement,
a launch each since a handler's keys stay in the coordination service for the job's life:
`vote` (SIGUSR1 to worker 1), `sigterm` (the handler's own SIGTERM handler), `watcher` (the
handler polls a SIGUSR1 flag through `TerminationConfig.termination_watcher_fn`, as the suite
would need for SLURM's USR1; the handler polls once a second). Worker 0 prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
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
from tf_impl.checkpoint import save_checkpoint
from tf_impl.model import build_model
from tf_impl.optim import build_optimizer
from tf_impl.step import make_train_step

WAYS = ("plain", "vote", "handler")
BATCH = 64  # per worker


class Saved(Exception):  # noqa: N818 (a way out of the handler's run, not an error)
    """The handler's exit_fn: every worker has saved; leave its run."""


class Bench:
    def __init__(self, args: argparse.Namespace, folder: Path) -> None:
        cfg = config_io.load_config(
            None, ["model.name=mlp", "optim.name=adam", "dist.timeout_s=60"]
        )
        self.info = dist.setup_distributed(cfg, environment.from_environment())
        with self.info.distribution.scope():
            self.model = build_model(cfg.net(), seed=0)
            self.optimizer = build_optimizer(cfg.optim)
        rng = np.random.default_rng(self.info.rank)
        self.batch = (
            tf.constant(rng.standard_normal((BATCH, 28, 28, 1), dtype=np.float32)),
            tf.constant(rng.integers(0, 10, BATCH)),
            tf.constant(1e-3),
        )
        world = self.info.world_size
        self.step, _ = make_train_step(self.model, self.optimizer, self.info, BATCH * world)
        self.args, self.folder = args, folder
        self.flag = False  # a SIGUSR1 reached this worker
        signal.signal(signal.SIGUSR1, lambda *_: setattr(self, "flag", True))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})  # held by common.launch
        self.handler = self._handler(args.latency)

    def _handler(self, latency: str):
        def save() -> None:
            save_checkpoint(
                self.folder / "handler", model=self.model, optimizer=self.optimizer, info=self.info
            )
            self.saved_at = time.time()

        def leave() -> None:
            raise Saved

        watcher = (lambda: self.flag) if latency == "watcher" else None
        config = tf.distribute.experimental.TerminationConfig(
            termination_watcher_fn=watcher, exit_fn=leave, save_fn=save
        )
        state = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer)
        return tf.distribute.experimental.PreemptionCheckpointHandler(
            self.info.distribution.cluster_resolver, state, str(self.folder / "managed"), config
        )

    def vote(self) -> bool:
        return bool(dist.all_reduce_sum(np.array([float(self.flag)]), self.info)[0] > 0)

    def timed(self, way: str) -> float:
        """Seconds per step of `args.steps` steps the `way` way."""
        dist.barrier(self.info)
        start = time.perf_counter()
        for _ in range(self.args.steps):
            if way == "handler":
                self.handler.run(self.step, *self.batch)
            else:
                self.step(*self.batch)
                if way == "vote":
                    self.vote()
        float(self.step(*self.batch))  # the last step's result, so the clock covers it
        return (time.perf_counter() - start) / (self.args.steps + 1)

    def latency(self) -> dict[str, float]:
        """Signal worker 1 at step `signal_at`; steps and seconds until every worker saved."""
        sent = 0.0
        for step in range(1, 10 * self.args.steps):
            if step == self.args.signal_at and self.info.rank == 1:
                sent = time.time()
                os.kill(
                    os.getpid(),
                    signal.SIGUSR1 if self.args.latency != "sigterm" else signal.SIGTERM,
                )
            if self.args.latency == "vote":
                self.step(*self.batch)
                if self.vote():
                    save_checkpoint(
                        self.folder / "vote",
                        model=self.model,
                        optimizer=self.optimizer,
                        info=self.info,
                    )
                    self.saved_at = time.time()
                    break
            else:
                try:
                    self.handler.run(self.step, *self.batch)
                except Saved:
                    break
        times = np.zeros(2 * self.info.world_size)
        times[self.info.rank] = sent
        times[self.info.world_size + self.info.rank] = self.saved_at
        times = dist.all_reduce_sum(times, self.info)
        sent, saved = times[1], times[self.info.world_size :]
        return {
            "steps_after_signal": step - self.args.signal_at,
            "signal_to_saved_s": float(saved.max() - sent),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tf_impl.preemption_bench", description=__doc__)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency", default="vote", choices=["vote", "sigterm", "watcher"])
    parser.add_argument("--signal-at", type=int, default=20)
    args = parser.parse_args(argv)
    own_temp.take()  # AutoGraph's files, which os._exit would leave (common.core.run.own_temp)
    with tempfile.TemporaryDirectory(prefix="preemption-bench-") as scratch:
        bench = Bench(args, Path(scratch))
        for way in WAYS:  # traces and warm-up
            bench.timed(way)
        seconds: dict[str, list[float]] = {way: [] for way in WAYS}
        for _ in range(args.repeats):
            for way in WAYS:
                seconds[way].append(bench.timed(way))
        latency = bench.latency()
        if bench.info.rank == 0:
            ms = {way: round(1e3 * statistics.median(s), 3) for way, s in seconds.items()}
            print(
                json.dumps(
                    {
                        "world": bench.info.world_size,
                        "ms_per_step": ms,
                        "repeats_ms": {
                            w: [round(1e3 * t, 3) for t in s] for w, s in seconds.items()
                        },
                        "latency": args.latency,
                        **latency,
                    }
                ),
                flush=True,
            )
        dist.leave_together(bench.info, 60)
    sys.stdout.flush()
    own_temp.give_back()
    os._exit(0)  # as tf_impl.train: the strategy's teardown stalls for tens of seconds


if __name__ == "__main__":
    raise SystemExit(main())
