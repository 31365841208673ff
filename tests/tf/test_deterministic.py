"""dist.deterministic on the CPU (tf): accepted and recorded; it moves the losses by float32
rounding only (op determinism picks other reduction kernels: 3e-9 relative in the train loss,
2e-7 in the val loss here), not bit for bit as on torch's side; and a stopped and resumed run
equals an uninterrupted one with it on, bit for bit. Its purpose, bitwise repeats on a GPU, is
checked by the GPU tier (tests/gpu)."""

import json

import numpy as np

from tests.launching import runner

SETTINGS = [
    "data.train_limit=1280",
    "data.test_limit=500",
    "train.epochs=2",
    "train.checkpoint_every_epochs=1",
    "model.dropout=true",
    "dist.device=cpu",
]


def records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def curve(run_dir):
    epochs = {r["epoch"]: r for r in records(run_dir) if r["record"] == "epoch"}
    return [(e["train_loss"], e["val_loss"], e["val_accuracy"]) for _, e in sorted(epochs.items())]


def test_the_mode_is_recorded_changes_nothing_on_the_cpu_and_resumes_bitwise(tmp_path):
    run = runner("tf_impl.train", tmp_path)
    _, default = run("default", 0, *SETTINGS, small=False)
    _, strict = run("strict", 0, *SETTINGS, "dist.deterministic=true", small=False)
    numerics = [records(folder)[0]["numerics"] for folder in (default, strict)]
    assert [n["deterministic"] for n in numerics] == [False, True]
    assert numerics[1]["deterministic_settings"]["op_determinism"] is True
    assert np.allclose(curve(strict), curve(default), rtol=1e-6, atol=0)
    run(
        "parts",
        0,
        *SETTINGS,
        "dist.deterministic=true",
        small=False,
        extra=["--stop-after-epoch", "1"],
    )
    _, parts = run(
        "parts", 0, *SETTINGS, "dist.deterministic=true", small=False, extra=["--resume"]
    )
    assert curve(parts) == curve(strict)
