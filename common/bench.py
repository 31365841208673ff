"""Training throughput of every torch strategy and TensorFlow's MultiWorkerMirroredStrategy, for
both pipelines, beside each framework's plain-loop baselines, in one run.

    python -m common.bench [--models mlp,cnn] [--frameworks torch,tf] [--nproc 2]

Nothing here imports a framework. Each framework's baselines run in a process of their own
(`python -m torch_impl.bench`, `python -m tf_impl.bench`), which prints one JSON line:
{"model": ..., "samples_per_s": {baseline name: samples/s}}. Strategies run as real launches
(`common.launch`) for two epochs; their samples/s is the second epoch's (the first includes
warm-up and tracing). Prints a table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from common import metrics

BATCH = 64
TIMEOUT_S = 1800
TRAIN_MODULE = {"torch": "torch_impl.train", "tf": "tf_impl.train"}


def baselines(framework: str, model_name: str, limit: int, repeats: int) -> dict[str, float]:
    """{baseline name: samples/s} from `python -m <framework>_impl.bench`."""
    command = [
        sys.executable,
        "-m",
        f"{framework}_impl.bench",
        "--model",
        model_name,
        "--train-limit",
        str(limit),
        "--repeats",
        str(repeats),
        "--batch",
        str(BATCH),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{framework} baselines failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["samples_per_s"]


def launched(
    framework: str, strategy: str, *, model_name: str, pipeline: str, nproc: int, limit: int
) -> float:
    """samples/s of epoch 2 of a real launch of the framework's training program."""
    with tempfile.TemporaryDirectory() as out:
        overrides = [
            f"model.name={model_name}",
            "optim.name=adam",
            f"data.pipeline={pipeline}",
            f"data.train_limit={limit}",
            "train.epochs=2",
            f"train.batch_size={BATCH}",
            "train.batch_mode=global",
            f"output.dir={out}",
            "output.run_name=bench",
        ]
        if framework == "torch":
            overrides.append(f"torch.strategy={strategy}")
        command = [sys.executable, "-m", TRAIN_MODULE[framework]]
        for override in overrides:
            command += ["--set", override]
        if nproc > 1:
            command = [sys.executable, "-m", "common.launch", "--nproc", str(nproc), "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"{framework} {strategy}/{pipeline} failed:\n{done.stdout[-2000:]}")
        records = metrics.read_metrics(Path(out) / "bench" / metrics.METRICS_FILENAME)
        return [r for r in records if r["record"] == "epoch"][-1]["samples_per_s"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m common.bench", description=__doc__)
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--frameworks", default="torch,tf")
    parser.add_argument("--strategies", default="single,ddp,fsdp2,fsdp1", help="torch strategies")
    parser.add_argument("--pipelines", default="tensor,loader")
    parser.add_argument("--nproc", type=int, default=2, help="ranks of ddp, fsdp and TF runs")
    parser.add_argument("--train-limit", type=int, default=6400, help="training samples used")
    parser.add_argument("--repeats", type=int, default=3, help="baseline repeats (median)")
    args = parser.parse_args(argv)
    frameworks = args.frameworks.split(",")
    unknown = sorted(set(frameworks) - set(TRAIN_MODULE))
    if unknown:
        parser.error(f"--frameworks: unknown {unknown}; choose from torch,tf")
    print(
        f"{args.train_limit} samples, batch {BATCH} (global), {args.nproc} ranks for ddp/fsdp/tf",
        flush=True,
    )
    rows = []
    for model_name in args.models.split(","):
        for framework in frameworks:
            found = baselines(framework, model_name, args.train_limit, args.repeats)
            rows += [(model_name, f"{framework} {name}", 1, speed) for name, speed in found.items()]
            runs = args.strategies.split(",") if framework == "torch" else ["mwms"]
            for strategy in runs:
                for pipeline in args.pipelines.split(","):
                    ranks = 1 if strategy == "single" else args.nproc
                    speed = launched(
                        framework,
                        strategy,
                        model_name=model_name,
                        pipeline=pipeline,
                        nproc=ranks,
                        limit=args.train_limit,
                    )
                    label = f"{framework} {strategy} / {pipeline}"
                    rows.append((model_name, label, ranks, speed))
                    print(f"  {model_name} {label}: {speed:,.0f} samples/s", flush=True)
    print(f"\n{'model':<6} {'variant':<26} {'ranks':>5} {'samples/s':>10} {'vs plain':>8}")
    print("(vs plain: against the same framework's plain loop)")
    for model_name, variant, ranks, speed in rows:
        framework = variant.split()[0]
        plain = next(
            (s for m, v, _, s in rows if m == model_name and v == f"{framework} plain loop"), None
        )
        ratio = f"{speed / plain:8.2f}" if plain else f"{'-':>8}"
        print(f"{model_name:<6} {variant:<26} {ranks:>5} {speed:>10,.0f} {ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
