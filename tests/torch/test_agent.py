"""torch_impl.agent, the SLURM job's torchrun, as a real process: the log folder torchrun makes
for its ranks' error files is gone when it returns, however its ranks ended, and a folder the
user named is left as torchrun leaves it. (Its signals and run_end: tests/slurm/test_slurm.py.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def agent(tmp_path, worker: str, *options: str) -> subprocess.CompletedProcess[str]:
    """The agent with one rank running `worker` (a program, not Python), /tmp at `tmp_path`."""
    command = [sys.executable, "-m", "torch_impl.agent", "--standalone", "--nproc-per-node=1"]
    command += [*options, "--no-python", worker]
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("worker", "code"), [("true", 0), ("false", 1)])
def test_the_agent_leaves_no_torchelastic_folder_behind(tmp_path, worker, code):
    ended = agent(tmp_path, worker)
    assert ended.returncode == code, ended.stdout + ended.stderr
    assert not list(tmp_path.glob("torchelastic_*")), ended.stderr


def test_a_log_folder_the_user_names_is_kept(tmp_path):
    logs = tmp_path / "logs"
    ended = agent(tmp_path, "true", f"--log-dir={logs}")
    assert ended.returncode == 0, ended.stdout + ended.stderr
    assert any(logs.iterdir())  # torchrun's folder for this run, <rdzv id>_*
