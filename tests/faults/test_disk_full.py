"""A disk that fills during a checkpoint: the run still ends with one whole run_end whose error
names the cause first, on both frameworks (a private tmpfs of 3 MiB in a mount namespace of the
test's own, so nothing of the machine's is touched)."""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.launching import in_private_mount

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="mounting a small tmpfs in a private mount namespace needs root and unshare",
)
SETTINGS = [
    "data.train_limit=1280",
    "data.test_limit=500",
    "train.epochs=2",
    "train.checkpoint_every_epochs=1",
    "output.run_name=t",
]


@pytest.mark.parametrize("module", ["torch_impl.train", "tf_impl.train"])
def test_a_full_disk_leaves_whole_lines_and_says_why_first(module, tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    train = [sys.executable, "-m", "common.launch", "--nproc", "2", "--"]
    train += [sys.executable, "-m", module, "--config", "configs/cnn_adadelta.yaml", "--quiet"]
    for setting in [*SETTINGS, f"output.dir={small}"]:
        train += ["--set", setting]
    kept = tmp_path / "kept"
    mount = f"mount -t tmpfs -o size=3m tmpfs {small}"
    done = in_private_mount(mount, train, after=f"cp -r {small}/t {kept}")
    assert done.returncode not in (0, 2), done.stdout + done.stderr
    # a launch that failed before its run folder existed says why here, not as a missing file
    assert (kept / "metrics.jsonl").exists(), done.stdout[-3000:] + done.stderr[-3000:]
    lines = (kept / "metrics.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b""  # the file ends with a newline: every line is whole
    records = [json.loads(line) for line in lines[:-1]]
    end = records[-1]
    assert end["record"] == "run_end" and end["status"] == "failed", end
    cause = end["error"].split(": ", 1)[1]  # after "rank N"
    assert "No space left on device" in cause[:200], end["error"]
    assert len(end["error"]) <= 1000
    assert not list(Path(kept).glob(".metrics.jsonl.reserve"))  # freed for run_end
    # whole or not at all: no checkpoint folder without its manifest, no partial file
    checkpoints = kept / "checkpoints"
    left = (
        sorted(str(p.relative_to(kept)) for p in checkpoints.rglob("*"))
        if checkpoints.exists()
        else []
    )
    assert not left, left
    assert not (kept / "model.pt").exists()


@pytest.mark.parametrize("module", ["torch_impl.train", "tf_impl.train"])
def test_a_disk_that_fills_during_an_epoch_record_counts_only_written_epochs(module, tmp_path):
    """Epoch records only (1.4 kB each), many tiny epochs, on a 96 kB tmpfs: the disk fills in
    the middle of an epoch record, and run_end says ENOSPC in words and counts the records the
    file holds (not the one that did not fit)."""
    small = tmp_path / "small"
    small.mkdir()
    train = [sys.executable, "-m", module, "--config", "configs/mlp_adam.yaml", "--quiet"]
    settings = ["data.train_limit=128", "data.test_limit=100", "train.epochs=400"]
    for setting in [*settings, "output.run_name=t", f"output.dir={small}"]:
        train += ["--set", setting]
    kept = tmp_path / "kept"
    mount = f"mount -t tmpfs -o size=96k tmpfs {small}"
    done = in_private_mount(mount, train, after=f"cp -r {small}/t {kept}")
    assert done.returncode == 1, done.stdout + done.stderr
    assert (kept / "metrics.jsonl").exists(), done.stdout[-3000:] + done.stderr[-3000:]
    text = (kept / "metrics.jsonl").read_text()
    assert text.endswith("\n")
    records = [json.loads(line) for line in text.splitlines()]
    end = records[-1]
    assert end["record"] == "run_end" and end["status"] == "failed", end
    assert "No space left on device" in end["error"], end["error"]
    written = sum(record["record"] == "epoch" for record in records)
    assert 5 < written < 400
    assert end["epochs_completed"] == written, (end["epochs_completed"], written)
