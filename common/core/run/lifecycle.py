"""One run as every rank sees it: a `Run` owns its folder, its identity, its records and its
end, from the name all ranks agree on to the one run_end of each launch.

Decisions that touch the file system (may the folder be used, which checkpoint is intact and
belongs to this run) are the chief's; `on_chief` hands the outcome, or the same error, to every
rank, so no rank is left waiting in a collective for a chief that gave up.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from common.core.config.cli import RunOptions
from common.core.config.config import Config
from common.core.config.config_io import save_config, to_dict
from common.core.records import provenance
from common.core.records.console import console_line
from common.core.records.metrics import METRICS_FILENAME, MetricsWriter
from common.core.records.record_json import from_json, to_json
from common.core.records.records import Epoch, Record, Resume, Status
from common.core.run import (
    checkpoint_folders,
    live_tensorboard,
    liveness,
    position,
    recorder,
    resume,
    run_end,
    run_names,
)
from common.core.run.chief import exchange, on_chief
from common.core.run.position import Position
from common.core.train.contract import Trainer
from common.launch import exchanges

# Bytes set aside beside the metrics file for run_end, freed just before it is written: a run
# that failed because its disk filled still ends with a whole run_end (its error is capped at
# common.core.run.failures.LIMIT characters).
RESERVED_FOR_END = 64 * 1024


def _epoch(saved: object) -> Epoch:
    record = from_json(saved, where="checkpoint manifest")
    if not isinstance(record, Epoch):
        raise checkpoint_folders.CheckpointError(
            f"the manifest holds a {record.KIND} among its epochs"
        )
    return record


def _warn(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr, flush=True)


class Run:
    """A started run on this rank: its folder, what a checkpoint must match to resume it, the
    chief's metrics file, its epoch records (earlier launches' too) and its end."""

    def __init__(
        self,
        cfg: Config,
        trainer: Trainer,
        *,
        run_dir: Path,
        identity: dict[str, Any],
        resume_from: Path | None,
        folder_lock: liveness.Held | None = None,
        pids: list[int] | None = None,
    ) -> None:
        self.cfg, self.trainer = cfg, trainer
        self.run_id, self.run_dir = run_dir.name, run_dir
        self.identity = identity
        self.resume_from = resume_from
        self.folder_lock = folder_lock  # the chief's only
        self.pids = pids or [os.getpid()]  # every rank's, in rank order
        self.beacon = _beacon(run_dir, trainer.spec.rank)
        self.writer: MetricsWriter | None = None  # the chief's only
        self.board: live_tensorboard.Board | None = None  # the chief's, with output.tensorboard
        if trainer.spec.is_chief:
            save_config(cfg, run_dir)
            self.writer = MetricsWriter(run_dir / METRICS_FILENAME, reserve=RESERVED_FOR_END)
            self.board = live_tensorboard.Board(run_dir) if cfg.output.tensorboard else None
            run_end.note_run_dir(trainer.spec.run_dir_note, run_dir)
        self.epochs: list[Epoch] = []
        self.started = time.perf_counter()
        self.time_before_s = 0.0  # earlier launches, up to the checkpoint this one resumed
        self._end_lock = threading.Lock()
        self._ended = False

    @classmethod
    def start(cls, cfg: Config, trainer: Trainer, options: RunOptions) -> Run:
        """Agree on the run's name, claim its folder, pick the checkpoint to go on from, then
        write run_start (collective). A refusal writes nothing."""
        spec = trainer.spec
        proposed = run_names.run_name(cfg, trainer.framework, trainer.strategy.name, spec)
        name = exchanges.broadcast_text(proposed, **exchange(trainer))
        claimed = Path(cfg.output.dir) / name
        held: list[liveness.Held] = []  # the chief's lock of the folder

        def claim() -> str:
            name, lock = resume.prepare_folder(claimed, options, spec, _warn)
            held.append(lock)
            return name

        name = on_chief(trainer, claim)
        run_dir = Path(cfg.output.dir) / name
        identity = resume.identity(
            framework=trainer.framework,
            strategy=trainer.strategy.name,
            world_size=spec.world_size,
            config=to_dict(cfg),
        )
        try:
            chosen = on_chief(
                trainer,
                lambda: resume.choose_checkpoint(
                    run_dir, options, identity, _warn, restarted=spec.attempt > 0
                ),
            )["folder"]
        except BaseException:
            for lock in held:  # refused: the folder is free again, and says it was let go
                lock.release()
            raise
        where = f"{spec.node}:{trainer.device_type}:{trainer.device_name}"
        devices = exchanges.gather_texts(where, **exchange(trainer))
        pids = [int(pid) for pid in exchanges.gather_texts(str(os.getpid()), **exchange(trainer))]
        resume_from = checkpoint_folders.root(run_dir) / chosen if chosen else None
        run = cls(
            cfg,
            trainer,
            run_dir=run_dir,
            identity=identity,
            resume_from=resume_from,
            folder_lock=held[0] if held else None,
            pids=pids,
        )
        hosts = [device.split(":", 1)[0] for device in devices]  # every rank's, torchrun too
        run.write(recorder.run_start(cfg, trainer, run_id=name, devices=devices, hosts=hosts))
        return run

    def write(self, record: Record, *, echo: bool = True) -> None:
        """Into the metrics file and onto the console (the chief; no-op on other ranks)."""
        if self.writer:
            self.writer.write(record)
            if echo:
                print(console_line(record), flush=True)
            if self.board:
                self.board.write(record)

    def total_time_s(self) -> float:
        return self.time_before_s + time.perf_counter() - self.started

    def resume(self) -> Position:
        """Restore the chosen checkpoint, if any (collective): where this launch starts. Writes a
        resume record."""
        if self.resume_from is None:
            return Position()
        manifest = checkpoint_folders.read_manifest(self.resume_from)
        loading = time.perf_counter()
        self.trainer.load_checkpoint(self.resume_from)
        self.trainer.barrier()
        load_s = time.perf_counter() - loading
        self.epochs[:] = [_epoch(saved) for saved in manifest["epoch_records"]]
        self.time_before_s = manifest["run_time_s"]
        spec = self.trainer.spec
        start = position.from_manifest(manifest, spec.rank, spec.world_size)
        steps = self.trainer.steps_per_epoch
        self.write(
            Resume(
                time=provenance.utc_now(),
                epoch=start.epoch,
                checkpoint=str(self.resume_from),
                step=start.epoch * steps + start.step if start.step else None,
                world_size_before=start.world_size_before,
                load_s=load_s,
            )
        )
        return start

    def record_epoch(self, record: Epoch) -> None:
        """Write the epoch's record, then count it: a record the disk had no room for is not
        one of the run's completed epochs."""
        self.write(record)
        self.epochs.append(record)

    def checkpoint(
        self, epoch: int, step: int = 0, *, elapsed_s: float | None = None, loss_sum: float = 0.0
    ) -> None:
        """The state after `epoch` epochs and `step` steps of the next (collective): every rank
        saves its part into the staging area, then the chief writes the manifest that makes it
        complete, moves it into place, and drops the oldest beyond train.keep_checkpoints. A
        failed save leaves nothing (`checkpoint_folders`: whole or not at all). Inside an epoch,
        `elapsed_s` is the loop's time so far and `loss_sum` this rank's running loss sum."""
        trainer = self.trainer
        folder = checkpoint_folders.staging_dir(self.run_dir, epoch, step)
        if trainer.spec.is_chief:  # what an abandoned save left: start clean
            checkpoint_folders.discard(self.run_dir)
            folder.mkdir(parents=True)
        saving = time.perf_counter()
        sums: list[float] = []  # every rank's running loss sum, inside an epoch
        if step:
            sums = exchanges.gather_rows([loss_sum], **exchange(trainer))[:, 0].tolist()
        trainer.barrier()
        try:
            trainer.save_checkpoint(folder)
        except BaseException as failure:  # torch's CheckpointException is a BaseException
            stopped = isinstance(failure, (KeyboardInterrupt, SystemExit))
            full = None if stopped else checkpoint_folders.full_disk(folder)
            if full is not None:
                raise full from failure
            raise
        trainer.barrier()
        if trainer.spec.is_chief:
            extras = {
                "run_id": self.run_id,
                **self.identity,
                "elapsed_s": self.epochs[-1].elapsed_s if elapsed_s is None else elapsed_s,
                "run_time_s": self.total_time_s(),
                "epoch_records": [to_json(record) for record in self.epochs],
                "global_step": epoch * trainer.steps_per_epoch + step,
                "loss_sums": sums,
                "save_s": time.perf_counter() - saving,  # every rank's part, staged
            }
            checkpoint_folders.write_manifest(folder, epoch=epoch, step=step, extras=extras)
            checkpoint_folders.publish(folder, self.run_dir, epoch, step)
            checkpoint_folders.prune(self.run_dir, self.cfg.train.keep_checkpoints)
        trainer.barrier()

    def end(self, status: Status, error: str | None) -> bool:
        """Write this launch's run_end and close the metrics file, once: True for the call that
        did (or would have, on a rank without the file), False for any later one. Safe to call
        from the thread that ends a run stuck in a collective."""
        with self._end_lock:
            if self._ended:
                return False
            self._ended = True
            if not self.writer:
                if status != "success" and error:  # the chief may be gone: end for it
                    me = f"rank {self.trainer.spec.rank}"
                    said = error if error.startswith("rank ") else f"{me}: {error}"
                    run_end.end_for_chief(self.run_dir, self.pids[0], said)
                self._let_go()
                return True
            # what a failed save staged goes: after every rank saw its own error (a rank that
            # freed the space first hid the full disk from the others), before run_end
            checkpoint_folders.discard(self.run_dir)
            end = recorder.run_end(
                self.cfg,
                status=status,
                epochs=self.epochs,
                total_time_s=self.total_time_s(),
                error=error,
            )
            try:
                with run_end.end_lock(self.run_dir):
                    self.writer.release()
                    if not self.writer.others_wrote():  # a rank that outlived a hang did
                        self.write(end)
                    self.writer.close()
            except OSError as lost:  # a full or vanished output.dir: say so where it can be seen
                print(f"error: run_end could not be written ({lost}): {end}", file=sys.stderr)
            self._let_go()
            return True

    def blame(self, launcher_says: str) -> str | None:
        """Which rank this rank's failed collective lost (`run_end.blame`)."""
        return run_end.blame(self.run_dir, self.pids, self.trainer.spec.rank, launcher_says)

    def _let_go(self) -> None:
        if self.board is not None:
            self.board.close()
        if self.beacon is not None:
            self.beacon.release()
        if self.folder_lock is not None:
            self.folder_lock.release()


def _beacon(run_dir: Path, rank: int) -> liveness.Beacon | None:
    try:
        return liveness.Beacon(run_dir, rank)
    except (OSError, liveness.FolderBusy) as error:
        _warn(f"rank {rank} has no beacon in {run_dir} ({error}): if it dies, peers cannot tell")
        return None
