"""compare's verdict on real repeats: 3 runs each of torch single and TensorFlow on one worker,
trained here, give a Welch's t-test p-value in the sentence that compares the frameworks."""

import re

import compare
from tests.launching import runner

QUICK = ["data.train_limit=640", "data.test_limit=200", "train.epochs=2", "model.dropout=false"]


def test_real_repeats_get_a_significance_test(tmp_path, capsys):
    for repeat in range(3):  # interleaved, as the bench and sweeps do
        runner("torch_impl.train", tmp_path, warm=True)(f"torch-{repeat}", 0, *QUICK, small=False)
        runner("tf_impl.train", tmp_path, warm=True)(f"tf-{repeat}", 0, *QUICK, small=False)
    capsys.readouterr()
    assert compare.main([str(tmp_path)]) == 0
    said = capsys.readouterr().out
    sentence = next(line for line in said.splitlines() if "At 1 worker(s)" in line)
    assert re.search(
        r"Welch's t-test p = [0-9.e-]+; mean ± standard error [0-9,]+ ± [0-9,]+ and", sentence
    ), sentence
    assert ("the faster framework is" in sentence) or ("no measurable difference" in sentence)
