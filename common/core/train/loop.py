"""The epoch loop of both frameworks: one driver here, one small contract per framework.

The driver owns, once, everything that does not depend on the framework: the run (a name all
ranks agree on, its folder and records: `common.core.run.lifecycle.Run`), resume from the latest
complete checkpoint, the learning-rate schedule, step timing and step records, the epoch record
and its console line, checkpoint cadence, the preemption vote, the stop rules, and a run_end
record on every way out. A framework hands it one `Trainer` (`torch_impl.train.TorchTrainer`,
`tf_impl.train.TfTrainer`): build, step, evaluate, measure memory, checkpoint, export, and the
few collectives the driver needs.
"""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import dataclass

import numpy as np

from common.core.config.cli import RunOptions
from common.core.config.config import Config
from common.core.measure import memory, replicas, traffic
from common.core.measure.traffic import Call
from common.core.records.entries import StepSplit, TrafficEntry
from common.core.records.records import Status
from common.core.run import recorder
from common.core.run.chief import exchange
from common.core.run.lifecycle import Run
from common.core.run.resume import RunRefused
from common.core.run.stop_signals import (
    PREEMPTED_EXIT,
    STOP_WAIT_S,
    Aborted,
    Diverged,
    PeerFailed,
    Preempted,
    Stops,
)
from common.core.run.stuck_collective import LastWords
from common.core.run.turns import Turns
from common.core.train.contract import Trainer
from common.core.train.epoch import train_epoch
from common.core.train.mid_epoch import MidEpoch
from common.core.train.progress import Progress
from common.core.train.tracing import Traces
from common.models import weights


