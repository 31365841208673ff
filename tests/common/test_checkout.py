"""The tests test the tree they stand in: every process they start, a warm rank or a launched
`python -m` one, and the test session itself, imports the suite from this checkout, never from
another checkout that a shared `.venv` was installed from (its editable install points there)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import common
import tf_impl
import torch_impl
from tests.launching import warm_server

REPO = Path(__file__).resolve().parents[2]
WARM_CLIENT = REPO / "tests" / "warm_ranks.py"
# A rank's program, in the test's own folder: where it imported the suite's packages from.
PROBE = """import json, sys
import common, tf_impl, torch_impl
json.dump({m.__name__: m.__file__ for m in (common, torch_impl, tf_impl)}, sys.stdout)
"""


def inside_the_checkout(files: dict[str, str]) -> None:
    for name, file in files.items():
        assert Path(file).resolve().is_relative_to(REPO), f"{name} imported from {file}"


def test_the_session_imports_this_checkout():
    inside_the_checkout({m.__name__: m.__file__ for m in (common, torch_impl, tf_impl)})


def test_a_launched_rank_started_elsewhere_imports_this_checkout(tmp_path):
    """From another working folder, where `python -m` would put that folder first."""
    (tmp_path / "where_from.py").write_text(PROBE)
    done = subprocess.run(
        [sys.executable, "-m", "where_from"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    inside_the_checkout(json.loads(done.stdout))


def test_a_warm_rank_imports_this_checkout(tmp_path):
    """The warm server starts as `python tests/warm_ranks.py serve`, with tests/ first on its
    path: without the checkout put before site-packages it imported the suite from wherever
    .venv's editable install points."""
    (tmp_path / "where_from.py").write_text(PROBE)
    socket = warm_server("torch_impl.train")
    done = subprocess.run(
        [sys.executable, str(WARM_CLIENT), "run", socket, "where_from"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr
    inside_the_checkout(json.loads(done.stdout))
