"""A training process's own temporary folder (common.core.run.own_temp): what TensorFlow's
AutoGraph writes there is gone when the process leaves by os._exit."""

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from common.core.run import own_temp


def test_the_folder_is_under_tmpdir_and_leaving_removes_it_with_its_files(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "read-before"))  # a forked rank's
    folder = Path(own_temp.take())
    try:
        assert folder.parent == tmp_path and folder.name.startswith("suite-rank-")
        assert own_temp.take() == str(folder)  # one folder a process
        with tempfile.NamedTemporaryFile(suffix=".py", delete=False) as written:
            pass  # as AutoGraph writes a converted function
        assert Path(written.name).parent == folder
    finally:
        own_temp.give_back()
    assert list(tmp_path.iterdir()) == []
    assert tempfile.gettempdir() == str(tmp_path)  # the shared folder again
    own_temp.give_back()  # a second time: nothing to do


def test_a_process_that_took_none_gives_none_back(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    (tmp_path / "someone-elses").mkdir()
    own_temp.give_back()
    assert [path.name for path in tmp_path.iterdir()] == ["someone-elses"]


def test_taking_a_folder_removes_those_of_killed_processes_and_no_other(tmp_path, monkeypatch):
    """A SIGKILLed rank leaves its folder; the next process to take one removes it, and leaves
    a running process's, another host's or container's, and what is not a rank's folder."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    gone = int(done.stdout)  # a process that no longer runs
    host, namespace = socket.gethostname(), os.readlink("/proc/self/ns/pid").strip("pid:[]")
    ours = f"suite-rank-{host}-{namespace}-"
    assert own_temp._prefix() == ours
    left = tmp_path / f"{ours}{gone}-k1ll3d_x"
    (left / "__pycache__").mkdir(parents=True)
    (left / "__autograph_generated_fileabc.py").write_text("# a killed rank's")
    kept = [
        f"{ours}{os.getppid()}-running",  # a process that runs
        f"suite-rank-another-host-{namespace}-{gone}-abcdefgh",  # a shared TMPDIR's other host
        f"suite-rank-{host}-1234-{gone}-abcdefgh",  # another container's pid namespace
        f"{ours}{gone}",  # not a name mkdtemp gives
        "someone-elses",
    ]
    for name in kept:
        (tmp_path / name).mkdir()
    folder = Path(own_temp.take())
    try:
        assert not left.exists()
        assert sorted(path.name for path in tmp_path.iterdir()) == sorted([*kept, folder.name])
    finally:
        own_temp.give_back()
