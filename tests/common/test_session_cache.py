"""A test session's cache of GEMM peaks (tests/conftest.py): its own, never the user's, shared
by its xdist workers so that each figure is probed once a session, and gone when it ends."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBE = """import json, os

def test_where(worker_id):
    with open(os.environ["WHERE_FILE"] + "." + worker_id, "w") as said:
        json.dump(os.environ["SUITE_CACHE_DIR"], said)
"""


def test_the_workers_share_the_sessions_own_cache_and_it_goes_with_the_session(tmp_path):
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {
        key: value
        for key, value in os.environ.items()  # a session started by hand, not this one's child
        if key not in ("PYTEST_XDIST_WORKER", "SUITE_TEST_SESSION_CACHE", "SUITE_CACHE_DIR")
    }
    env["WHERE_FILE"] = str(tmp_path / "where")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p"]
    command += ["tests.conftest", "-n", "2", "--dist", "each", str(tmp_path / "test_probe.py")]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    said = {path.name: json.loads(path.read_text()) for path in tmp_path.glob("where.*")}
    assert sorted(said) == ["where.gw0", "where.gw1"], said
    (cache,) = set(said.values())  # one folder for both workers
    assert Path(cache).name.startswith("dist-mnist-test-cache-")
    assert not Path(cache).is_relative_to(Path.home() / ".cache")
    assert not Path(cache).exists()  # removed when the session ended
