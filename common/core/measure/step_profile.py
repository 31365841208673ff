"""What the step profilers of both sides print (`torch_impl.step_profile`,
`tf_impl.step_profile`): the profiled steps' mean and median, each category's ms per step, and
one JSON line (`STEP_PROFILE`) that tests and scripts read."""

from __future__ import annotations

import argparse
import json
import statistics


def arguments(prog: str, description: str | None, argv: list[str] | None) -> argparse.Namespace:
    """Both step profilers' command line: --config, --set KEY=VALUE (repeatable), --steps."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    parser.add_argument("--steps", type=int, default=20)
    return parser.parse_args(argv)


def report(label: str, walls: list[float], ms_per_step: dict[str, float]) -> None:
    """Print the split of steps whose wall times were `walls` (seconds)."""
    mean, median = 1000 * statistics.mean(walls), 1000 * statistics.median(walls)
    print(f"{label}: {mean:.2f} ms per step, median {median:.2f} (profiled); of the mean:")
    for name, ms in ms_per_step.items():
        print(f"  {name:<16} {ms:7.2f} ms per step")
    said = {"run": label, "mean_ms": mean, "median_ms": median, "ms_per_step": ms_per_step}
    print("STEP_PROFILE " + json.dumps(said), flush=True)
