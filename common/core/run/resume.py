"""Whether a launch may write into a run folder, and from which checkpoint it goes on.

One run is one folder is one identity: a launch without --resume/--auto-resume creates its
folder exclusively, and a resumed launch must be the same run as the checkpoint it loads: the
same framework and config, except for the keys in MAY_CHANGE. The world size may change where
the strategy reshards, the strategy where the new one loads the old one's checkpoints
(`common.core.run.resize`); the global batch stays.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from common.core import whole_files
from common.core.config.cli import RunOptions
from common.core.config.config import HOW_NOT_WHAT, is_listed
from common.core.config.config_io import CONFIG_FILENAME, flatten
from common.core.records.records import METRICS_FILENAME
from common.core.run import checkpoint_folders, liveness, resize
from common.launch.cluster import ClusterSpec, unique_stamp

# Written into a run folder when it is created: which launch made it. A SLURM job may only go
# on with a folder its own earlier start made (`is_own_folder`).
LAUNCH_FILE = "launch.json"

# What may differ between the launches of one run: how it is launched, recorded and analysed,
# and how long it trains (a run can be extended). Anything else would make the resumed run
# another run than the one that was checkpointed.
MAY_CHANGE = (*HOW_NOT_WHAT, "train.epochs")
RESUME_HINT = "--resume / --auto-resume"


class RunRefused(ValueError):
    """The launch asks for something that would mix two runs; nothing was written (exit 2)."""


def identity(
    *, framework: str, strategy: str, world_size: int, config: dict[str, Any]
) -> dict[str, Any]:
    """What a checkpoint records of the run that wrote it."""
    return {
        "framework": framework,
        "strategy": strategy,
        "world_size": world_size,
        "config": config,
    }


def conflicts(
    saved: dict[str, Any], current: dict[str, Any], held_in: str = "the checkpoint"
) -> list[str]:
    """Why the run described by `current` (an `identity`) may not go on from a checkpoint
    whose manifest is `saved` (or a folder `held_in` says); empty when it may. A checkpoint
    may load at another world size, and into another strategy, where `resize.changes` allows
    it."""
    resumed = held_in == "the checkpoint"  # a run that starts over keeps no schedule
    old, new = flatten(saved.get("config", {})), flatten(current["config"])
    reloads = resumed and saved.get("framework") == current["framework"]
    keys = ("framework",) if reloads else ("framework", "strategy", "world_size")
    found = [
        f"{key}: {saved.get(key)!r} in {held_in}, {current[key]!r} now"
        for key in keys
        if saved.get(key) != current[key]
    ]
    if reloads:
        found += resize.changes(saved, current, old, new)
    free = (*MAY_CHANGE, *resize.LAYOUT) if reloads else MAY_CHANGE
    for key in sorted(set(old) | set(new)):
        if is_listed(key, free) or old.get(key) == new.get(key):
            continue
        found.append(f"{key}: {old.get(key, '(absent)')!r} in {held_in}, {new.get(key)!r} now")
    onecycle = new.get("optim.schedule") == "onecycle"
    if resumed and onecycle and old.get("train.epochs") != new.get("train.epochs"):
        found.append(
            "train.epochs: the onecycle schedule spans all epochs, so changing them changes "
            f"the learning rate of the epochs left ({old.get('train.epochs')} -> "
            f"{new.get('train.epochs')})"
        )
    return found


def launch_identity(spec: ClusterSpec) -> dict[str, Any]:
    """What `LAUNCH_FILE` records of the launch that creates a run folder."""
    return {"slurm_job_id": spec.slurm_job_id, "cluster": spec.cluster_name}


def is_own_folder(run_dir: Path, spec: ClusterSpec) -> bool:
    """Whether this SLURM job made `run_dir` in an earlier start: the same job id on the same
    cluster, and this start is a requeue (SLURM_RESTART_COUNT > 0) or an elastic restart of
    the ranks (TORCHELASTIC_RESTART_COUNT > 0). Job ids restart when a
    cluster's state is wiped and repeat across clusters that share a file system, so a first
    start that finds its folder taken has found another job's run."""
    try:
        saved = json.loads((run_dir / LAUNCH_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    restarted = spec.restart_count > 0 or spec.attempt > 0  # requeued, or elastic restarts
    return restarted and saved == launch_identity(spec)


def _create(run_dir: Path, spec: ClusterSpec, *, exist_ok: bool) -> None:
    """mkdir `run_dir` (FileExistsError unless `exist_ok`); a folder made here gets LAUNCH_FILE."""
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # a file in the way, a read-only or full file system
        raise RunRefused(f"cannot create the run folder {run_dir}: {error}") from None
    try:
        run_dir.mkdir()
    except FileExistsError:
        if exist_ok:
            return
        raise
    except OSError as error:
        raise RunRefused(f"cannot create the run folder {run_dir}: {error}") from None
    launch = json.dumps(launch_identity(spec)) + "\n"
    whole_files.write_text(run_dir / LAUNCH_FILE, launch)


def lock(run_dir: Path, warn: Callable[[str], None]) -> liveness.Held:
    """The folder's lock, held by this launch's chief for the life of its process: a second
    launch of the same folder is refused while this one lives (RunRefused, naming it)."""
    try:
        held, earlier = liveness.take(run_dir / liveness.LOCK_FILE, liveness.holder())
    except liveness.FolderBusy as busy:
        raise RunRefused(
            f"{run_dir} is in use by a launch that is still running ({busy}); two launches "
            "would write into one run, so this one stops and writes nothing. Wait for that "
            "launch to end, or stop it"
        ) from None
    except OSError as error:  # a read-only or full file system: nothing can be written there
        raise RunRefused(
            f"cannot write into the run folder {run_dir} ({error.strerror or error}); make it "
            "writable, or copy the run folder to a writable place and resume it there"
        ) from None
    if "unsupported" in earlier:
        warn(
            f"the file system of {run_dir} has no file locks ({earlier['unsupported']}): two "
            "launches of this folder at once are not prevented"
        )
    elif earlier:
        warn(
            f"took over {run_dir} from a launch that ended without releasing it "
            f"({liveness.named(earlier)}): its process is gone"
        )
    return held


def prepare_folder(
    run_dir: Path, options: RunOptions, spec: ClusterSpec, warn: Callable[[str], None]
) -> tuple[str, liveness.Held]:
    """Create the run folder, lock it (`lock`) and return its name and lock: exclusively for a
    new run (mkdir is atomic, so of two launches racing for one name only one gets it), or
    reuse it for --resume, and for --auto-resume when it is this launch's own run. A SLURM
    job's --auto-resume that finds another job's folder under its name starts afresh in a new,
    unique folder and says so, unless --resume asks for that folder (run_slurm.sh always adds
    --auto-resume, so a job resumes another's run, at another size say, with --resume)."""
    going_on = options.resume or options.auto_resume
    if options.resume and not run_dir.is_dir():
        raise RunRefused(f"--resume: there is no run folder {run_dir} to go on with")
    in_job = bool(spec.slurm_job_id)
    another = in_job and run_dir.is_dir() and not is_own_folder(run_dir, spec)
    if options.auto_resume and not options.resume and another:
        fresh = run_dir.with_name(f"{run_dir.name}-{unique_stamp()}")
        warn(
            f"{run_dir} holds another run than this job's (job {spec.slurm_job_id}, "
            f"{'restart ' + str(spec.restart_count) if spec.restart_count else 'first start'}"
            f"{' on cluster ' + spec.cluster_name if spec.cluster_name else ''}); "
            f"not resuming it: this run starts afresh in {fresh}"
        )
        _create(fresh, spec, exist_ok=False)
        return fresh.name, lock(fresh, warn)
    try:
        _create(run_dir, spec, exist_ok=going_on)
    except FileExistsError:
        raise RunRefused(
            f"{run_dir} already exists and holds another run; nothing was written. Choose "
            "another output.run_name (or leave it empty for a new unique name), or pass "
            f"{RESUME_HINT} to go on with that run"
        ) from None
    return run_dir.name, lock(run_dir, warn)


def folder_identity(run_dir: Path, current: dict[str, Any]) -> dict[str, Any] | None:
    """The run a folder holds, as `identity` would describe it, from its config.yaml and its
    first run_start (keys neither says are taken from `current`); None for a folder that holds
    no run yet."""
    try:
        config = yaml.safe_load((run_dir / CONFIG_FILENAME).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    saved = {**current, "config": config if isinstance(config, dict) else {}}
    try:
        with open(run_dir / METRICS_FILENAME, encoding="utf-8") as metrics:
            start = json.loads(metrics.readline())
    except (OSError, ValueError):
        return saved
    if isinstance(start, dict):
        saved.update(
            {key: start[key] for key in ("framework", "strategy", "world_size") if key in start}
        )
    return saved


def set_aside(run_dir: Path, warn: Callable[[str], None]) -> None:
    """Before a run starts over in its own folder (no checkpoint to go on from), move the
    earlier attempt's metrics.jsonl aside as metrics.jsonl.attempt-N, so that the new file
    holds one run and the old records are kept."""
    metrics = run_dir / METRICS_FILENAME
    if not metrics.is_file():
        return
    number = 1
    while (aside := metrics.with_name(f"{METRICS_FILENAME}.attempt-{number}")).exists():
        number += 1
    metrics.rename(aside)
    warn(
        f"no complete checkpoint in {run_dir}: the run starts over; the earlier records are "
        f"in {aside.name}"
    )


def choose_checkpoint(
    run_dir: Path,
    options: RunOptions,
    current: dict[str, Any],
    warn: Callable[[str], None],
    restarted: bool = False,
) -> dict[str, Any]:
    """What the chief decides for this launch: {"folder": name or None}. Raises RunRefused for
    --resume without a checkpoint or a checkpoint of another run, CheckpointError when there
    are checkpoints and none is intact. A launch `restarted` by an elastic launcher may start a
    folder without a checkpoint over at another world size (torchrun --nnodes MIN:MAX)."""
    if not (options.resume or options.auto_resume):
        return {"folder": None}
    folder = checkpoint_folders.newest_intact(run_dir, warn)
    if folder is None:
        if options.resume:
            raise RunRefused(
                f"--resume: no complete checkpoint under {checkpoint_folders.root(run_dir)}"
            )
        saved = folder_identity(run_dir, current)
        found = conflicts(saved, current, held_in="the folder") if saved else []
        if restarted:  # the elastic launcher chose the size; nothing of the old one is kept
            found = [line for line in found if not line.startswith("world_size:")]
        if found:
            raise RunRefused(
                f"{run_dir} holds another run than this launch describes (its {CONFIG_FILENAME} "
                "and first run_start); nothing was written. Differences: "
                + "; ".join(found)
                + ". Undo them, or start a new run (another output.run_name, without "
                f"{RESUME_HINT}); may change on resume: " + ", ".join(MAY_CHANGE)
            )
        set_aside(run_dir, warn)
        return {"folder": None}
    found = conflicts(checkpoint_folders.read_manifest(folder), current)
    if found:
        raise RunRefused(
            f"{folder} was written by another run than this launch describes; nothing was "
            "written. Differences: " + "; ".join(found) + ". Undo them, or start a new run "
            f"(another output.run_name, without {RESUME_HINT}); may change on resume: "
            + ", ".join(MAY_CHANGE)
        )
    return {"folder": folder.name}
