"""train.steps_per_call on TensorFlow for real: several steps in one tf.function call are the
same steps as one call each, bit for bit, on 1 and 2 workers, the epoch's last call shorter."""

import pytest

from tests.launching import per_call_against_one


@pytest.mark.parametrize("nproc", [0, 2])
def test_five_steps_a_call_equal_one_step_a_call(run_tf, nproc):
    one, five, start = per_call_against_one(run_tf, nproc)
    assert five == one  # every step's loss and lr, every epoch's figures
    assert start["config"]["train"]["steps_per_call"] == 5
