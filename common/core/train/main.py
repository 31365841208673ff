"""The body of both training programs (`torch_impl.train.main`, `tf_impl.train.main`): read the
command line and the launch, check everything that can be checked before any process group
exists, start the framework, run the driver, and leave with its exit code. Each framework hands
in a `Side`: its own checks, its start-up, its trainer, and what its failed start-up raises.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from common.core.config import cli, devices
from common.core.config.config import Config
from common.core.config.config_io import config_from_args
from common.core.run import live_tensorboard, own_temp
from common.core.train import killed_rank, loop
from common.core.train.contract import Trainer
from common.data import mnist
from common.launch import environment
from common.launch.cluster import ClusterSpec


@dataclass(frozen=True, kw_only=True)
class Side:
    """What one framework's training program adds to the shared body."""

    framework: str
    """"torch" or "tf"."""
    prepare: Callable[[Config, ClusterSpec], Config]
    """The framework's own choices and checks before anything starts (a strategy resolved,
    options that do not combine refused with ValueError)."""
    setup: Callable[[Config, ClusterSpec], Any]
    """Take the device and the threads, meet the peers: the framework's DistInfo."""
    trainer: Callable[[Config, Any], Trainer]
    """The Trainer of a set-up rank."""
    startup_errors: tuple[type[BaseException], ...]
    """What a start-up that did not complete raises (peers that never came): exit 1."""
    own_temp_folder: bool = False
    """Whether the process writes its temporary files into a folder of its own that leaving
    removes (`common.core.run.own_temp`): TensorFlow's, whose AutoGraph files only an atexit
    handler removes."""


def check_launch(cfg: Config, world_size: int, max_restarts: int = 0) -> None:
    """Everything that can be checked before a run folder or a process group exists, on every
    rank alike: the batch against the world and the data, restarts against the checkpoint
    cadence, and the data files' checksums. Raises ValueError naming the fix."""
    global_batch = cfg.train.global_batch_size(world_size)
    cfg.train.micro_batch_size(world_size)  # the micro-batches split each rank's batch
    samples = min(cfg.data.train_limit or mnist.TRAIN_SAMPLES, mnist.TRAIN_SAMPLES)
    if samples < global_batch:
        raise ValueError(
            f"data.train_limit={cfg.data.train_limit} leaves {samples} training samples, fewer "
            f"than one global batch of {global_batch}; raise data.train_limit or lower "
            "train.batch_size"
        )
    if max_restarts:
        if not (cfg.train.checkpoint_every_steps or cfg.train.checkpoint_every_epochs):
            raise ValueError(
                f"the launcher may restart the ranks {max_restarts} time(s) (--max-restarts, "
                "TORCHELASTIC_MAX_RESTARTS), but the run has no checkpoint cadence: a restart "
                "would start the run over. Set train.checkpoint_every_steps=N (or "
                "train.checkpoint_every_epochs=N)"
            )
    if cfg.output.tensorboard and not live_tensorboard.available():
        raise ValueError(
            "output.tensorboard=true needs tensorboardX: pip install tensorboardX (the "
            "'tensorboard' extra), or set output.tensorboard=false"
        )
    if cfg.data.name == "synthetic":  # no files: generated in memory
        return
    try:
        mnist.check_files(cfg.data.dir)
    except mnist.DataError as error:
        raise ValueError(str(error)) from None


def refuse_early(prog: str, description: str | None) -> None:
    """What `main` checks that needs no framework (the config, the launch variables, the
    batch, the data files), before the framework is imported: a bad command line or launch
    exits 2 in half a second instead of after TensorFlow's 3 s import (torch's 1.5 s), and
    says so without the framework's start-up lines. `main` checks it all again, with the
    framework's own checks."""
    args, _ = cli.parse_train_args(prog, description, None)
    try:
        spec = environment.from_environment()
        check_launch(config_from_args(args), spec.world_size, spec.max_restarts)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        _leave(2)


def main(side: Side, prog: str, description: str | None, argv: list[str] | None = None) -> NoReturn:
    """Train as the command line and the launch say; leave with the run's exit code: 0, 2 for
    a launch refused before anything started, 1 for a start-up that did not complete, else the
    driver's (`common.core.train.loop`). A rank that native code kills (SIGSEGV, or SIGABRT
    from glibc's heap checks) first prints every thread's Python stack to its stderr."""
    faulthandler.enable(all_threads=True)
    if side.own_temp_folder:
        own_temp.take()
    args, options = cli.parse_train_args(prog, description, argv)
    try:
        spec = environment.from_environment()
        cfg = side.prepare(config_from_args(args), spec)
        check_launch(cfg, spec.world_size, spec.max_restarts)
        killed_rank.kill_step(spec, os.environ)  # a test's fault, checked before any work
        info = side.setup(cfg, spec)
    except ValueError as error:  # bad config or launch variables: nothing has started
        print(f"error: {error}", file=sys.stderr)
        _leave(2)
    except side.startup_errors as error:  # the peers did not all come in time
        print(f"error: {error}", file=sys.stderr)
        _leave(1)
    cfg = devices.resolve_eval_batch(cfg, side.framework, info.device_type)
    # held until the exit: it holds the process group
    trainer = killed_rank.wrap(side.trainer(cfg, info))
    if spec.attempt and not options.resume:  # restarted by an elastic launcher: go on
        options = dataclasses.replace(options, auto_resume=True)
    _, code = loop.execute(cfg, options, trainer)
    _leave(code)


def _leave(code: int) -> NoReturn:
    """Leave at once, without running destructors, whatever the outcome; every record is
    already flushed. Peers may be gone after a failure. After a success, freeing a DDP model
    frees the process group its Reducer still holds: ~ProcessGroupGloo then joins gloo's
    worker threads while holding the GIL, and a worker freeing a finished AsyncWork needs the
    GIL (a deadlock seen once in a sweep; py-spy: ~Reducer -> ~ProcessGroupGloo ->
    thread::join). TensorFlow's strategy teardown (gRPC server, coordination service
    heartbeats, tf.data threads of distributed iterators) stalled workers 34-100 s after their
    work was done. Leaving runs no atexit handler, so the process's own temporary folder is
    removed here."""
    own_temp.give_back()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
