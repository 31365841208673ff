"""The bench passes a strategy's option only to the strategies that read it: one `--set
torch.sharding=shard_grad_op` made the ddp cell exit 2, and the whole bench failed. A `--vary`
adds a cell beside each strategy that reads its key, so that one run holds both rows."""

import argparse

from common.core.config import strategies
from common.tools import bench_cells


def arguments(**changed):
    chosen = dict(
        models="mlp",
        strategies="single,ddp,fsdp2,hsdp,mwms",
        compile="eager",
        pipelines="tensor",
        nproc=2,
        tf_ranks="",
        train_limit=640,
        device="cpu",
        set=[],
        vary=[],
        timed_epochs=2,
        floor=False,
    )
    return argparse.Namespace(**{**chosen, **changed})


def extras(args):
    """{row label without its pipeline: the overrides its launch gets}"""
    found = {}
    for cell in bench_cells.measurements(args, ["torch", "tf"]):
        if "baselines" not in cell.label:
            found[cell.label.split(" / ")[0]] = cell.measure.args[1].keywords["extra"]
    return found


def test_an_option_of_some_strategies_goes_to_those_only():
    given = ["torch.sharding=shard_grad_op", "torch.wrap=size", "train.seed=3"]
    found = extras(arguments(set=given))
    assert "torch.sharding=shard_grad_op" not in found["torch ddp"]
    assert "torch.sharding=shard_grad_op" not in found["torch single"]
    assert "torch.sharding=shard_grad_op" in found["torch fsdp2"]
    assert "torch.sharding=shard_grad_op" in found["torch hsdp"]
    assert all("train.seed=3" in extra for extra in found.values())
    assert strategies.takes(strategies.get("tf", "mwms"), "torch.sharding=shard_grad_op")


def test_a_varied_setting_adds_a_row_beside_each_strategy_that_reads_it():
    varied = ["torch.sharding=shard_grad_op", "train.steps_per_call=16", "tf.jit_compile=true"]
    found = extras(arguments(vary=varied))
    assert set(found) == {
        "torch single",
        "torch ddp",
        "torch fsdp2",
        "torch hsdp",
        "tf mwms",
        "torch fsdp2 sharding=shard_grad_op",
        "torch hsdp sharding=shard_grad_op",
        "torch single train.steps_per_call=16",
        "torch ddp train.steps_per_call=16",
        "torch fsdp2 train.steps_per_call=16",
        "torch hsdp train.steps_per_call=16",
        "tf mwms train.steps_per_call=16",
        "tf mwms jit_compile=true",
    }
    assert "torch.sharding=shard_grad_op" in found["torch fsdp2 sharding=shard_grad_op"]
    assert not any("torch.sharding" in o for o in found["torch fsdp2"])  # the plain row stays
    assert found["tf mwms jit_compile=true"][-1] == "tf.jit_compile=true"  # after --compile's


def test_a_cell_the_other_commit_cannot_run_is_named_with_its_reason():
    from common.tools.bench import reason

    failed = RuntimeError(
        "torch ddp/tensor failed (exit 2):\n--- end of its stderr ---\n[launch] rank 0 exited 2\n"
        "Error: Unknown config key: train.steps_per_call; allowed in train: epochs"
    )
    assert (
        reason(failed)
        == "Error: Unknown config key: train.steps_per_call; allowed in train: epochs"
    )
    assert reason(RuntimeError("it timed out")) == "it timed out"


def test_every_cell_times_the_epochs_asked_for():
    """--timed-epochs reaches each launch and each framework's baselines."""
    for cell in bench_cells.measurements(arguments(), ["torch", "tf"]):
        measure = cell.measure if "baselines" in cell.label else cell.measure.args[1]
        timed = measure.args[3] if "baselines" in cell.label else measure.keywords["timed"]
        assert timed == 2, cell.label


def test_the_floor_measures_each_plain_loop_again_after_its_frameworks_launches():
    """--floor: one more cell per framework and model, the plain loop alone, after the
    framework's launches, on this tree only (its ratio to the plain loop is the host's noise)."""
    args = arguments(strategies="single,mwms", models="mlp,cnn", floor=True)
    cells = bench_cells.measurements(args, ["torch", "tf"])
    labels = [(cell.model, cell.label) for cell in cells]
    assert labels == [
        (model, label)
        for model in ("mlp", "cnn")
        for label in (
            "torch baselines",
            "torch single / tensor",
            "torch plain loop, again",
            "tf baselines",
            "tf mwms / tensor",
            "tf plain loop, again",
        )
    ]
    again = [cell for cell in cells if cell.label.endswith("again")]
    assert all(cell.here_only for cell in again)
    assert not any(cell.here_only for cell in cells if cell not in again)
    assert all(cell.measure.args[1].keywords == {"plain_only": True} for cell in again)
    assert not bench_cells.measurements(arguments(), ["torch"])[-1].label.endswith("again")
