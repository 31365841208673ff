"""What every GPU run must have filled in its records."""

import json
from pathlib import Path


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_a_filled_gpu_run(run_dir: Path) -> None:
    found = records(run_dir)
    start, end = found[0], found[-1]
    epochs = [r for r in found if r["record"] == "epoch"]
    assert end["record"] == "run_end" and end["status"] == "success", end
    assert start["device_type"] == "gpu" and start["numerics"]["compute_dtype"]
    assert epochs and all(e["step_time_p50_s"] > 0 for e in epochs)
    for entry in epochs[-1]["memory"]:
        assert entry["peak_bytes"] > 0 and entry["reserved_peak_bytes"] > 0, entry
