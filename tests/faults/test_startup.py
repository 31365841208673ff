"""A start-up that cannot complete ends on time, on both frameworks, with one line naming the
address, the port and what was found there: a listener that accepts and stays silent (a stopped
chief, a stale process on the job's port), a port already taken, or a chief stopped right after
it started listening, which the launcher then names and ends."""

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.launching import train_command

MODULES = ["torch_impl.train", "tf_impl.train"]
STARTUP_S = 5  # dist.startup_timeout_s
SETTINGS = ["data.train_limit=1280", "data.test_limit=500", "train.epochs=1"]


@pytest.fixture
def silent_listener():
    """A real TCP listener on 127.0.0.1 that accepts every connection and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    for connection in accepted:
        connection.close()
    server.close()


def rank_env(rank: int, port: int) -> dict[str, str]:
    workers = '["localhost:1", "localhost:2"]'
    tf_config = f'{{"cluster": {{"worker": {workers}}}, "task": {{"index": {rank}}}}}'
    return {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "TF_CONFIG": tf_config,
    }


def start_rank(module: str, rank: int, port: int, tmp_path: Path):
    settings = [*SETTINGS, f"dist.startup_timeout_s={STARTUP_S}", f"output.dir={tmp_path}"]
    command = train_command(module, 0, settings, ["--quiet"])
    started = time.monotonic()
    done = subprocess.run(
        command, env=rank_env(rank, port), capture_output=True, text=True, timeout=120
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    return done, errors, time.monotonic() - started


@pytest.mark.parametrize("module", MODULES)
def test_a_rank_facing_a_silent_listener_gives_up_in_time_and_says_so(
    module, silent_listener, tmp_path
):
    done, errors, took = start_rank(module, 1, silent_listener, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert len(errors) == 1, done.stderr
    assert f"127.0.0.1:{silent_listener}" in errors[0]
    assert "accepts connections but never answers" in errors[0], errors[0]
    assert took < STARTUP_S + 20, took  # start-up, the timeout and the store's grace


@pytest.mark.parametrize("module", MODULES)
def test_a_worker_whose_chief_never_starts_gives_up_within_the_startup_timeout(module, tmp_path):
    """dist.startup_timeout_s bounds the whole start-up, whatever dist.startup_retries says:
    TensorFlow's worker once waited retries x timeout (4 x 5 s here, then 5 s more)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]  # free once closed: nobody listens there
    settings = [
        *SETTINGS,
        f"dist.startup_timeout_s={STARTUP_S}",
        "dist.startup_retries=4",
        f"output.dir={tmp_path}",
    ]
    command = train_command(module, 0, settings, ["--quiet"])
    started = time.monotonic()
    done = subprocess.run(
        command, env=rank_env(1, port), capture_output=True, text=True, timeout=120
    )
    took = time.monotonic() - started
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 1, done.stdout + done.stderr
    assert len(errors) == 1 and f"127.0.0.1:{port}" in errors[0], done.stderr
    assert f"dist.startup_timeout_s={STARTUP_S}" in errors[0], errors[0]
    assert took < STARTUP_S + 15, took  # the framework's import, the timeout, a grace


@pytest.mark.parametrize("module", MODULES)
def test_a_chief_whose_port_is_taken_names_the_port(module, silent_listener, tmp_path):
    done, errors, _ = start_rank(module, 0, silent_listener, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert str(silent_listener) in errors[0] and "another process holds" in errors[0], errors


def _child_pids(parent: int) -> dict[int, int]:
    """{rank: pid} of the launcher's children, from their environment."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) != parent:
                continue
            environ = (stat.parent / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        for entry in environ:
            if entry.startswith(b"RANK="):
                found[int(entry[5:])] = int(stat.parent.name)
    return found


def _listens(port: int) -> bool:
    wanted = f":{port:04X} "
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if (fields[1] + " ").endswith(wanted) and fields[3] == "0A":  # LISTEN
                return True
    return False


@pytest.mark.parametrize("module", MODULES)
def test_a_chief_stopped_as_it_starts_listening_is_named_and_ended(module, tmp_path):
    """Rank 1 is held back (SIGSTOP) until the chief listens, then the chief is stopped and
    rank 1 let go: it reaches a chief that never answers. The launch must end, naming rank 0."""
    settings = [*SETTINGS, f"dist.startup_timeout_s={STARTUP_S}", f"output.dir={tmp_path}"]
    command = train_command(module, 2, settings, ["--quiet"])
    command.insert(command.index("--nproc"), "--grace=1")
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        ranks: dict[int, int] = {}
        while len(ranks) < 2 and time.monotonic() < deadline:
            ranks = _child_pids(launcher.pid)
        os.kill(ranks[1], signal.SIGSTOP)
        environ = Path(f"/proc/{ranks[0]}/environ").read_bytes().split(b"\0")
        port = int(next(e for e in environ if e.startswith(b"MASTER_PORT="))[12:])
        while not _listens(port) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _listens(port), "the chief never listened"
        os.kill(ranks[0], signal.SIGSTOP)
        os.kill(ranks[1], signal.SIGCONT)
        stopped_at = time.monotonic()
        _, stderr = launcher.communicate(timeout=STARTUP_S + 60)
    finally:
        launcher.kill()
    took = time.monotonic() - stopped_at
    assert launcher.returncode not in (0, None), stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("[launch] rank 0 stopped answering"), stderr
    assert took < STARTUP_S + 20, took
