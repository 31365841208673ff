"""train.steps_per_call on TensorFlow for real: several steps in one tf.function call are the
same steps as one call each, bit for bit, on 1 and 2 workers, the epoch's last call shorter."""

import pytest

from tests.records import read_metrics

# 2,048 samples / 64 = 32 steps an epoch: calls of 5 leave a call of 2; a step record every 4
PER_CALL = ["train.steps_per_call=5", "train.log_every_steps=4"]


def losses(folder):
    kept = ("epoch", "step", "loss", "lr", "train_loss", "val_loss", "val_accuracy")
    return [
        {key: record[key] for key in kept if key in record}
        for record in read_metrics(folder / "metrics.jsonl")
        if record["record"] in ("epoch", "step")
    ]


@pytest.mark.parametrize("nproc", [0, 2])
def test_five_steps_a_call_equal_one_step_a_call(run_tf, nproc):
    _, one = run_tf(f"one{nproc}", nproc, "train.log_every_steps=4", "optim.name=sgd",
                    "optim.lr=0.05", "optim.schedule=onecycle")  # fmt: skip
    _, five = run_tf(f"five{nproc}", nproc, *PER_CALL, "optim.name=sgd", "optim.lr=0.05",
                     "optim.schedule=onecycle")  # fmt: skip
    assert losses(five) == losses(one)  # every step's loss and lr, every epoch's figures
    start = read_metrics(five / "metrics.jsonl")[0]
    assert start["config"]["train"]["steps_per_call"] == 5
