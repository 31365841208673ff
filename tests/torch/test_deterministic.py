"""dist.deterministic on the CPU (torch): accepted and recorded, it changes nothing bit for bit
(torch's CPU kernels repeat already), and a stopped and resumed run equals an uninterrupted
one with it on. Its purpose, bitwise repeats on a GPU, is checked by the GPU tier (tests/gpu)."""

from tests.determinism import curve, default_strict_and_resumed, modes


def test_the_mode_is_recorded_changes_nothing_on_the_cpu_and_resumes_bitwise(tmp_path):
    runs = default_strict_and_resumed("torch_impl.train", tmp_path)
    default, strict = modes(runs)
    assert (default["deterministic"], strict["deterministic"]) == (False, True)
    assert strict["deterministic_settings"]["algorithms"] is True
    assert curve(runs.strict) == curve(runs.default)
    assert curve(runs.resumed) == curve(runs.strict)