def train_epochs(
    cfg: Config, trainer: Trainer, run: Run, options: RunOptions, stops: Stops
) -> None:
    """Build, resume, then train, evaluate, record and checkpoint epoch by epoch; export."""
    trainer.build()
    start = run.resume()
    elapsed_before = start.elapsed_s
    # MFU's terms: the model's FLOPs per training sample and the ranks' summed peak (collective).
    flops = weights.train_flops_per_sample(cfg.net())
    peak_total = float(trainer.all_reduce_sum(np.array([trainer.peak_flops()]))[0])
    progress = Progress(
        enabled=options.progress and trainer.spec.is_chief,
        epochs=cfg.train.epochs,
        steps_per_epoch=trainer.steps_per_epoch,
        global_batch=trainer.global_batch,
        every_s=options.progress_every_s,
    )
    loop_start = time.perf_counter()
    reprobed = False
    sent: list[TrafficEntry] | None = None  # counted in the launch's first epoch
    split: StepSplit | None = None  # the median of the steps profiled in the counted epoch
    mid = MidEpoch(
        cfg, trainer, run, options, stops, lambda: elapsed_before + time.perf_counter() - loop_start
    )
    steps = trainer.steps_per_epoch
    wanted = cfg.output.profile_steps
    traces = Traces(trainer, run.run_dir, wanted) if wanted else None
    turns = Turns(options.in_turn_fd)  # the bench's plain loop beside this run, if any
    for epoch in range(start.epoch, cfg.train.epochs):
        turns.wait()
        done = epoch + 1
        trainer.reset_peak_memory()
        counting = trainer.spec.world_size > 1 and epoch == start.epoch
        train_calls: list[Call] | None = [] if counting else None
        resumed_inside = epoch == start.epoch and start.step > 0
        traced = traces if epoch == start.epoch else None
        try:
            trained = train_epoch(
                cfg,
                trainer,
                epoch,
                run,
                progress,
                train_calls,
                start_step=start.step if resumed_inside else 0,
                carried=start.loss_sum if resumed_inside else 0.0,
                mid=mid,
                traces=traced,
            )
        finally:  # what was traced is written, also when the epoch stopped early
            if traced is not None:
                traced.stop()
        trainer.synchronize()
        eval_start = time.perf_counter()
        if train_calls is not None:
            split = trained.step_split  # the median of the steps profiled
            (val_loss, val_accuracy), eval_calls = trainer.count_calls(trainer.evaluate)
            eval_s = time.perf_counter() - eval_start
            units = trainer.traffic_units()
            sent = traffic.record(
                cfg, trainer.strategy, trainer.dims, units, train_calls, eval_calls
            )
        else:
            val_loss, val_accuracy = trainer.evaluate()
            eval_s = time.perf_counter() - eval_start
        evaluated = recorder.Evaluation(loss=val_loss, accuracy=val_accuracy, time_s=eval_s)
        record = recorder.epoch(
            number=done,
            trained=trained,
            evaluated=evaluated,
            global_batch=trainer.global_batch,
            clock=trainer.train_clock,
            elapsed_s=elapsed_before + time.perf_counter() - loop_start,
            memory=memory.gather_memory(trainer.memory_use(), **exchange(trainer)),
            replicas=replicas.gather_replica_state(
                trainer.replica_digest(), trainer.loss_scaling(), **exchange(trainer)
            ),
            flops_per_sample=flops,
            peak_flops=peak_total,
            traffic=sent,
            step_split=split,
        )
        run.record_epoch(record)
        replicas.check_agreement(record)  # a broken run's numbers mean nothing: stop it
        if record.mfu is not None and record.mfu > 1 and not reprobed:  # the peak read low
            reprobed = True
            peak_total = float(trainer.all_reduce_sum(np.array([trainer.peak_flops(True)]))[0])
            if trainer.spec.is_chief:
                print(
                    f"warning: MFU {record.mfu:.0%} in epoch {done} exceeds the peak measured "
                    f"for it; measured again: {peak_total / 1e9:,.1f} GFLOP/s for the ranks "
                    "(used from the next epoch; common.core.measure.peak)",
                    file=sys.stderr,
                    flush=True,
                )
        if cfg.train.stop_on_divergence and (why := recorder.divergence([record])):
            raise Diverged(f"{why}: stopped there (train.stop_on_divergence)")
        preempted = trainer.all_reduce_sum(np.array([float(stops.requested)]))[0] > 0
        step_stop = options.stop_after_step == done * steps
        stopping = options.stop_after_epoch == done or step_stop or preempted
        every, every_steps = cfg.train.checkpoint_every_epochs, cfg.train.checkpoint_every_steps
        if (
            (every and done % every == 0)
            or (every_steps and done * steps % every_steps == 0)
            or stopping
        ):
            run.checkpoint(done)
        turns.give()
        if preempted and done < cfg.train.epochs:
            raise Preempted(f"preempted (SIGUSR1): checkpointed epoch {done}; resume")
        if stopping and done < cfg.train.epochs:
            how = (
                f"step {done * steps} (--stop-after-step)"
                if step_stop
                else f"epoch {done} (--stop-after-epoch)"
            )
            raise Aborted(f"stopped after {how}; --resume")
    if cfg.output.save_model:
        trainer.export_model(run.run_dir)
    trainer.leave_together()


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a launch ended: its run_end status and error, and the process's exit code."""

    status: Status
    error: str | None
    code: int


