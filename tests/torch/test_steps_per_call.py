"""train.steps_per_call on torch for real: several steps a call (one after another, their
losses read once) are the same steps as one call each, bit for bit, on 1 and 2 ranks, the
epoch's last call shorter."""

import pytest

from tests.launching import per_call_against_one


@pytest.mark.parametrize("nproc", [0, 2])
def test_five_steps_a_call_equal_one_step_a_call(run_torch, nproc):
    one, five, start = per_call_against_one(run_torch, nproc)
    assert five == one  # every step's loss and lr, every epoch's figures
    assert start["config"]["train"]["steps_per_call"] == 5
