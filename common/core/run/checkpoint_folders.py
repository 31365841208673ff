"""Checkpoint folders, the same on both sides: `<run>/checkpoints/epoch-NNNN/` (after NNNN
epochs) or `epoch-NNNN-step-SSSSSSS/` (SSSSSSS steps into the next one, `train.
checkpoint_every_steps`; the names sort in training order) holds what the framework saved
(every rank writes its own part) and, written last by the chief, `manifest.json`: the epoch and
step, what the run was (its config, framework, strategy, world size) and the SHA-256 of
every file. A checkpoint is written whole or not at all: the ranks save into
`checkpoints/.staging/epoch-NNNN/`, the chief writes the manifest there and renames the folder
into place; a save that fails (a full disk, a signal, a lost rank) leaves nothing behind, and a
resume never sees a staged folder. A folder whose files do not match its manifest is corrupt,
and resume falls back to the previous complete one.

The frameworks only save and restore their state into a given folder (`checkpoint.py` on each
side); `common.core.train.loop` decides when, which one, and whether it may be resumed at all.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
PREFIX = "epoch-"
STAGING = ".staging"
CHUNK = 1 << 20
# Free bytes below which a failed save is put down to a full disk. A write that failed on one
# leaves less than a block free; torch's zip writer reports it only as "unexpected pos".
FULL_BELOW = 1 << 20


class CheckpointError(RuntimeError):
    """No usable checkpoint; the message names the file at fault."""


def full_disk(folder: Path) -> OSError | None:
    """The error a save into `folder` failed with if its file system is full, else None."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return None
    if free >= FULL_BELOW:
        return None
    return OSError(
        errno.ENOSPC,
        f"No space left on device ({free} bytes free where the checkpoint was being saved; free "
        "space or set output.dir elsewhere, then resume)",
        str(folder),
    )


def root(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def folder_name(epoch: int, step: int = 0) -> str:
    """The folder of the state after `epoch` epochs and `step` steps of the next one."""
    return f"{PREFIX}{epoch:04d}" + (f"-step-{step:07d}" if step else "")


def epoch_dir(run_dir: Path, epoch: int, step: int = 0) -> Path:
    return root(run_dir) / folder_name(epoch, step)


def staging_dir(run_dir: Path, epoch: int, step: int = 0) -> Path:
    """Where a checkpoint is written before it is complete: under `checkpoints/.staging/`, which
    no resume looks into (`complete` reads `checkpoints/epoch-*` only)."""
    return root(run_dir) / STAGING / folder_name(epoch, step)


def publish(staged: Path, run_dir: Path, epoch: int, step: int = 0) -> Path:
    """The staged folder, its manifest written, becomes the checkpoint's folder in one rename
    (the chief); the staging area goes."""
    final = epoch_dir(run_dir, epoch, step)
    shutil.rmtree(final, ignore_errors=True)  # an abandoned later attempt's folder
    os.replace(staged, final)
    discard(run_dir)
    return final


def discard(run_dir: Path) -> None:
    """Remove whatever a failed or abandoned save left in the staging area."""
    shutil.rmtree(root(run_dir) / STAGING, ignore_errors=True)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while block := stream.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(folder: Path, *, epoch: int, extras: dict[str, Any], step: int = 0) -> Path:
    """Mark `folder` complete (the chief, after every rank has saved): checksums of all its
    files, then the manifest itself, written under another name and renamed into place."""
    files = {str(path.relative_to(folder)): sha256(path) for path in _files(folder)}
    manifest = folder / MANIFEST
    partial = folder / f"{MANIFEST}.partial"
    content = {**extras, "epoch": epoch, "step": step, "files": files}
    partial.write_text(json.dumps(content), encoding="utf-8")
    partial.replace(manifest)
    return manifest


def read_manifest(folder: Path) -> dict[str, Any]:
    manifest = folder / MANIFEST
    try:
        content = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise CheckpointError(f"{manifest} cannot be read: {error}") from None
    if not isinstance(content, dict) or not isinstance(content.get("files"), dict):
        raise CheckpointError(f"{manifest} is not a checkpoint manifest")
    return content


def problem(folder: Path) -> str | None:
    """None when every file of the manifest is there with its checksum and nothing else is;
    else what is wrong, naming the file."""
    try:
        listed = read_manifest(folder)["files"]
    except CheckpointError as error:
        return str(error)
    present = {str(path.relative_to(folder)) for path in _files(folder)}
    for name in sorted(set(listed) | present):
        path = folder / name
        if name not in present:
            return f"{path} is missing"
        if name not in listed:
            return f"{path} is not in {folder / MANIFEST}"
        if sha256(path) != listed[name]:
            return f"{path} does not match its checksum in {folder / MANIFEST}"
    return None


def complete(run_dir: Path) -> list[Path]:
    """The checkpoint folders that have a manifest, newest first."""
    folders = root(run_dir).glob(f"{PREFIX}*/{MANIFEST}")
    return sorted((manifest.parent for manifest in folders), reverse=True)


def newest_intact(run_dir: Path, warn: Callable[[str], None]) -> Path | None:
    """The newest complete checkpoint whose files match their manifest; `warn(text)` hears of
    every newer one that does not. None when there is no complete checkpoint at all; a
    CheckpointError, naming the files, when there are some and none is intact."""
    found = complete(run_dir)
    problems = []
    for folder in found:
        trouble = problem(folder)
        if trouble is None:
            return folder
        problems.append(trouble)
        warn(f"checkpoint {folder.name} is corrupt, skipped: {trouble}")
    if problems:
        raise CheckpointError("no intact checkpoint left: " + "; ".join(problems))
    return None


def prune(run_dir: Path, keep: int) -> None:
    """Keep the newest `keep` complete checkpoints (0: all); remove older folders, complete or
    not (the chief, after writing a manifest)."""
    if keep == 0:
        return
    kept = complete(run_dir)[:keep]
    if not kept:
        return
    for folder in root(run_dir).glob(f"{PREFIX}*"):
        if folder.is_dir() and folder.name < kept[-1].name:
            shutil.rmtree(folder, ignore_errors=True)
