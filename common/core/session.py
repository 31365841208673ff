"""One launch of a run, as every rank sees it: the name all ranks agree on, the folder, the
chief's metrics writer, and the checkpoint it goes on from.

Decisions that touch the file system (may the folder be used, which checkpoint is intact and
belongs to this run) are the chief's; `on_chief` hands the outcome, or the same error, to every
rank, so no rank is left waiting in a collective for a chief that gave up.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from common.core import checkpoints, collectives, resume, run
from common.core.config import Config
from common.core.config_io import save_config, to_dict
from common.core.metrics import METRICS_FILENAME, MetricsWriter, console_line
from common.core.run import RunOptions
from common.core.trainer import Trainer

# What a decision on the chief may raise, so that every rank raises it too.
SHARED_ERRORS = {
    error.__name__: error
    for error in (resume.RunRefused, checkpoints.CheckpointError, RuntimeError)
}


@dataclass(kw_only=True)
class Run:
    """One run as this process sees it."""

    run_id: str
    run_dir: Path
    writer: MetricsWriter | None
    """The metrics file, on the chief; None on every other rank."""
    identity: dict
    """Framework, strategy, world size and config: what a checkpoint must match to resume."""
    started: float = field(default_factory=time.perf_counter)
    resume_from: Path | None = None
    epochs: list[dict] = field(default_factory=list)
    """The epoch records so far, including those of earlier launches of a resumed run."""
    time_before_s: float = 0.0
    """How long earlier launches had run when the checkpoint resumed from was written."""

    def write(self, record: dict, *, echo: bool = True) -> None:
        if self.writer:
            self.writer.write(record)
            if echo:
                print(console_line(record), flush=True)

    def total_time_s(self) -> float:
        return self.time_before_s + time.perf_counter() - self.started


def exchange(trainer: Trainer) -> dict:
    """The keyword arguments of `common.core.collectives` for this trainer's ranks."""
    spec = trainer.spec
    return {
        "rank": spec.rank,
        "world_size": spec.world_size,
        "all_reduce_sum": trainer.all_reduce_sum,
    }


def on_chief(trainer: Trainer, decide: Callable[[], object]) -> object:
    """`decide()` on the chief; its JSON-able result on every rank (collective). An error the
    chief meets in it is raised on every rank, with the chief's message."""
    outcome: dict = {}
    if trainer.spec.is_chief:
        try:
            outcome = {"result": decide()}
        except tuple(SHARED_ERRORS.values()) as error:
            outcome = {"error": type(error).__name__, "message": str(error)}
    outcome = json.loads(collectives.broadcast_text(json.dumps(outcome), **exchange(trainer)))
    if "error" in outcome:
        raise SHARED_ERRORS.get(outcome["error"], RuntimeError)(outcome["message"])
    return outcome["result"]


def _warn(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr, flush=True)


def start_run(cfg: Config, trainer: Trainer, options: RunOptions) -> Run:
    """Agree on the run's name, claim its folder, pick the checkpoint to go on from, then
    write run_start (collective). A refusal writes nothing."""
    spec = trainer.spec
    proposed = run.run_name(cfg, trainer.framework, trainer.strategy, spec)
    name = collectives.broadcast_text(proposed, **exchange(trainer))
    claimed = Path(cfg.output.dir) / name
    name = on_chief(trainer, lambda: resume.prepare_folder(claimed, options, spec, _warn))
    run_dir = Path(cfg.output.dir) / name
    identity = resume.identity(
        framework=trainer.framework,
        strategy=trainer.strategy,
        world_size=spec.world_size,
        config=to_dict(cfg),
    )
    chosen = on_chief(trainer, lambda: resume.choose_checkpoint(run_dir, options, identity, _warn))[
        "folder"
    ]
    where = f"{spec.node}:{trainer.device_type}:{trainer.device_name}"
    devices = collectives.gather_texts(where, **exchange(trainer))
    writer = None
    if spec.is_chief:
        save_config(cfg, run_dir)
        writer = MetricsWriter(run_dir / METRICS_FILENAME)
    current = Run(run_id=name, run_dir=run_dir, writer=writer, identity=identity)
    if chosen:
        current.resume_from = checkpoints.root(run_dir) / chosen
    record = run.run_start_record(
        cfg,
        spec,
        run_id=name,
        framework=trainer.framework,
        framework_version=trainer.framework_version,
        strategy=trainer.strategy,
        device_type=trainer.device_type,
        devices=devices,
        versions=trainer.versions(),
        hosts=[device.split(":", 1)[0] for device in devices],  # every rank's, torchrun too
        precision=trainer.precision,
        numerics=trainer.numerics(),
        threads=trainer.threads(),
    )
    current.write(record)
    return current


def resume_state(trainer: Trainer, current: Run) -> tuple[int, float]:
    """Restore the chosen checkpoint, if any (collective); (first epoch to train, loop seconds
    of the earlier launches). Writes a resume record."""
    if current.resume_from is None:
        return 0, 0.0
    manifest = checkpoints.read_manifest(current.resume_from)
    trainer.load_checkpoint(current.resume_from)
    current.epochs[:] = manifest["epoch_records"]
    current.time_before_s = manifest["run_time_s"]
    record = {
        "record": "resume",
        "time": run.utc_now(),
        "epoch": manifest["epoch"],
        "checkpoint": str(current.resume_from),
    }
    current.write(record)
    return manifest["epoch"], manifest["elapsed_s"]


def save_checkpoint(cfg: Config, trainer: Trainer, current: Run, *, epoch: int) -> None:
    """The state after `epoch` epochs (collective): every rank saves its part, then the chief
    writes the manifest that makes it complete, and drops the oldest beyond keep_checkpoints."""
    folder = checkpoints.epoch_dir(current.run_dir, epoch)
    if trainer.spec.is_chief:  # a folder of an abandoned later attempt: start it clean
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    trainer.barrier()
    trainer.save_checkpoint(folder)
    trainer.barrier()
    if trainer.spec.is_chief:
        extras = {
            "run_id": current.run_id,
            **current.identity,
            "elapsed_s": current.epochs[-1]["elapsed_s"],
            "run_time_s": current.total_time_s(),
            "epoch_records": current.epochs,
        }
        checkpoints.write_manifest(folder, epoch=epoch, extras=extras)
        checkpoints.prune(current.run_dir, cfg.train.keep_checkpoints)
    trainer.barrier()
