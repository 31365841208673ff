"""TensorFlow on the GPUs it sees (its CUDA build): MWMS at world size = the visible GPUs, at
every precision, with and without XLA; fp16's skipped step; the refusal of more workers than
GPUs; and dist.deterministic's promise: bitwise repeats and resumes. Never run on a GPU yet
(README, "GPU tier"): no GPU machine here had TensorFlow."""

import numpy as np
import pytest

from common.core.measure.precision import FORCE_OVERFLOW_VARIABLE, LOSS_SCALE_INIT
from tests.gpu.checks import assert_a_filled_gpu_run, records
from tests.launching import runner

SHORT = ["data.train_limit=6400", "data.test_limit=1000", "train.epochs=2", "dist.device=gpu"]
PRECISIONS = {
    "none": ["tf.mixed_precision=none"],
    "tf32": ["tf.mixed_precision=none", "dist.tf32=true"],
    "bf16": ["tf.mixed_precision=bf16"],
    "fp16": ["tf.mixed_precision=fp16"],
}

STRICT = [
    "dist.deterministic=true",
    "output.save_model=true",
    "train.checkpoint_every_epochs=1",
]


def launched(run, name, gpus, *settings, **kwargs):
    return run(name, 0 if gpus == 1 else gpus, *SHORT, *settings, **kwargs)


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
@pytest.mark.parametrize("precision", list(PRECISIONS))
def test_every_precision_runs_with_and_without_xla(tf_gpus, tmp_path, precision, jit):
    run = runner("tf_impl.train", tmp_path)
    settings = [*PRECISIONS[precision], f"tf.jit_compile={str(jit).lower()}"]
    _, run_dir = launched(run, "r", tf_gpus, *settings)
    assert_a_filled_gpu_run(run_dir)
    assert records(run_dir)[0]["numerics"]["tf32_effective"] is (precision == "tf32")


def test_an_fp16_overflow_is_skipped_and_halves_the_scale(tf_gpus, tmp_path):
    run = runner("tf_impl.train", tmp_path)
    _, run_dir = launched(
        run, "o", tf_gpus, *PRECISIONS["fp16"], env={FORCE_OVERFLOW_VARIABLE: "0:3"}
    )
    first = [r for r in records(run_dir) if r["record"] == "epoch"][0]
    assert first["skipped_steps"] == [1] * tf_gpus
    assert first["loss_scale"] == [LOSS_SCALE_INIT / 2] * tf_gpus


def test_more_workers_than_gpus_are_refused(tf_gpus, tmp_path):
    run = runner("tf_impl.train", tmp_path)
    done, run_dir = run("many", tf_gpus + 1, *SHORT, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "GPU" in done.stdout + done.stderr and not (run_dir / "metrics.jsonl").exists()


def weights(run_dir):
    with np.load(run_dir / "model.npz") as saved:
        return dict(saved)


def test_deterministic_runs_repeat_and_resume_bitwise(tf_gpus, tmp_path):
    run = runner("tf_impl.train", tmp_path)
    strict = STRICT
    first, second = (weights(launched(run, f"repeat{i}", tf_gpus, *strict)[1]) for i in (1, 2))
    assert all(np.array_equal(first[name], second[name]) for name in first)
    launched(run, "parts", tf_gpus, *strict, extra=["--stop-after-epoch", "1"])
    parts = weights(launched(run, "parts", tf_gpus, *strict, extra=["--resume"])[1])
    assert all(np.array_equal(first[name], parts[name]) for name in first)
