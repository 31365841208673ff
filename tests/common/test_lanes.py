"""make test's two lanes (tests/lanes.py), on a real `pytest -n 2 --lanes` over a small tree of
files named as the suite's are: who runs what, each file whole, and the shaped links alone; and
a lanes session stopped by a timeout, whose workers' tests must still clean up."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

from tests.lanes import INTERNALS, SIDE, missing_internals

REPO = Path(__file__).resolve().parents[2]
FILES = {
    "compare": "tests/compare/test_c.py",  # before the side lane in collection order
    "side": next(iter(SIDE)),
    "side2": list(SIDE)[1],
    "slurm": "tests/slurm/test_jobs.py",
    "shaped": "tests/slurm/test_shaped_links.py",
    "main": "tests/torch/test_a.py",
    "main2": "tests/tf/test_b.py",
}
TEST = """import json, os, time
def _log(name):
    start = time.time(); time.sleep(SLEEP_S)
    row = [__file__, name, os.environ["PYTEST_XDIST_WORKER"], start, time.time()]
    with open(os.environ["LANES_LOG"], "a") as log:
        log.write(json.dumps(row) + "\\n")
"""
CONFTEST = f"""import importlib.util
spec = importlib.util.spec_from_file_location("lanes", {str(REPO / "tests" / "lanes.py")!r})
lanes = importlib.util.module_from_spec(spec); spec.loader.exec_module(lanes)
def pytest_addoption(parser):
    parser.addoption("--lanes", action="store_true")
def pytest_xdist_make_scheduler(config, log):
    return lanes.Lanes(config, log) if config.getoption("lanes") else None
"""


def test_the_side_lane_runs_beside_the_slurm_tier_and_the_shaped_links_run_alone(tmp_path):
    for key, relative in FILES.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        cases = "".join(f"def test_{key}_{i}(): _log({i})\n" for i in range(4))
        # the side lane outlasts the rest: the shaped links must still wait for it
        sleep_s = 0.8 if key.startswith("side") else 0.2
        path.write_text(f"SLEEP_S = {sleep_s}\n" + TEST + cases)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    log = tmp_path / "log.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--lanes", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "LANES_LOG": str(log)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(runs) == 4 * len(FILES)
    by_file: dict[str, set[str]] = {}
    for file, _, worker, _, _ in runs:
        by_file.setdefault(Path(file).relative_to(tmp_path).as_posix(), set()).add(worker)
    assert all(len(workers) == 1 for workers in by_file.values()), by_file  # each file whole
    assert by_file[FILES["side"]] == by_file[FILES["side2"]] == {"gw1"}
    assert by_file[FILES["slurm"]] == by_file[FILES["shaped"]] == {"gw0"}
    shaped_start = min(start for file, _, _, start, _ in runs if file.endswith(FILES["shaped"]))
    others_end = max(end for file, _, _, _, end in runs if not file.endswith(FILES["shaped"]))
    assert shaped_start >= others_end  # alone, after every other file
    slurm_start = min(start for file, _, _, start, _ in runs if file.endswith(FILES["slurm"]))
    side = (FILES["side"], FILES["side2"])
    side_end = max(end for file, _, _, _, end in runs if file.endswith(side))
    assert slurm_start < side_end  # the SLURM tier beside the side lane


STOPPED = """import os, subprocess, time
def test_holds_a_process():
    child = subprocess.Popen(["sleep", "600"])
    with open(os.environ["STOP_LOG"], "a") as log:
        log.write(f"started {child.pid}\\n")
    try:
        time.sleep(600)
    finally:
        child.kill()
        child.wait()
        with open(os.environ["STOP_LOG"], "a") as log:
            log.write("cleaned\\n")
"""


def test_a_timeout_s_sigterm_lets_the_workers_tests_clean_up(tmp_path):
    """A timeout signals the controller of a job started in the background, whose processes
    inherit SIGINT ignored: the workers' tests still clean up (a test's `finally`, a fixture's
    teardown) before pytest-xdist's 10 s run out, with the suite's own conftest."""
    (tmp_path / "test_stopped.py").write_text(STOPPED)
    (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n")
    log = tmp_path / "log.txt"
    session = subprocess.Popen(
        [
            *(sys.executable, "-m", "pytest", "-n", "2", "--lanes", "-p", "no:cacheprovider"),
            *("-q", "-W", "ignore::pytest.PytestUnknownMarkWarning"),  # pyproject's marks
        ],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "STOP_LOG": str(log)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and "started" in log.read_text()):
            assert session.poll() is None and time.monotonic() < deadline, "the test never started"
            time.sleep(0.1)
        session.send_signal(signal.SIGTERM)
        output, _ = session.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):  # what the session left, if it failed
            os.killpg(session.pid, signal.SIGKILL)
    child = int(log.read_text().split()[1])
    assert session.returncode != 0, output
    assert log.read_text().endswith("cleaned\n"), output
    assert not Path(f"/proc/{child}").exists(), "the test's process outlived the session"


def test_the_xdist_internals_the_lanes_use_are_there_and_a_missing_one_is_named():
    """tests/lanes.py subclasses LoadScopeScheduling and calls its internals: the installed
    pytest-xdist has them; a scheduler without them is named by what it lacks (Lanes then stops
    with a UsageError naming them and the pinned version)."""
    assert missing_internals(LoadScopeScheduling) == []
    stripped = type("OlderScheduling", (), {"_split_scope": lambda self, nodeid: nodeid})
    assert missing_internals(stripped) == [name for name in INTERNALS if name != "_split_scope"]
