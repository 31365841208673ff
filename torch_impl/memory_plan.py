"""What one rank of a torch configuration holds at a world size it was not run at, without the
ranks: torch's own memory trackers (`torch.distributed._tools`) follow two optimizer steps of
rank 0 over a fake process group of N ranks, in this one process, on the CPU.

    python -m torch_impl.memory_plan --config configs/mlp_adam.yaml --set torch.strategy=fsdp2 \\
        --world 2,8,64
    python -m torch_impl.memory_plan --requests FILE   # several runs' plans, one process

The model is built as training builds it, with the run's optimizer and precision, and steps on
a random batch of the per-rank size at N. The fake group's collectives allocate what the real
ones would, so the tracker counts, at the step's peak: parameters, gradients, optimizer state,
activations and the collectives' buffers (tensor bytes only: `memory_at_n` adds the base).
FSDPMemTracker follows fully_shard (fsdp2, hsdp), MemTracker the replica (single, ddp); fsdp1
is not priced (neither follows its flat parameters).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common.core.config import config_io
from common.core.config.config import Config
from common.core.config.strategies import get
from torch_impl.memory_tracker import CATEGORIES, per_rank_batch, tracked
from torch_impl.parallel import resolve_strategy


def plan(
    cfg: Config,
    worlds: Sequence[int],
    scaling: str,
    run_world: int = 1,
    local_world: int | None = None,
) -> list[dict[str, Any]]:
    """One row per world size: strategy, world, per-rank batch and `tracked`'s bytes; a world
    the batch cannot split over gets its reason instead."""
    rows = []
    for world in worlds:
        resolved = resolve_strategy(cfg, world)
        row: dict[str, Any] = {"strategy": resolved.torch.strategy, "world": world}
        try:
            if world > 1 and get("torch", resolved.torch.strategy).processes == "one":
                raise ValueError(f"{resolved.torch.strategy} runs one process, not {world}")
            row["batch"] = per_rank_batch(resolved, world, scaling, run_world)
            parts = resolved.train.accumulation_steps
            if row["batch"] % parts:
                raise ValueError(
                    f"train.accumulation_steps={parts} does not divide the per-rank batch of "
                    f"{row['batch']} at {world} workers"
                )
            row.update(tracked(resolved, world, row["batch"], local_world))
        except ValueError as error:
            row["refused"] = str(error)
        rows.append(row)
    return rows


def _worlds(text: str) -> list[int]:
    try:
        worlds = [int(part) for part in text.split(",")]
    except ValueError:
        worlds = []
    if not worlds or min(worlds) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give world sizes of 1 or more, e.g. 2,8,64")
    return worlds


def _rows(
    config: Path | None,
    overrides: Sequence[str],
    worlds: Sequence[int],
    scaling: str,
    run_world: int,
    local_world: int | None,
    variants: Sequence[str] | None,
) -> list[dict[str, Any]]:
    """Every world's row of the configuration, of each variant (with its "variant") when
    `variants` are given; ValueError for a bad configuration."""
    rows = []
    for variant in variants or [""]:
        cfg = config_io.load_config(config, [*overrides, *variant.split()])
        found = plan(cfg, worlds, scaling, run_world, local_world)
        rows += [{**row, "variant": variant} for row in found] if variants else found
    return rows


def _answer_requests(parser: argparse.ArgumentParser, path: Path) -> int:
    """Each request of the file at `path`, one after another in this process."""
    try:
        requests = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as error:
        parser.error(f"--requests {path}: {error}")
    for index, request in enumerate(requests):
        try:
            rows = _rows(
                Path(request["config"]) if request.get("config") else None,
                request.get("overrides", []),
                request["world"],
                request.get("scaling", "strong"),
                request.get("run_world", 1),
                request.get("local_world"),
                request.get("variants"),
            )
        except (KeyError, TypeError) as error:
            parser.error(f"--requests {path}, line {index + 1}: {error!r} is missing or wrong")
        except ValueError as error:
            parser.error(f"--requests {path}, line {index + 1}: {error}")
        for row in rows:
            print(json.dumps({**row, "request": index}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_impl.memory_plan",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    config_io.add_config_arguments(parser)
    parser.add_argument(
        "--requests",
        type=Path,
        help="a file of plans, one JSON object a line (above): every row as JSON, with its "
        "request's index",
    )
    parser.add_argument("--world", type=_worlds, help="world sizes, e.g. 2,8,64")
    parser.add_argument("--scaling", choices=("strong", "weak"), default="strong")
    parser.add_argument(
        "--run-world", type=int, default=1, help="the ranks the run had (its global batch)"
    )
    parser.add_argument("--local-world", type=int, help="ranks per node (hsdp's shard group)")
    parser.add_argument("--json", action="store_true", help="one JSON line per world size")
    parser.add_argument(
        "--variant",
        action="append",
        metavar="'KEY=VALUE ...'",
        help="plan the configuration with these settings too, in this one process (its rows "
        "carry the variant); repeatable, '' for the configuration as given",
    )
    args = parser.parse_args(argv)
    if args.requests is not None:
        return _answer_requests(parser, args.requests)
    if args.world is None:
        parser.error("--world is required (or --requests FILE)")
    try:
        rows = _rows(
            args.config,
            args.overrides,
            args.world,
            args.scaling,
            args.run_world,
            args.local_world,
            args.variant,
        )
    except ValueError as error:  # the config's own message names the key and the fix
        parser.error(str(error))
    for row in rows:
        if args.json:
            print(json.dumps(row))
        elif "refused" in row:
            print(f"{row['strategy']} x{row['world']}: {row['refused']}")
        else:
            parts = "  ".join(f"{c} {row[c] / 2**20:,.1f}" for c in CATEGORIES)
            print(
                f"{row['strategy']} x{row['world']} (batch {row['batch']}/rank): "
                f"peak {row['peak'] / 2**20:,.1f} MiB = {parts}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
