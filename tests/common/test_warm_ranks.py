"""The warm ranks (tests/warm_ranks.py) stand in for `python -m MODULE` under a launcher: the
rank's exit code and its signal come back through the client, a signal to the client reaches
the rank, and a rank whose client is killed does not outlive it. Real processes, a server that
preloads nothing (the mechanism is the subject, not a framework)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "warm_ranks.py"

RANK = """
import os, signal, sys, time
mode = sys.argv[1]
with open("pid", "w") as out:
    out.write(str(os.getpid()))
if mode == "exit":
    print("hello from", os.environ["WARM_TEST"], flush=True)
    sys.exit(7)
if mode == "term":
    def stop(number, frame):
        open("stopped", "w").write(signal.Signals(number).name)
        sys.exit(3)
    signal.signal(signal.SIGTERM, stop)
if mode == "die":
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(60)
"""


@pytest.fixture
def server(tmp_path):
    (tmp_path / "warm_probe.py").write_text(RANK)
    path = str(tmp_path / "s.sock")
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), "serve", path], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert process.stdout.readline().strip() == b"ready"
    yield path
    process.stdin.close()
    process.wait(timeout=10)


def client(server, tmp_path, mode, **kwargs):
    command = [sys.executable, str(SCRIPT), "run", server, "warm_probe", mode]
    env = {**os.environ, "WARM_TEST": "the client's environment"}
    return subprocess.Popen(command, cwd=tmp_path, env=env, text=True, **kwargs)


def rank_pid(tmp_path) -> int:
    deadline = time.monotonic() + 10
    while not (tmp_path / "pid").is_file() or not (tmp_path / "pid").read_text():
        assert time.monotonic() < deadline, "the rank never started"
        time.sleep(0.02)
    return int((tmp_path / "pid").read_text())


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


def test_the_rank_s_code_output_and_environment_come_through_the_client(server, tmp_path):
    done = client(server, tmp_path, "exit", stdout=subprocess.PIPE)
    out, _ = done.communicate(timeout=30)
    assert done.returncode == 7
    assert out.strip() == "hello from the client's environment"


def test_a_signal_to_the_client_reaches_the_rank(server, tmp_path):
    running = client(server, tmp_path, "term")
    rank_pid(tmp_path)
    running.send_signal(signal.SIGTERM)
    assert running.wait(timeout=30) == 3
    assert (tmp_path / "stopped").read_text() == "SIGTERM"


def test_a_rank_killed_by_a_signal_kills_its_client_the_same_way(server, tmp_path):
    assert client(server, tmp_path, "die").wait(timeout=30) == -signal.SIGKILL


def test_a_rank_does_not_outlive_its_killed_client(server, tmp_path):
    running = client(server, tmp_path, "sleep")
    pid = rank_pid(tmp_path)
    running.kill()
    running.wait(timeout=10)
    deadline = time.monotonic() + 5
    while not gone(pid):
        assert time.monotonic() < deadline, "the rank outlived its client"
        time.sleep(0.05)
