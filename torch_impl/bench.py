"""Training throughput of every torch strategy and TF's MultiWorkerMirroredStrategy, for both
pipelines, beside plain-loop baselines, in one run.

    python -m torch_impl.bench [--models mlp,cnn] [--frameworks torch,tf] [--nproc 2]

Baselines, second pass timed: torch `plain`, a hand-written loop over the same preloaded
tensors (no wrapper, no metrics), and `seed-style`, the tutorials' loop (a DataLoader with a
per-sample transform and shuffle, batch 64), both in this process; TF `plain`, the same bare
loop in Keras (`python -m tf_impl.bench`, its own process, so torch and TF never share one).
Strategies run as real launches (`common.launch`) for two epochs; their samples/s is the second
epoch's (the first includes warm-up and tracing). Prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from common import config_io, data, metrics
from common.cluster import threads_per_rank
from torch_impl.data import MnistImages
from torch_impl.model import build_model
from torch_impl.optim import build_optimizer

BATCH = 64


def _optimizer(model_name: str, parameters):
    return build_optimizer(config_io.load_config(None, ["optim.name=adam"]).optim, parameters)


def plain_loop(model_name: str, images: torch.Tensor, labels: torch.Tensor) -> float:
    """samples/s of a bare loop over preloaded tensors (the fastest honest baseline)."""
    cfg = config_io.load_config(None, [f"model.name={model_name}"])
    model = build_model(cfg.model, seed=0)
    optimizer = _optimizer(model_name, model.parameters())
    steps = len(labels) // BATCH
    for _ in range(2):  # the second pass is timed, as the launched runs time their epoch 2
        order = torch.randperm(len(labels))
        start = time.perf_counter()
        for step in range(steps):
            index = order[step * BATCH : (step + 1) * BATCH]
            optimizer.zero_grad()
            F.cross_entropy(model(images[index]), labels[index]).backward()
            optimizer.step()
        seconds = time.perf_counter() - start
    return steps * BATCH / seconds


def seed_style_loop(model_name: str, mnist: data.Mnist, limit: int) -> float:
    """samples/s of the tutorials' loop: per-sample transform in a DataLoader, shuffle=True."""
    cfg = config_io.load_config(None, [f"model.name={model_name}"])
    model = build_model(cfg.model, seed=0)
    optimizer = _optimizer(model_name, model.parameters())
    dataset = MnistImages(mnist.train_images[:limit], mnist.train_labels[:limit])
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=1, drop_last=True)
    for _ in range(2):  # the second epoch is timed; it still starts its loader worker
        start = time.perf_counter()
        seen = 0
        for images, labels in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(images), labels).backward()
            optimizer.step()
            seen += len(labels)
        seconds = time.perf_counter() - start
    return seen / seconds


def tf_plain_loop(model_name: str, limit: int, repeats: int) -> float:
    """samples/s of the bare Keras loop, measured in its own process."""
    command = [sys.executable, "-m", "tf_impl.bench", "--model", model_name,
               "--train-limit", str(limit), "--repeats", str(repeats)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"tf plain loop failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["samples_per_s"]


def launched(model_name: str, strategy: str, pipeline: str, nproc: int, limit: int) -> float:
    """samples/s of epoch 2 of a real launch of torch_impl.train, or of tf_impl.train when
    `strategy` is "mwms"."""
    module = "tf_impl.train" if strategy == "mwms" else "torch_impl.train"
    with tempfile.TemporaryDirectory() as out:
        overrides = [f"model.name={model_name}", "optim.name=adam", f"data.pipeline={pipeline}",
                     f"data.train_limit={limit}", "train.epochs=2",
                     f"train.batch_size={BATCH}", "train.batch_mode=global",
                     f"output.dir={out}", "output.run_name=bench"]  # fmt: skip
        if strategy != "mwms":
            overrides.append(f"torch.strategy={strategy}")
        command = [sys.executable, "-m", module]
        for override in overrides:
            command += ["--set", override]
        if strategy != "single":
            command = [sys.executable, "-m", "common.launch", "--nproc", str(nproc), "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"{strategy}/{pipeline} failed:\n{done.stdout[-2000:]}")
        records = metrics.read_metrics(Path(out) / "bench" / metrics.METRICS_FILENAME)
        return [r for r in records if r["record"] == "epoch"][-1]["samples_per_s"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_impl.bench", description=__doc__)
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--strategies", default="single,ddp,fsdp2,fsdp1",
                        help="torch strategies")  # fmt: skip
    parser.add_argument("--frameworks", default="torch,tf")
    parser.add_argument("--pipelines", default="tensor,loader")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--train-limit", type=int, default=6400, help="training samples used")
    parser.add_argument("--repeats", type=int, default=3, help="baseline repeats (median)")
    args = parser.parse_args(argv)
    mnist = data.load_mnist()
    limit = args.train_limit
    images = torch.from_numpy(data.normalize(mnist.train_images[:limit])).unsqueeze(1)
    labels = torch.from_numpy(mnist.train_labels[:limit])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads in this process, "
          f"{limit} samples, batch {BATCH} (global), {args.nproc} ranks for ddp/fsdp")  # fmt: skip
    rows = []
    for model_name in args.models.split(","):
        torch.set_num_threads(threads_per_rank(1))
        plain = statistics.median(plain_loop(model_name, images, labels)
                                  for _ in range(args.repeats))  # fmt: skip
        seed = statistics.median(seed_style_loop(model_name, mnist, limit)
                                 for _ in range(args.repeats))  # fmt: skip
        rows += [(model_name, "plain loop", 1, plain), (model_name, "seed-style loop", 1, seed)]
        strategies = args.strategies.split(",") if "torch" in args.frameworks else []
        if "tf" in args.frameworks:
            speed = tf_plain_loop(model_name, limit, args.repeats)
            rows.append((model_name, "tf plain Keras loop", 1, speed))
            strategies.append("mwms")
        for strategy in strategies:
            for pipeline in args.pipelines.split(","):
                ranks = 1 if strategy == "single" else args.nproc
                speed = launched(model_name, strategy, pipeline, args.nproc, limit)
                label = f"{'tf ' if strategy == 'mwms' else ''}{strategy} / {pipeline}"
                rows.append((model_name, label, ranks, speed))
                print(f"  {model_name} {strategy}/{pipeline}: {speed:,.0f} samples/s", flush=True)
        print(flush=True)
    print(f"{'model':<6} {'variant':<22} {'ranks':>5} {'samples/s':>10} {'vs plain':>8}")
    print("(vs plain: against the torch plain loop)")
    plain_of = {model: speed for model, variant, _, speed in rows if variant == "plain loop"}
    for model_name, variant, ranks, speed in rows:
        ratio = speed / plain_of[model_name]
        print(f"{model_name:<6} {variant:<22} {ranks:>5} {speed:>10,.0f} {ratio:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
