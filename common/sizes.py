"""The model-size axis: named sizes, the series compare.py draws against parameter count, and a
local sweep that runs every size x strategy on this machine through `common.launch`.

    python -m common.sizes --sizes 0.1M,10M,100M,300M [--nproc 2] [--steps 4] [--out DIR]

A size is a preset name (`PRESETS`, MLP hidden widths), a hidden list written `4096x4096`, or
`w<N>` for the CNN's width multiplier. The sweep trains on synthetic data (`data.name=
synthetic`) so that big models measure the model and not the input pipeline, with plain SGD
(`SWEEP_DEFAULTS`: the state is parameters and gradients, so that 2 TensorFlow workers of 300M
parameters fit in 24 GiB; `--set optim.name=adam` for Adam's state), runs the cells one after
another so that none shares the cores with another, then calls compare.py on the results.
slurm/sweep.py --sizes submits the same matrix to SLURM.
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import time
from pathlib import Path

from common import report, tables, weights
from common.config import ModelConfig

# MLP hidden widths for round parameter counts (common.weights.parameter_count):
PRESETS: dict[str, tuple[int, ...]] = {
    "0.1M": (128, 64),  # the seed MLP, 109,386
    "10M": (2816, 2816),  # 10,171,402
    "100M": (5632,) * 4,  # 99,652,618
    "300M": (6144,) * 9,  # 306,923,530
    "1B": (16384,) * 5,  # 1,086,832,650
}
SWEEP_DEFAULTS = ["data.name=synthetic", "optim.name=sgd", "optim.lr=0.01"]
SIZE_KEYS = ("model.hidden", "model.width")  # what a size changes; the rest must match
REPO_ROOT = Path(__file__).resolve().parent.parent


def size_model(size: str) -> ModelConfig:
    """The model of one size. Raises ValueError naming the accepted forms."""
    if size in PRESETS:
        return ModelConfig(name="mlp", hidden=PRESETS[size])
    if size.startswith("w") and size[1:].isdigit() and int(size[1:]) >= 1:
        return ModelConfig(name="cnn", width=int(size[1:]))
    widths = size.split("x")
    if all(width.isdigit() and int(width) >= 1 for width in widths):
        return ModelConfig(name="mlp", hidden=tuple(int(width) for width in widths))
    raise ValueError(
        f"size {size!r}: give a preset ({', '.join(PRESETS)}), MLP hidden widths such as "
        "4096x4096, or w<N> for the CNN's width multiplier"
    )


def size_overrides(size: str) -> list[str]:
    """The `--set` overrides of one size."""
    model = size_model(size)
    if model.name == "cnn":
        return ["model.name=cnn", f"model.width={model.width}"]
    return ["model.name=mlp", f"model.hidden=[{', '.join(map(str, model.hidden))}]"]


def size_params(size: str) -> int:
    """Parameters of a size, for planning (the same count the runs record)."""
    return weights.parameter_count(size_model(size))


def size_rows(runs: list) -> list[dict]:
    """One row per series (framework x strategy x workers x layout, and everything else in the
    config but the model's size) and parameter count: `Run.summary`'s throughput and memory,
    medians over repeats; [] unless some series holds two sizes or more, the only case where a
    size axis says anything."""
    cells: dict[tuple, list] = {}
    for run in runs:
        params = run.start.get("model_params")
        if params is None or not run.epochs:
            continue
        rest = {k: v for k, v in run.comparable().items() if k not in SIZE_KEYS}
        start = run.start
        series = (start["framework"], start["strategy"], start["world_size"], run.layout)
        cells.setdefault((*series, repr(sorted(rest.items())), params), []).append(run)
    rows = []
    for (framework, strategy, world, layout, rest, params), members in sorted(cells.items()):
        summaries = [run.summary() for run in members]
        row = {
            "framework": framework,
            "strategy": strategy,
            "world": world,
            "layout": layout,
            "series": rest,
            "params": params,
            "runs": len(members),
        }
        for name in ("samples_s", "state_mib", "above_mib", "peak_mib"):
            row[name] = report.median_of(summary[name] for summary in summaries)
        rows.append(row)
    sizes: dict[tuple, set] = {}
    for row in rows:
        key = (row["framework"], row["strategy"], row["world"], row["layout"], row["series"])
        sizes.setdefault(key, set()).add(row["params"])
    return rows if any(len(found) > 1 for found in sizes.values()) else []


SIZE_COLUMNS = [  # key, header, digits
    ("parameters", "parameters", 0),
    ("framework", "framework", 0),
    ("strategy", "strategy", 0),
    ("world", "workers", 0),
    ("runs", "runs", 0),
    ("samples_s", "samples/s", 1),
    ("state_mib", "state MiB/rank", 0),
    ("above_mib", "above base MiB/rank", 0),
    ("peak_mib", "peak MiB/rank", 0),
]


def size_table_lines(rows: list[dict]) -> list[list[str]]:
    ordered = sorted(rows, key=lambda r: (r["params"], r["framework"], r["strategy"], r["world"]))
    shown = [{**row, "parameters": f"{row['params'] / 1e6:,.1f}M"} for row in ordered]
    return tables.table_lines(shown, SIZE_COLUMNS)


# ---- the local sweep ------------------------------------------------------------------------


def cell_command(framework: str, strategy: str, nproc: int, settings: list[str]) -> list[str]:
    module = "torch_impl.train" if framework == "torch" else "tf_impl.train"
    ranks = 1 if strategy == "single" else nproc
    train = [sys.executable, "-m", module, "--quiet"]
    for setting in settings + ([f"torch.strategy={strategy}"] if framework == "torch" else []):
        train += ["--set", setting]
    return [sys.executable, "-m", "common.launch", "--nproc", str(ranks), "--", *train]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m common.sizes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--sizes", default="0.1M,10M,100M,300M")
    parser.add_argument("--strategies", default="single,ddp,fsdp1,fsdp2", help="torch's")
    parser.add_argument("--frameworks", default="torch,tf")
    parser.add_argument("--nproc", type=int, default=2, help="ranks of the distributed cells")
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per epoch")
    parser.add_argument("--epochs", type=int, default=2, help="epoch 1 is warm-up")
    parser.add_argument("--batch", type=int, default=32, help="global batch")
    parser.add_argument("--out", type=Path, default=Path("results/sizes"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    try:
        sizes = {size: size_overrides(size) for size in args.sizes.split(",") if size}
    except ValueError as error:
        parser.error(str(error))
    if args.steps < 1 or args.epochs < 1 or args.nproc < 1 or args.batch % args.nproc:
        parser.error("--steps, --epochs, --nproc must be >= 1 and --nproc must divide --batch")
    shared = [
        *SWEEP_DEFAULTS,
        f"data.train_limit={args.steps * args.batch}",
        f"data.test_limit={args.batch * 4}",
        f"train.batch_size={args.batch}",
        f"train.epochs={args.epochs}",
        f"output.dir={args.out.resolve()}",
        *args.set,
    ]
    frameworks = args.frameworks.split(",")
    strategies = {"torch": args.strategies.split(","), "tf": ["mwms"]}
    matrix = [
        (size, framework, strategy)
        for size, framework in itertools.product(sizes, frameworks)
        for strategy in strategies[framework]
    ]
    failed, began = [], time.perf_counter()
    for index, (size, framework, strategy) in enumerate(matrix, start=1):
        name = f"{framework}-{strategy}-{size}-{time.strftime('%H%M%S')}"
        settings = [*shared, *sizes[size], f"output.run_name={name}"]
        print(f"[{index}/{len(matrix)}] {framework} {strategy} {size}", flush=True)
        done = subprocess.run(cell_command(framework, strategy, args.nproc, settings))
        if done.returncode != 0:
            failed.append(f"{framework} {strategy} {size} (exit {done.returncode})")
    print(f"sweep: {len(matrix)} runs in {time.perf_counter() - began:.0f} s", flush=True)
    report = args.out / "report"
    compare = [sys.executable, str(REPO_ROOT / "compare.py"), str(args.out), "--out", str(report)]
    shown = subprocess.run(compare)
    for failure in failed:
        print(f"failed: {failure}", file=sys.stderr)
    return 1 if failed or shown.returncode else 0


if __name__ == "__main__":
    raise SystemExit(main())
