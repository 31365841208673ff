"""A training process's own temporary folder (common.core.run.own_temp): what TensorFlow's
AutoGraph writes there is gone when the process leaves by os._exit."""

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
