"""Every signal a launcher can get ends the run with its run_end, on both frameworks: SIGHUP
(a closed terminal) as SIGTERM does, and SIGUSR1 (a scheduler's warning) passed on to the ranks
as preemption: they checkpoint and leave with exit 75, which the launcher words as such. A
SIGUSR1 that reaches a rank before its handler exists waits for it instead of killing it."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.faults.test_lost_ranks import launched_mid_training, rank_pid
from tests.launching import SMALL, train_command

MODULES = ["torch_impl.train", "tf_impl.train"]


def signal_bit(pid: int, field: str, signum: int) -> bool:
    """Whether `signum` is in the mask `field` (SigBlk: blocked, SigCgt: caught) of the main
    thread of process `pid`, from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    raise ValueError(f"no {field} in /proc/{pid}/status")


def records(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("module", MODULES)
def test_sighup_to_the_launcher_ends_the_run_as_sigterm_does(module, tmp_path):
    launcher, run_dir = launched_mid_training(module, tmp_path)
    launcher.send_signal(signal.SIGHUP)
    _, stderr = launcher.communicate(timeout=120)
    assert launcher.returncode == 128 + signal.SIGHUP, stderr
    assert "[launch] interrupted; stopped all 2 ranks" in stderr
    end = records(run_dir)[-1]
    assert end["record"] == "run_end" and end["status"] == "aborted", end
    assert "SIGHUP" in end["error"], end["error"]


@pytest.mark.parametrize("module", MODULES)
def test_sigusr1_to_the_launcher_preempts_the_ranks(module, tmp_path):
    launcher, run_dir = launched_mid_training(module, tmp_path, "train.epochs=2")
    launcher.send_signal(signal.SIGUSR1)
    _, stderr = launcher.communicate(timeout=180)
    assert launcher.returncode == 75, stderr
    last = stderr.strip().splitlines()[-1]
    assert last == "[launch] preempted: checkpointed at epoch 1, resume with --resume (exit 75)"
    end = records(run_dir)[-1]
    assert end["record"] == "run_end" and end["status"] == "aborted", end
    assert (run_dir / "checkpoints").is_dir()


@pytest.mark.parametrize("module", MODULES)
def test_sigusr1_during_start_up_waits_for_the_handler(module, tmp_path):
    """Bare (as under srun): the signal comes while the framework is still being imported; the
    rank takes it as a preemption request (exit 75 after its one epoch), not as a kill (138)."""
    settings = [*SMALL, "train.epochs=3", f"output.dir={tmp_path}", "output.run_name=early"]
    rank = subprocess.Popen(
        train_command(module, 0, settings, ["--quiet"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # once the rank holds SIGUSR1 and before it has a handler: while its framework is imported
    held_at = time.monotonic()
    while not signal_bit(rank.pid, "SigBlk", signal.SIGUSR1):
        assert rank.poll() is None and time.monotonic() - held_at < 60, "SIGUSR1 never held"
        time.sleep(0.005)
    assert not signal_bit(rank.pid, "SigCgt", signal.SIGUSR1), "its handler came first"
    rank.send_signal(signal.SIGUSR1)
    output, _ = rank.communicate(timeout=120)
    assert rank.returncode == 75, output
    assert [r["epoch"] for r in records(tmp_path / "early") if r["record"] == "epoch"] == [1]


def test_sigusr1_to_a_rank_the_launcher_just_started_waits_for_the_handler(tmp_path):
    """Under common.launch the signal is held from the rank's first instruction."""
    settings = [*SMALL, "train.epochs=3", f"output.dir={tmp_path}", "output.run_name=early"]
    launcher = subprocess.Popen(
        train_command("torch_impl.train", 2, settings, ["--quiet"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            victim = rank_pid(launcher, 1)
            break
        except AssertionError:
            assert time.monotonic() < deadline, "rank 1 never started"
    os.kill(victim, signal.SIGUSR1)
    _, stderr = launcher.communicate(timeout=120)
    assert launcher.returncode == 75, stderr
    end = records(tmp_path / "early")[-1]
    assert end["record"] == "run_end" and end["status"] == "aborted", end