def execute(cfg: Config, options: RunOptions, trainer: Trainer) -> tuple[str, int]:
    """One training program's body, the same on both sides: start the run, train it, and end
    it with its run_end on every way out (success, --stop-after-epoch, preemption, a signal, a
    failure, even one that does not derive from Exception, a stop while stuck in a
    collective). A launch refused before its run started (a folder of another run, a
    checkpoint of another config) writes nothing. (status, exit code); the caller leaves."""
    ending = Ending(cfg, options, trainer)
    ending.stops.install()
    last_words = LastWords(ending.stopped_while_blocked)
    last_words.start()
    try:
        try:
            run = ending.run = Run.start(cfg, trainer, options)
            train_epochs(cfg, trainer, run, options, ending.stops)
        except BaseException as ended:  # noqa: BLE001 - DCP's CheckpointException is one
            ending.stops.record_only()  # the run is ending: a signal now is noted, not raised
            outcome = ending.outcome(ended, last_words)
        else:
            diverged = recorder.divergence(run.epochs)  # trained to the end on NaN: no result
            outcome = (
                Outcome("diverged", f"{diverged}; trained on to train.epochs", 0)
                if diverged
                else Outcome("success", None, 0)
            )
    except BaseException as late:  # noqa: BLE001 - a signal while the first one was handled
        outcome = Outcome("failed", f"while stopping: {type(late).__name__}: {late}", 1)
    finally:
        Stops.quiet()  # from here on no signal may interrupt the run's end
    if ending.run is not None:
        ending.run.end(outcome.status, outcome.error)
    last_words.finish()
    sys.stdout.flush()
    sys.stderr.flush()
    return outcome.status, outcome.code


class Ending:
    """How a launch ends, off the step's path: its stop signals, its run once started, and the
    outcome (status, error, exit code) of each way out."""

    def __init__(self, cfg: Config, options: RunOptions, trainer: Trainer) -> None:
        self.cfg, self.options, self.trainer = cfg, options, trainer
        self.stops = Stops(trainer.spec.stop_reason_file, trainer.spec.rank)
        self.run: Run | None = None

    def stopped_while_blocked(self, signum: int) -> bool:
        """From the LastWords thread: end the run of a rank stuck in a collective. False when
        the main thread is ending it itself."""
        if self.run is None:
            return True
        stop = self.stops.describe(signum)
        status: Status = "failed" if isinstance(stop, PeerFailed) else "aborted"
        ended = self.run.end(status, f"{stop} (while blocked in a collective)")
        sys.stdout.flush()
        return ended

    def outcome(self, ended: BaseException, last_words: LastWords) -> Outcome:
        if isinstance(ended, RunRefused):  # the chief's word, raised on every rank: said once
            if self.trainer.spec.is_chief:
                print(f"error: {ended}", file=sys.stderr)
            return Outcome("failed", str(ended), 2)
        if isinstance(ended, PeerFailed):
            return Outcome("failed", str(ended), 1)
        if isinstance(ended, Diverged):
            return Outcome("diverged", str(ended), 0)
        if isinstance(ended, Preempted):
            return Outcome("aborted", str(ended), PREEMPTED_EXIT)
        if isinstance(ended, Aborted):
            asked = self.options.stop_after_epoch or self.options.stop_after_step
            return Outcome("aborted", str(ended), 0 if asked else 143)
        return self.failed(ended, last_words)

    def failed(self, failure: BaseException, last_words: LastWords) -> Outcome:
        # A dead or hung peer surfaces here as a collective error; so does a peer that was
        # cancelled a moment before this rank's own SIGTERM arrives (scancel signals every
        # rank at once): wait for that signal briefly before calling the run failed.
        stops = self.stops
        if stops.stopped is None and last_words.stop_arriving(STOP_WAIT_S):
            stops.stopped = stops.stopped or stops.describe(last_words.signum)
        if stops.stopped is not None:  # a stop signal, or the framework wrapped one
            failed = isinstance(stops.stopped, PeerFailed)
            status: Status = "failed" if failed else "aborted"
            return Outcome(status, str(stops.stopped), 1 if failed else 143)
        error = self.trainer.describe_failure(failure)
        if self.run is not None and self.trainer.lost_peer(failure) is not None:
            culprit = self.run.blame(stops.launcher_says())  # the rank at fault, then this one
            error = f"{culprit}; noticed by {error}" if culprit else error
        print(f"error: {error}", file=sys.stderr)
        traceback.print_exc()
        code = failure.code if isinstance(failure, SystemExit) else None
        return Outcome("failed", error, code if isinstance(code, int) and code else 1)
