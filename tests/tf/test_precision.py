"""Mixed precision on TensorFlow workers: fp16 loss scaling that skips the same steps on every
worker (an overflow forced on one of 2 real RING workers), its state across a resume, bf16 on
the CPU, and TF32 set and recorded."""

import numpy as np
import pytest

from common.core.measure.precision import FORCE_OVERFLOW_VARIABLE, LOSS_SCALE_INIT
from tests.launching import runner
from tests.records import read_metrics

FP16 = ["tf.mixed_precision=fp16", "dist.timeout_s=20"]
OVERFLOW_ON_WORKER_1 = {FORCE_OVERFLOW_VARIABLE: "1:3"}


def records(run_dir, kind):
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if r["record"] == kind]


def test_an_overflow_on_one_worker_is_skipped_by_every_worker(run_tf):
    """Keras' own LossScaleOptimizer left worker 0 waiting in the all-reduce until the timeout
    (measured: DeadlineExceeded after dist.timeout_s, the run failed)."""
    done, run_dir = run_tf("fp16", 2, *FP16, env=OVERFLOW_ON_WORKER_1)
    first, second = records(run_dir, "epoch")
    assert first["skipped_steps"] == [1, 1] and second["skipped_steps"] == [0, 0]
    assert first["loss_scale"] == second["loss_scale"] == [LOSS_SCALE_INIT / 2] * 2
    assert first["replicas_in_sync"] is True and second["replicas_in_sync"] is True
    assert second["train_time_s"] < 20  # nobody waited for a timeout
    numerics = records(run_dir, "run_start")[0]["numerics"]
    assert numerics["compute_dtype"] == "fp16" and numerics["loss_scaling"].startswith("dynamic")


def test_the_loss_scale_survives_a_resume(run_tf):
    # 10 steps an epoch, not 32: fp16 is emulated on the CPU (40 s for the three launches)
    settings = [*FP16, "train.epochs=3", "data.train_limit=640", "data.test_limit=250"]
    settings += ["train.eval_batch_size=250", "output.save_model=true"]
    _, whole = run_tf("whole", 0, *settings, env={FORCE_OVERFLOW_VARIABLE: "0:3"})
    _, parts = run_tf(
        "parts",
        0,
        *settings,
        extra=["--stop-after-epoch", "1"],
        env={FORCE_OVERFLOW_VARIABLE: "0:3"},
    )
    run_tf("parts", 0, *settings, extra=["--resume"])
    assert [r["loss_scale"] for r in records(parts, "epoch")] == [
        r["loss_scale"] for r in records(whole, "epoch")
    ]
    assert [r["skipped_steps"] for r in records(parts, "epoch")] == [[1], [0], [0]]
    final = np.load(whole / "model.npz"), np.load(parts / "model.npz")
    assert all(np.array_equal(final[0][name], final[1][name]) for name in final[0].files)


def test_bf16_trains_on_the_cpu(run_tf):
    _, run_dir = run_tf("bf16", 2, "tf.mixed_precision=bf16")
    first, second = records(run_dir, "epoch")
    assert second["train_loss"] < first["train_loss"] and second["val_accuracy"] > 0.8
    numerics = records(run_dir, "run_start")[0]["numerics"]
    assert (numerics["param_dtype"], numerics["compute_dtype"]) == ("fp32", "bf16")
    assert numerics["how"] == "Keras policy mixed_bfloat16"


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """One worker for one epoch with every other setting at its default (TF32 off, the CPU
    kernels the suite picks): read by the TF32 and the kernel tests."""
    run = runner("tf_impl.train", tmp_path_factory.mktemp("default"), warm=True)
    return run("default", 0, "train.epochs=1")[1]


@pytest.mark.parametrize("enabled", [False, True])
def test_tf32_is_set_and_recorded(run_tf, default_run, enabled):
    if enabled:
        _, run_dir = run_tf("tf32", 0, "dist.tf32=true", "train.epochs=1")
    else:  # dist.tf32=false is the default
        run_dir = default_run
    numerics = records(run_dir, "run_start")[0]["numerics"]
    assert numerics["tf32"] is enabled and numerics["tf32_effective"] is False  # no GPU here
    assert numerics["tf32_settings"] == {"tensor_float_32_execution": enabled}


@pytest.mark.parametrize(("switch", "kernels"), [(None, "oneDNN"), ("0", "Eigen")])
def test_the_cpu_kernels_are_onednn_unless_the_user_says_no_and_recorded(
    run_tf, default_run, switch, kernels
):
    """The pip build leaves oneDNN off on processors without AVX-512 (Eigen's convolutions
    trained the CNN 1.08x slower on a Zen 3 host); the suite turns it on, and a user's
    TF_ENABLE_ONEDNN_OPTS=0 still wins."""
    if switch is None:
        run_dir = default_run
    else:
        _, run_dir = run_tf(
            f"kernels-{kernels}", 0, "train.epochs=1", env={"TF_ENABLE_ONEDNN_OPTS": switch}
        )
    assert records(run_dir, "run_start")[0]["numerics"]["cpu_kernels"] == kernels
