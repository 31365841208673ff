"""A run folder holds one run: a live launch locks it, a second one is refused naming the
holder, a dead holder's lock is taken over with a warning, a resume with no checkpoint is still
checked against the folder's config, and compare refuses a metrics file into which two runs
were written."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.launching import train_command

MLP = ["--config", "configs/mlp_adam.yaml", "--quiet"]
TINY = ["data.train_limit=1280", "data.test_limit=500"]
# An epoch of a tenth of MNIST: the first launch's checkpoint in a second, not ten (the resumed
# launch must describe the same data, so both take it).
FULL = ["data.train_limit=6400", "data.test_limit=500"]
LONG = [*FULL, "train.epochs=200"]  # alive long enough for a second launch to meet it


def start(
    module: str, root: Path, settings: list[str], extra: list[str], warm: bool = False
) -> subprocess.Popen:
    """A launch of one process; `warm`: forked from a warm server (tests/warm_ranks.py), where
    the test does not read the holder's pid."""
    overrides = [*settings, f"output.dir={root}", "output.run_name=r"]
    command = train_command(module, 0, overrides, [], warm=warm)
    return subprocess.Popen(
        [*command, *MLP, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def train(module: str, root: Path, settings: list[str], extra: list[str], warm: bool = False):
    process = start(module, root, settings, extra, warm)
    stdout, stderr = process.communicate(timeout=600)
    return process.returncode, stdout + stderr


def kinds(run_dir: Path) -> list[str]:
    path = run_dir / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return [json.loads(line)["record"] for line in lines]


def wait_for(predicate, process: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 180
    while not predicate():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"never {what}: {process.communicate()[1][-3000:]}")
        time.sleep(0.1)


@pytest.mark.parametrize("module", ["torch_impl.train", "tf_impl.train"])
def test_a_second_launch_of_a_live_run_is_refused_naming_the_holder(module, tmp_path):
    checkpointed = [*FULL, "train.epochs=1", "train.checkpoint_every_epochs=1"]
    code, output = train(module, tmp_path, checkpointed, [])
    assert code == 0, output
    run_dir = tmp_path / "r"
    first = start(module, tmp_path, LONG, ["--resume"])
    wait_for(lambda: kinds(run_dir).count("run_start") == 2, first, "started")
    code, output = train(module, tmp_path, LONG, ["--resume"])
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=120)
    assert code == 2, output
    assert f"{run_dir} is in use by a launch that is still running" in output
    assert f"pid {first.pid}" in output
    assert kinds(run_dir).count("run_start") == 2  # the refused launch wrote nothing
    assert kinds(run_dir).count("run_end") == 2


def test_a_dead_holders_lock_is_taken_over_with_a_warning(tmp_path):
    first = start("torch_impl.train", tmp_path, [*LONG, "train.log_every_steps=1"], [])
    run_dir = tmp_path / "r"
    wait_for(lambda: "step" in kinds(run_dir), first, "trained")
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=60)
    code, output = train("torch_impl.train", tmp_path, [*FULL, "train.epochs=1"], ["--auto-resume"])
    assert code == 0, output
    assert f"took over {run_dir} from a launch that ended without releasing it" in output
    assert f"pid {first.pid}" in output
    # no checkpoint to go on from: the run started over, and the first attempt was kept
    assert kinds(run_dir).count("run_start") == 1
    aside = run_dir / "metrics.jsonl.attempt-1"
    assert [json.loads(line)["record"] for line in aside.read_text().splitlines()][0] == "run_start"


def test_a_resume_without_a_checkpoint_is_checked_against_the_folders_config(tmp_path):
    code, output = train("torch_impl.train", tmp_path, TINY, [], warm=True)
    assert code == 0, output
    run_dir = tmp_path / "r"
    before = {name: (run_dir / name).read_bytes() for name in ("config.yaml", "metrics.jsonl")}
    changed = [*TINY, "optim.lr=0.5", "model.hidden=[32]"]
    code, output = train("torch_impl.train", tmp_path, changed, ["--auto-resume"], warm=True)
    assert code == 2, output
    assert "holds another run than this launch describes" in output
    assert "model.hidden: [128, 64] in the folder, [32] now" in output
    assert "optim.lr" in output
    assert {name: (run_dir / name).read_bytes() for name in before} == before


def test_compare_refuses_a_file_holding_two_runs(tmp_path):
    for name in ("a", "b"):
        code, output = train("torch_impl.train", tmp_path / name, TINY, [], warm=True)
        assert code == 0, output
    first, second = ((tmp_path / name / "r" / "metrics.jsonl").read_text() for name in "ab")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "metrics.jsonl").write_text(first + second)
    done = subprocess.run(
        [sys.executable, "compare.py", str(mixed), str(tmp_path / "a" / "r")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )
    line = first.count("\n") + 1
    assert done.returncode == 1, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert f"{mixed / 'metrics.jsonl'}:{line}: a run_start that is not a resume" in said
    assert "its epochs start again without a resume record" in said
