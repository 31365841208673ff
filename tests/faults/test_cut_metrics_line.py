"""A launch stopped in the middle of a record leaves a cut last line in metrics.jsonl; the next
launch (--resume) sets it aside before it appends, so its run_start starts a line of its own and
compare reads the whole resumed run (once, the run_start was glued onto the fragment and compare
failed on that folder for good)."""

import subprocess
import sys

from common.core.records import metrics
from tests.launching import runner

SETTINGS = [
    "data.train_limit=1280",
    "data.test_limit=500",
    "train.epochs=3",
    "train.checkpoint_every_epochs=1",
]


def test_a_resume_after_a_cut_last_line_leaves_a_whole_file(tmp_path):
    run = runner("torch_impl.train", tmp_path, warm=True)
    _, run_dir = run("a", 2, *SETTINGS, extra=["--stop-after-epoch", "1"], small=False)
    path = run_dir / "metrics.jsonl"
    whole = path.read_bytes()
    path.write_bytes(whole[:-40])  # the last record (run_end) cut mid-write
    done, _ = run("a", 2, *SETTINGS, extra=["--resume"], small=False)
    assert "ended in a cut line" in done.stdout + done.stderr
    result = metrics.scan(path)
    assert (result.problems, result.cut) == ([], [])
    kinds = [record.KIND for record in result.records]
    assert kinds.count("run_start") == 2 and kinds[-1] == "run_end"
    assert [record.epoch for record in result.records if record.KIND == "epoch"] == [1, 2, 3]
    cut_at = whole.rindex(b"\n", 0, len(whole) - 1) + 1  # where the cut record began
    assert path.read_bytes().startswith(whole[:cut_at])
    assert (run_dir / f"metrics.jsonl.cut-at-{cut_at}").read_bytes() == whole[cut_at:-40]
    compared = subprocess.run(
        [sys.executable, "compare.py", str(run_dir)], capture_output=True, text=True, timeout=120
    )
    assert compared.returncode == 0, compared.stdout + compared.stderr
