"""The epoch loop of both frameworks: one driver here, one small contract per framework.

The driver owns, once, everything that does not depend on the framework: the run's start (a
name all ranks agree on, its folder, the run_start record), resume from the latest complete
checkpoint, the learning-rate schedule, step timing and step records, the epoch record and its
console line, checkpoint cadence, the preemption vote, the stop rules, and a run_end record on
every way out. A framework hands it one `Trainer` (`torch_impl.train.TorchTrainer`,
`tf_impl.train.TfTrainer`): build, step, evaluate, measure memory, checkpoint, export, and the
few collectives the driver needs.
"""

from __future__ import annotations

import signal
import sys
import time
import traceback
from pathlib import Path
from typing import SupportsFloat

import numpy as np

from common.core import memory, precision, resume, run, session
from common.core.config import Config
from common.core.lastwords import LastWords
from common.core.optim import learning_rate
from common.core.progress import Progress
from common.core.trainer import Trainer
from common.models import weights


class Aborted(Exception):
    """SIGTERM or SIGINT arrived (a launcher stopping its ranks, SLURM preemption), or
    --stop-after-epoch was reached."""


class Preempted(Aborted):
    """SIGUSR1 (SLURM's warning before the time limit) arrived on some rank: the run
    checkpointed at the end of the epoch and stops with PREEMPTED_EXIT, to be requeued."""


# How long a rank whose collective failed waits for a stop signal that may be on its way.
STOP_WAIT_S = 1.0

# The exit status of a preempted run: "try again later" (EX_TEMPFAIL). slurm/run_slurm.sh
# requeues the job when its step ends with it.
PREEMPTED_EXIT = 75


class PeerFailed(Aborted):
    """The launcher stopped this rank because another rank had failed; its message says which."""


