"""output.tensorboard=true: the chief writes TensorBoard scalars into the run folder while the
run goes (read back with TensorBoard's own reader while the run is still training), on both
frameworks, and a run without tensorboardX would be refused before it starts."""

import json
import subprocess
import time

import pytest

from tests.launching import SMALL, train_command


def scalars(run_dir) -> dict[str, list[tuple[int, float]]]:
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    events = accumulator.EventAccumulator(str(run_dir))
    events.Reload()
    return {
        tag: [(event.step, event.value) for event in events.Scalars(tag)]
        for tag in events.Tags()["scalars"]
    }


@pytest.mark.parametrize("module", ["torch_impl.train", "tf_impl.train"])
def test_scalars_appear_while_the_run_trains(module, tmp_path):
    pytest.importorskip("tensorboardX")
    settings = [
        *SMALL,
        "train.epochs=1000",  # killed once two epochs are in
        "train.log_every_steps=5",
        "output.tensorboard=true",
        f"output.dir={tmp_path}",
        "output.run_name=live",
    ]
    run = subprocess.Popen(
        train_command(module, 2, settings, ["--quiet"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    metrics = tmp_path / "live" / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if metrics.is_file() and metrics.read_text().count('"record": "epoch"') >= 2:
                break
            assert run.poll() is None, run.communicate()[0]
            time.sleep(0.2)
        seen = scalars(tmp_path / "live")
        assert run.poll() is None, "the run ended before its scalars were read"
    finally:
        run.kill()
        run.communicate(timeout=60)
    epochs = [json.loads(line) for line in metrics.read_text().splitlines()]
    first = next(record for record in epochs if record["record"] == "epoch")
    assert seen["loss/val"][0] == (1, pytest.approx(first["val_loss"], rel=1e-6))
    assert {
        "accuracy/val",
        "throughput/samples_per_s",
        "memory/peak_mib",
        "loss/train_step",
    } <= set(seen)
    assert "traffic/sent_mb_per_step" in seen
