"""dist.deterministic on the CPU (tf): accepted and recorded; it moves the losses by float32
rounding only (op determinism picks other reduction kernels: 3e-9 relative in the train loss,
2e-7 in the val loss here), not bit for bit as on torch's side; and a stopped and resumed run
equals an uninterrupted one with it on, bit for bit. Its purpose, bitwise repeats on a GPU, is
checked by the GPU tier (tests/gpu)."""

import numpy as np

from tests.determinism import curve, default_strict_and_resumed, modes


def test_the_mode_is_recorded_moves_only_rounding_on_the_cpu_and_resumes_bitwise(tmp_path):
    runs = default_strict_and_resumed("tf_impl.train", tmp_path)
    default, strict = modes(runs)
    assert (default["deterministic"], strict["deterministic"]) == (False, True)
    assert strict["deterministic_settings"]["op_determinism"] is True
    assert np.allclose(curve(runs.strict), curve(runs.default), rtol=1e-6, atol=0)
    assert curve(runs.resumed) == curve(runs.strict)
