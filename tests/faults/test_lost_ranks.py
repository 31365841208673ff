"""A rank killed (SIGKILL) or stopped (SIGSTOP) mid-training, on both frameworks: the run still
ends with one run_end, written by whoever outlives the rank that could not (the chief, a
surviving rank, the launcher), and its error names the rank at fault first and the ranks that
only noticed it after. Under `common.launch` the launcher's last line says the same; without a
launcher (as under plain srun) the ranks' beacons in the run folder tell a dead or silent rank.
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.launching import SMALL, train_command, two_ranks_mid_training

MODULES = ["torch_impl.train", "tf_impl.train"]
TIMEOUT_S = 12  # dist.timeout_s: a stopped peer is waited for; above liveness.SILENT_AFTER_S (10 s)


def records(run_dir: Path) -> list[dict]:
    text = (run_dir / "metrics.jsonl").read_text()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def one_end(run_dir: Path) -> dict:
    """The only run_end of the launch, which must be the last record."""
    found = records(run_dir)
    ends = [r for r in found if r["record"] == "run_end"]
    assert len(ends) == 1 and found[-1] is ends[0], found[-3:]
    assert ends[0]["status"] == "failed", ends[0]
    return ends[0]


def rank_pid(launcher: subprocess.Popen, rank: int) -> int:
    """The pid of rank `rank` among the launcher's children (read from /proc)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            environ = (stat.parent / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if parent == launcher.pid and f"RANK={rank}".encode() in environ:
            return int(stat.parent.name)
    raise AssertionError(f"rank {rank} is not a child of the launcher")


def launched_mid_training(
    module: str, root: Path, *extra: str, grace: float | None = None
) -> tuple[subprocess.Popen, Path]:
    """2 ranks under common.launch on a whole MNIST epoch (`extra` settings after it), once 20
    step records are written. `grace`: the launcher's --grace (its default when None)."""
    settings = [
        *SMALL,
        "data.train_limit=60000",
        "train.epochs=1",
        "train.log_every_steps=1",
        f"dist.timeout_s={TIMEOUT_S}",
        f"output.dir={root}",
        "output.run_name=hit",
        *extra,
    ]
    command = train_command(module, 2, settings, [])
    if grace is not None:
        command.insert(command.index("--nproc"), f"--grace={grace:g}")
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics_file = root / "hit" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if metrics_file.is_file() and metrics_file.read_text().count('"step"') >= 20:
            return launcher, root / "hit"
        time.sleep(0.2)
    launcher.kill()
    pytest.fail("training never started: " + launcher.communicate(timeout=30)[1])


@pytest.mark.parametrize("module", MODULES)
def test_a_killed_chief_gets_a_run_end_naming_its_signal(module, tmp_path):
    launcher, run_dir = launched_mid_training(module, tmp_path)
    victim = rank_pid(launcher, 0)
    os.kill(victim, signal.SIGKILL)
    _, stderr = launcher.communicate(timeout=120)
    assert launcher.returncode == 128 + 9
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"[launch] rank 0 was killed by SIGKILL (pid {victim} "), last
    end = one_end(run_dir)
    assert end["error"].startswith(f"rank 0 was killed by SIGKILL (pid {victim} "), end["error"]


@pytest.mark.parametrize("module", MODULES)
def test_an_aborted_rank_prints_where_each_thread_was(module, tmp_path):
    """SIGABRT, as glibc sends a process whose heap it found corrupt ("double free or
    corruption", seen once in a TensorFlow rank of make test): the rank's stderr holds the
    Python stack of its threads, the training loop's among them, before it dies of it."""
    launcher, run_dir = launched_mid_training(module, tmp_path)
    victim = rank_pid(launcher, 1)
    os.kill(victim, signal.SIGABRT)
    ranks, stderr = launcher.communicate(timeout=120)  # the launcher prints the ranks' lines
    assert launcher.returncode == 128 + signal.SIGABRT, stderr
    said = [line for line in ranks.splitlines() if line.startswith("[rank 1] ")]
    assert "[rank 1] Fatal Python error: Aborted" in said, ranks[-3000:]
    assert any("common/core/train/loop.py" in line for line in said), ranks[-3000:]
    assert one_end(run_dir)["error"].startswith(f"rank 1 was killed by SIGABRT (pid {victim} ")


