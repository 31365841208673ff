"""Every launch of a run ends with one run_end, even when its chief cannot write it.

Only the chief writes metrics.jsonl; when it was killed or stopped, whoever outlives it writes
the run_end instead: a surviving rank, the local launcher, the SLURM batch script or the
torchrun agent. `<run>/.end-lock` lets one of them write it, and only while the launch has none.

    python -m common.core.run.run_end RUN_DIR --error "why"     (appends one only when missing)
    python -m common.core.run.run_end --note FILE --error "why"  (FILE: RUN_DIR, as the chief wrote)
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from common.core.records import provenance
from common.core.records.metrics import MetricsWriter, scan
from common.core.records.records import (
    METRICS_FILENAME,
    Epoch,
    Launch,
    Record,
    Resume,
    RunEnd,
    launches,
)
from common.core.run import liveness
from common.core.run.recorder import diverged_at, time_to_target

END_LOCK = ".end-lock"
WAIT_S = 10.0  # for another writer of the run_end; a stopped one is not waited for longer


@contextmanager
def end_lock(run_dir: Path) -> Iterator[None]:
    """Held while a run_end is checked for and written. A holder that stopped for WAIT_S is
    passed over (a lock nobody releases must not cost the run its end)."""
    handle = os.open(run_dir / END_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + WAIT_S
    try:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            except OSError:  # no locks on this file system
                break
        yield
    finally:
        os.close(handle)


def note_run_dir(note: str, run_dir: Path) -> None:
    """Tell the launcher where the run is (`ClusterSpec.run_dir_note`), so that it can end a
    run whose chief died."""
    if note:
        try:
            Path(note).write_text(str(run_dir.resolve()), encoding="utf-8")
        except OSError as error:
            print(
                f"warning: cannot tell the launcher where the run is ({note}: {error})",
                file=sys.stderr,
                flush=True,
            )


def last_launch(records: list[Record]) -> Launch | None:
    """The last launch written into a file; None before any run_start."""
    found = launches(records)
    return found[-1] if found else None


def has_ended(run_dir: Path) -> bool:
    """Whether the last launch written into `run_dir` has its run_end."""
    launch = last_launch(scan(run_dir / METRICS_FILENAME).records)
    return launch is not None and any(isinstance(r, RunEnd) for r in launch.records)


def _seconds(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp).timestamp()


def missing_end(records: list[Record], launch: Launch, error: str) -> RunEnd:
    """The run_end of `launch`, the file's last, which has none: the epochs of every launch in
    `records`, and its time estimated from the file's clock (its run_start to now, plus the run
    time of the epoch it resumed from)."""
    start = launch.start
    by_epoch = {r.epoch: r for r in records if isinstance(r, Epoch)}
    epochs = [by_epoch[number] for number in sorted(by_epoch)]
    resumed = [r.epoch for r in launch.records if isinstance(r, Resume)]
    before = by_epoch[resumed[0]].elapsed_s if resumed and resumed[0] in by_epoch else 0.0
    target = start.config.get("train", {}).get("target_accuracy", 1.0)
    accuracies = [epoch.val_accuracy for epoch in epochs]
    return RunEnd(
        time=provenance.utc_now(),
        status="failed",
        epochs_completed=len(epochs),
        total_time_s=before + max(0.0, time.time() - _seconds(start.time)),
        final_val_accuracy=accuracies[-1] if accuracies else None,
        best_val_accuracy=max(accuracies) if accuracies else None,
        target_accuracy=float(target),
        time_to_target_s=time_to_target(epochs, float(target)),
        error=error,
        diverged_at_epoch=diverged_at(epochs),
    )


def append_missing(run_dir: Path, error: str) -> bool:
    """Write the last launch's run_end (status failed, `error`) unless it has one: True if it
    was written here."""
    path = run_dir / METRICS_FILENAME
    if not path.is_file():
        return False
    with end_lock(run_dir):
        records = scan(path).records
        launch = last_launch(records)
        if launch is None or any(isinstance(record, RunEnd) for record in launch.records):
            return False
        (run_dir / f".{METRICS_FILENAME}.reserve").unlink(missing_ok=True)  # the chief's
        with MetricsWriter(path) as writer:
            writer.write(missing_end(records, launch, error))
    return True


def blame(run_dir: Path, pids: list[int], me: int, launcher_says: str) -> str | None:
    """Which rank a failed collective lost: the launcher's word when it gave one (it saw the
    rank die, and by which signal, or saw it stopped), else what the beacons show (a rank
    gone, or silent); None when nothing shows it."""
    if launcher_says.startswith("rank "):
        return launcher_says
    lost = [peer for peer in liveness.survey(run_dir, pids, settle=True) if peer.rank != me]
    return "; ".join(peer.describe() for peer in lost) or None


def end_for_chief(run_dir: Path, chief_pid: int, error: str) -> bool:
    """On a rank other than the chief, as its launch fails: when the chief is gone or silent,
    write the run_end it cannot (True if written here). A live chief writes its own: this
    waits for it, or for its beacon to fall silent, at most SILENT_AFTER_S and a little."""
    deadline = time.monotonic() + liveness.SILENT_AFTER_S + 2 * liveness.HEARTBEAT_S
    while time.monotonic() < deadline:
        if has_ended(run_dir):
            return False
        chief = liveness.peer(run_dir, 0, chief_pid)
        if chief is None:  # no beacon to tell by (no locks here): nothing is known of it
            return False
        if chief.state != "alive":
            named = error.startswith("rank 0 ")  # the launcher's word on the chief, already
            return append_missing(
                run_dir, error if named else f"{chief.describe()}; noticed by {error}"
            )
        time.sleep(0.2)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m common.core.run.run_end",
        description="Append the run_end a launch is missing (its chief died or hung).",
    )
    parser.add_argument("run_dir", nargs="?", help="the run folder")
    parser.add_argument("--note", help="a file holding the run folder's path (the chief's note)")
    parser.add_argument("--error", required=True, help="why the launch ended")
    args = parser.parse_args(argv)
    where = args.run_dir
    if where is None and args.note:
        try:
            where = Path(args.note).read_text(encoding="utf-8").strip()
        except OSError:
            where = ""
    if not where:
        print("[ends] no run folder known (the run did not start): nothing to end")
        return 0
    if append_missing(Path(where), args.error):
        print(f"[ends] {where}: wrote the missing run_end: {args.error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