class Preemption:
    """Whether SIGUSR1 reached this process. One per run; the ranks vote on it at the end of
    every epoch, since it may reach only some of them."""

    def __init__(self, stop_reason_file: str = "") -> None:
        self.requested = False
        self.stop_reason_file = stop_reason_file
        self.stopped: Aborted | None = None  # what SIGTERM/SIGINT raised, if they came

    def install(self) -> None:
        """SIGUSR1 asks for a checkpoint and a stop at the end of the epoch; SIGTERM and SIGINT
        raise `Aborted` at once, so the run still writes its run_end record."""
        signal.signal(signal.SIGUSR1, self._request)
        signal.signal(signal.SIGTERM, self._abort)
        signal.signal(signal.SIGINT, self._abort)

    def _request(self, signum: int, frame) -> None:
        self.requested = True

    @staticmethod
    def quiet() -> None:
        """The run is ending: no further signal may interrupt its run_end. SIGTERM and SIGINT
        are ignored from here on, and a helper process's death (torch's DataLoader raises on
        SIGCHLD) no longer raises in this one."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)

    def record_only(self) -> None:
        """From now on SIGTERM and SIGINT are noted in `stopped`, not raised: the run is
        already on its way out."""
        signal.signal(signal.SIGTERM, self._note)
        signal.signal(signal.SIGINT, self._note)

    def describe(self, signum: int) -> Aborted:
        """What stopping by `signum` means: a launcher stopping the ranks because another
        failed (its reason file says which), or a stop from outside (scancel, Ctrl-C)."""
        stopped = f"stopped by signal {signal.Signals(signum).name}"
        reason = _read_reason(self.stop_reason_file)
        if reason.startswith("rank "):
            return PeerFailed(f"{stopped} from the launcher: {reason}")
        return Aborted(f"{stopped}: {reason}" if reason else stopped)

    def _note(self, signum: int, frame) -> None:
        if self.stopped is None:
            self.stopped = self.describe(signum)

    def _abort(self, signum: int, frame) -> None:
        self.stopped = self.describe(signum)
        raise self.stopped


def _read_reason(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip() if path else ""
    except OSError:
        return ""


def train_epoch(
    cfg: Config, trainer: Trainer, epoch: int, current: session.Run, progress: Progress
) -> run.EpochResult:
    """Train one epoch (0-based) under the train clock; the clock pauses for step records and
    progress lines."""
    steps = trainer.steps_per_epoch
    every = cfg.train.log_every_steps
    losses: list[SupportsFloat] = []
    clock = trainer.step_clock()
    paused = 0.0
    lr = learning_rate(cfg.optim, epoch, 0, steps, cfg.train.epochs)
    world = trainer.spec.world_size
    trainer.barrier()
    trainer.synchronize()
    progress.start_epoch()
    start = time.perf_counter()
    clock.step_started()
    for step, batch in enumerate(trainer.train_batches(epoch)):
        lr = learning_rate(cfg.optim, epoch, step, steps, cfg.train.epochs)
        loss = trainer.train_step(batch, lr)
        clock.step_done()
        now = time.perf_counter()
        losses.append(loss)
        global_step = epoch * steps + step + 1
        if every and global_step % every == 0:
            step_loss = trainer.all_reduce_sum(np.array([float(loss)]))[0]
            step_record = {
                "record": "step",
                "epoch": epoch + 1,
                "step": global_step,
                "loss": float(step_loss),
                "lr": lr,
            }
            current.write(step_record, echo=False)
            paused += time.perf_counter() - now
        paused += progress.update(
            epoch=epoch,
            step=step + 1,
            train_s=time.perf_counter() - start - paused,
            loss=lambda loss=loss: float(loss) * world,  # the chief's own mean from its share
        )
        clock.step_started()
    trainer.synchronize()
    train_time = time.perf_counter() - start - paused
    progress.end_epoch()
    local = 0.0
    for loss in losses:  # in step order, in float64: the same sum on every launch
        local += float(loss)
    total = trainer.all_reduce_sum(np.array([local]))[0]
    step_times = clock.step_times(train_time)
    return run.EpochResult(
        loss=float(total) / steps, time_s=train_time, step_times=step_times, lr=lr, steps=steps
    )


def train_epochs(
    cfg: Config,
    trainer: Trainer,
    *,
    options: run.RunOptions,
    current: session.Run,
    preemption: Preemption,
) -> None:
    """Build, resume, then train, evaluate, record and checkpoint epoch by epoch; export."""
    trainer.build()
    start_epoch, elapsed_before = session.resume_state(trainer, current)
    # MFU's terms: the model's FLOPs per training sample and the ranks' summed peak (collective).
    flops = weights.train_flops_per_sample(cfg.model)
    peak_total = float(trainer.all_reduce_sum(np.array([trainer.peak_flops()]))[0])
    progress = Progress(
        enabled=options.progress and trainer.spec.is_chief,
        epochs=cfg.train.epochs,
        steps_per_epoch=trainer.steps_per_epoch,
        global_batch=trainer.global_batch,
        every_s=options.progress_every_s,
    )
    loop_start = time.perf_counter()
    for epoch in range(start_epoch, cfg.train.epochs):
        done = epoch + 1
        trainer.reset_peak_memory()
        trained = train_epoch(cfg, trainer, epoch, current, progress)
        trainer.synchronize()
        eval_start = time.perf_counter()
        val_loss, val_accuracy = trainer.evaluate()
        evaluated = run.Evaluation(
            loss=val_loss, accuracy=val_accuracy, time_s=time.perf_counter() - eval_start
        )
        record = run.epoch_record(
            epoch=done,
            trained=trained,
            evaluated=evaluated,
            global_batch=trainer.global_batch,
            clock=trainer.train_clock,
            elapsed_s=elapsed_before + time.perf_counter() - loop_start,
            memory=memory.gather_memory(trainer.memory_use(), **session.exchange(trainer)),
            replicas=precision.gather_replica_state(
                trainer.replica_digest(), trainer.loss_scaling(), **session.exchange(trainer)
            ),
            flops_per_sample=flops,
            peak_flops=peak_total,
        )
        current.epochs.append(record)
        current.write(record)
        precision.check_agreement(record)  # a broken run's numbers mean nothing: stop it
        preempted = trainer.all_reduce_sum(np.array([float(preemption.requested)]))[0] > 0
        stopping = options.stop_after_epoch == done or preempted
        every = cfg.train.checkpoint_every_epochs
        if (every and done % every == 0) or stopping:
            session.save_checkpoint(cfg, trainer, current, epoch=done)
        if preempted and done < cfg.train.epochs:
            raise Preempted(f"preempted (SIGUSR1): checkpointed epoch {done}; resume")
        if stopping and done < cfg.train.epochs:
            raise Aborted(f"stopped after epoch {done} (--stop-after-epoch); --resume")
    if cfg.output.save_model:
        trainer.export_model(current.run_dir)
    trainer.leave_together()


def execute(cfg: Config, options: run.RunOptions, trainer: Trainer) -> tuple[str, int]:
    """One training program's body, the same on both sides. Every way out of a started run
    (success, --stop-after-epoch, preemption, a signal, a failure, even one that does not derive
    from Exception, a stop while stuck in a collective) ends with the chief's run_end record.
    A launch refused before its run started (a folder of another run, a checkpoint of another
    config) writes nothing. Returns (status, exit code); the caller decides how to leave."""
    preemption = Preemption(trainer.spec.stop_reason_file)
    preemption.install()
    current: list[session.Run] = []

    def write_end(status: str, error: str | None) -> None:
        if not (current and current[0].writer):
            return
        end = run.run_end_record(
            cfg,
            status=status,
            epochs=current[0].epochs,
            total_time_s=current[0].total_time_s(),
            error=error,
        )
        try:
            current[0].write(end)
            current[0].writer.close()
        except OSError as lost:  # a full or vanished output.dir: say so where it can be seen
            print(f"error: run_end could not be written ({lost}): {end}", file=sys.stderr)

    def stuck(signum: int) -> None:  # from the LastWords thread
        stop = preemption.describe(signum)
        status = "failed" if isinstance(stop, PeerFailed) else "aborted"
        write_end(status, f"{stop} (while blocked in a collective)")
        sys.stdout.flush()

    last_words = LastWords(stuck)
    last_words.start()
    try:
        status, error, code = _run(cfg, options, trainer, preemption, current, last_words)
    except BaseException as late:  # noqa: BLE001 - a signal while the first one was handled
        Preemption.quiet()
        status, error, code = "failed", f"while stopping: {type(late).__name__}: {late}", 1
    Preemption.quiet()
    if last_words.claim():
        write_end(status, error)
    last_words.finish()
    sys.stdout.flush()
    sys.stderr.flush()
    return status, code


def _run(
    cfg: Config,
    options: run.RunOptions,
    trainer: Trainer,
    preemption: Preemption,
    current: list[session.Run],
    last_words: LastWords,
) -> tuple[str, str | None, int]:
    """(status, error, exit code) of the run; `current` receives the Run once it started."""
    try:
        current.append(session.start_run(cfg, trainer, options))
        train_epochs(cfg, trainer, options=options, current=current[0], preemption=preemption)
    except resume.RunRefused as refused:
        Preemption.quiet()
        print(f"error: {refused}", file=sys.stderr)
        return "failed", str(refused), 2
    except PeerFailed as stop:
        Preemption.quiet()
        return "failed", str(stop), 1
    except Preempted as stop:
        Preemption.quiet()
        return "aborted", str(stop), PREEMPTED_EXIT
    except Aborted as stop:
        Preemption.quiet()
        return "aborted", str(stop), 0 if options.stop_after_epoch else 143
    except BaseException as failure:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
        # A dead or hung peer surfaces here as a collective error; so does a peer that was
        # cancelled a moment before this rank's own SIGTERM arrives (scancel signals every
        # rank at once): wait for that signal briefly before calling the run failed.
        preemption.record_only()
        if preemption.stopped is None and last_words.stop_arriving(STOP_WAIT_S):
            preemption.stopped = preemption.stopped or preemption.describe(last_words.signum)
        Preemption.quiet()
        if preemption.stopped is not None:  # a stop signal, or the framework wrapped one
            failed = isinstance(preemption.stopped, PeerFailed)
            return (
                ("failed" if failed else "aborted"),
                str(preemption.stopped),
                1 if failed else 143,
            )
        error = trainer.describe_failure(failure)
        print(f"error: {error}", file=sys.stderr)
        traceback.print_exc()
        exit_code = failure.code if isinstance(failure, SystemExit) else None
        return "failed", error, exit_code if isinstance(exit_code, int) and exit_code else 1
    return "success", None, 0