def pending_signals(pid: int) -> int:
    """The signals pending on process `pid`, its own and its thread group's (a mask, bit
    signum - 1)."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)


@pytest.mark.parametrize("module", MODULES)
def test_a_killed_chief_is_named_first_by_a_survivor_the_launcher_stopped(module, tmp_path):
    """The survivor did not notice the chief's death before the launcher's SIGTERM (a busy
    machine; held here by SIGSTOP until that SIGTERM is pending): the run_end it writes for the
    chief still starts with the launcher's word on the chief, then says who noticed. Once seen
    as "rank 0 (...) is gone: its process ended; noticed by rank 1: stopped by signal SIGTERM
    from the launcher: rank 0 was killed by SIGKILL (...)", under load in make test. A survivor
    stopped inside a collective ends its run from its LastWords thread, which says so."""
    launcher, run_dir = launched_mid_training(module, tmp_path)
    chief, survivor = rank_pid(launcher, 0), rank_pid(launcher, 1)
    os.kill(survivor, signal.SIGSTOP)
    try:
        os.kill(chief, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while not pending_signals(survivor) & 1 << (signal.SIGTERM - 1):
            assert time.monotonic() < deadline, "the launcher never sent SIGTERM"
            time.sleep(0.05)
    finally:
        os.kill(survivor, signal.SIGCONT)
    _, stderr = launcher.communicate(timeout=120)
    assert launcher.returncode == 128 + 9, stderr
    error = one_end(run_dir)["error"]
    assert error.startswith(f"rank 0 was killed by SIGKILL (pid {chief} "), error
    noticed = "; noticed by rank 1: stopped by signal SIGTERM from the launcher"
    assert error.endswith((noticed, f"{noticed} (while blocked in a collective)")), error


@pytest.mark.parametrize("module", MODULES)
def test_a_stopped_rank_is_named_and_the_chief_only_noticed_it(module, tmp_path):
    # grace 1 s, not 5: the chief has left after its collective's timeout and the stopped rank
    # cannot act, so the launcher's grace periods (before SIGTERM, before SIGKILL) wait for nobody
    launcher, run_dir = launched_mid_training(module, tmp_path, grace=1)
    victim = rank_pid(launcher, 1)
    os.kill(victim, signal.SIGSTOP)
    try:
        _, stderr = launcher.communicate(timeout=TIMEOUT_S + 90)
    except subprocess.TimeoutExpired:
        os.kill(victim, signal.SIGKILL)
        raise
    assert launcher.returncode == 1, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("[launch] rank 1 stopped answering: its process is stopped"), last
    assert f"pid {victim} " in last and "rank 0 only noticed it" in last, last
    error = one_end(run_dir)["error"]
    assert error.startswith("rank 1 stopped answering"), error
    assert "noticed by rank 0: a collective failed" in error, error


@pytest.mark.parametrize("module", MODULES)
def test_without_a_launcher_a_survivor_ends_the_run_of_a_stopped_chief(module, tmp_path):
    ranks, metrics_file = two_ranks_mid_training(module, tmp_path, timeout_s=TIMEOUT_S)
    chief, survivor = ranks
    chief.send_signal(signal.SIGSTOP)
    try:
        output, _ = survivor.communicate(timeout=TIMEOUT_S + 90)
    finally:
        chief.kill()
        chief.communicate(timeout=30)
    assert survivor.returncode == 1, output
    error = one_end(metrics_file.parent)["error"]
    assert error.startswith(
        f"rank 0 (host {os.uname().nodename}, pid {chief.pid}) stopped answering"
    )
    assert "noticed by rank 1: a collective failed" in error, error


def test_without_a_launcher_a_survivor_ends_the_run_of_a_killed_chief(tmp_path):
    ranks, metrics_file = two_ranks_mid_training("torch_impl.train", tmp_path)
    chief, survivor = ranks
    chief.send_signal(signal.SIGKILL)
    output, _ = survivor.communicate(timeout=90)
    chief.communicate(timeout=30)
    assert survivor.returncode == 1, output
    error = one_end(metrics_file.parent)["error"]
    assert error.startswith(f"rank 0 (host {os.uname().nodename}, pid {chief.pid}) is gone"), error
    assert "noticed by rank 1: a collective failed" in error, error


def test_a_chief_killed_alone_gets_its_run_end_from_the_launcher(tmp_path):
    """One rank: nobody outlives it but the launcher."""
    launcher = subprocess.Popen(
        train_command(
            "torch_impl.train",
            1,
            [*SMALL, "data.train_limit=60000", "train.log_every_steps=1"]
            + [f"output.dir={tmp_path}", "output.run_name=hit"],
            [],
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics_file = tmp_path / "hit" / "metrics.jsonl"
    while not (metrics_file.is_file() and '"step"' in metrics_file.read_text()):
        assert launcher.poll() is None, launcher.communicate()
        time.sleep(0.2)
    os.kill(rank_pid(launcher, 0), signal.SIGKILL)
    launcher.communicate(timeout=60)
    assert one_end(tmp_path / "hit")["error"].startswith("rank 0 was killed by SIGKILL")
