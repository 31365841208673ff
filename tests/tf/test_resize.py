"""TensorFlow runs that change size: MWMS's variables are whole on every worker, so a
checkpoint taken inside epoch 2 by 2 workers loads into 1, and one of 1 into 2; the resumed
run's loss at every step follows the uninterrupted run's within tests/resizing.py's tolerance,
and its record says where the size changed."""

import numpy as np
import pytest

from tests.launching import runner
from tests.records import read_metrics
from tests.resizing import AT, SETTINGS, died_after_checkpoint, step_losses, tolerance

CASES = {"mwms-2-to-1": (2, 1), "mwms-1-to-2": (1, 2)}


@pytest.mark.parametrize("case", CASES)
def test_a_resumed_run_at_another_size_follows_the_uninterrupted_one(case, tmp_path):
    before, after = CASES[case]
    run = runner("tf_impl.train", tmp_path, warm=True)
    _, whole = run(f"whole-{before}", before, *SETTINGS, extra=["--quiet"], small=False)
    died_after_checkpoint(whole, tmp_path / case)
    run(case, after, *SETTINGS, extra=["--quiet", "--resume"], small=False)
    records = read_metrics(tmp_path / case / "metrics.jsonl")
    (resumed,) = [r for r in records if r["record"] == "resume"]
    starts = [r for r in records if r["record"] == "run_start"]
    assert (resumed["step"], resumed["world_size_before"]) == (AT, before)
    assert [s["world_size"] for s in starts] == [before, after]
    assert records[-1]["status"] == "success"
    reference, losses = step_losses(whole), step_losses(tmp_path / case)
    assert len(losses) == len(reference) == 40 and (losses[:AT] == reference[:AT]).all()
    apart = abs(losses - reference) / reference
    allowed = tolerance()
    print(f"{case}: max relative loss difference {apart.max():.3g}, tolerance {allowed[0]:.3g}")
    assert apart.max() <= allowed[0], int(apart.argmax()) + 1
    with np.load(tmp_path / case / "model.npz") as ours, np.load(whole / "model.npz") as theirs:
        weights = max(float(np.abs(ours[key] - theirs[key]).max()) for key in theirs.files)
    print(f"{case}: max weight difference {weights:.3g}, tolerance {allowed[1]:.3g}")
    assert weights <= allowed[1]
