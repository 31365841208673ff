"""torch runs that change size: a checkpoint taken inside epoch 2 loads at another world size,
and into another strategy where DCP holds the same tensors, through DCP's resharding; the
resumed run's loss at every step follows the uninterrupted run's within tests/resizing.py's
tolerance, and its record says where the size changed."""

import pytest
import torch

import compare
from tests.launching import runner
from tests.records import read_metrics
from tests.resizing import AT, SETTINGS, died_after_checkpoint, step_losses, tolerance

# name: (strategy and ranks that saved, strategy and ranks that resume)
CASES = {
    "fsdp2-4-to-2": (("fsdp2", 4), ("fsdp2", 2)),
    "ddp-4-to-1": (("ddp", 4), ("ddp", 1)),
    "hsdp-4-to-2": (("hsdp", 4), ("hsdp", 2)),
    "fsdp1-2-to-4": (("fsdp1", 2), ("fsdp1", 4)),
    "ddp-4-to-fsdp2-2": (("ddp", 4), ("fsdp2", 2)),
}
LAYOUT = ["torch.auto_wrap_min_params=1000", "torch.hsdp_shard_size=2"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The uninterrupted run of each saving strategy and world size, made once."""
    root = tmp_path_factory.mktemp("resize")
    made = {}

    def run(strategy, nproc):
        if (strategy, nproc) not in made:
            settings = [*SETTINGS, *LAYOUT, f"torch.strategy={strategy}"]
            name = f"{strategy}-{nproc}"
            made[strategy, nproc] = runner("torch_impl.train", root, warm=True)(
                name, nproc, *settings, extra=["--quiet"], small=False
            )[1]
        return made[strategy, nproc]

    return run


@pytest.fixture(scope="module")
def allowed():
    losses, weights = tolerance()
    print(
        f"tolerance (4 x float32's drift from float64): losses {losses:.3g}, weights {weights:.3g}"
    )
    return losses, weights


@pytest.mark.parametrize("case", CASES)
def test_a_resumed_run_at_another_size_follows_the_uninterrupted_one(
    case, uninterrupted, allowed, tmp_path, capsys
):
    (saved, saved_ranks), (strategy, ranks) = CASES[case]
    whole = uninterrupted(saved, saved_ranks)
    died_after_checkpoint(whole, tmp_path / case)
    settings = [*SETTINGS, *LAYOUT, f"torch.strategy={strategy}"]
    runner("torch_impl.train", tmp_path, warm=True)(
        case, ranks, *settings, extra=["--quiet", "--resume"], small=False
    )
    records = read_metrics(tmp_path / case / "metrics.jsonl")
    (resumed,) = [r for r in records if r["record"] == "resume"]
    starts = [r for r in records if r["record"] == "run_start"]
    assert (resumed["step"], resumed["world_size_before"]) == (AT, saved_ranks)
    assert [s["world_size"] for s in starts] == [saved_ranks, ranks]
    assert starts[-1]["strategy"] == strategy and records[-1]["status"] == "success"
    reference, losses = step_losses(whole), step_losses(tmp_path / case)
    assert len(losses) == len(reference) == 40
    assert (losses[:AT] == reference[:AT]).all()  # the saving launch's own records
    apart = abs(losses - reference) / reference
    print(f"{case}: max relative loss difference after the resize {apart.max():.3g}")
    assert apart.max() <= allowed[0], (case, int(apart.argmax()) + 1)
    ours, theirs = torch.load(tmp_path / case / "model.pt"), torch.load(whole / "model.pt")
    assert ours.keys() == theirs.keys()
    weights = max((ours[name] - theirs[name]).abs().max().item() for name in ours)
    print(f"{case}: max weight difference {weights:.3g}")
    assert weights <= allowed[1]
    capsys.readouterr()
    assert compare.main([str(tmp_path / case)]) == 0  # the run's own row and its history
    shown = capsys.readouterr().out
    said = f"resumed at step {AT} as {strategy} x{ranks}, saved by {saved_ranks} rank(s)"
    assert said in shown and f"resized x{saved_ranks}->x{ranks})" in shown
