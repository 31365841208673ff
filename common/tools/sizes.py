"""The model-size axis: named sizes, the series compare.py draws against parameter count, and a
local sweep that runs every size x strategy on this machine through `common.launch`.

    python -m common.tools.sizes --sizes 0.1M,10M,100M,300M [--nproc 2] [--steps 4] [--out DIR]

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

from common.core.config import strategies
from common.models.size_names import size_overrides
from common.tools import programs

SWEEP_DEFAULTS = ["data.name=synthetic", "optim.name=sgd", "optim.lr=0.01"]
REPO_ROOT = Path(__file__).resolve().parents[2]


def cell_command(framework: str, strategy: str, nproc: int, settings: list[str]) -> list[str]:
    """One cell of the sweep: `nproc` ranks (one for a one-process strategy) on this machine."""
    ranks = 1 if strategies.get(framework, strategy).processes == "one" else nproc
    side = programs.get(framework)
    train = side.train_command(side.own([*settings, f"{framework}.strategy={strategy}"]), "--quiet")
    return [*programs.local_launch(ranks), *train]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m common.tools.sizes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--sizes", default="0.1M,10M,100M,300M")
    parser.add_argument(
        "--strategies",
        default="single,ddp,fsdp1,fsdp2,mwms",
        help="strategies of any framework (common.core.config.strategies); each framework runs "
        "those it has",
    )
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
    listed = args.strategies.split(",")
    unknown = sorted(set(listed) - set(strategies.names()))
    if unknown:
        parser.error(f"--strategies: unknown {unknown}; choose from {','.join(strategies.names())}")
    matrix = [
        (size, framework, strategy)
        for size, framework in itertools.product(sizes, args.frameworks.split(","))
        for strategy in listed
        if strategy in strategies.of(framework)
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
