"""Synchronous against asynchronous checkpoints with torch's Distributed Checkpoint: the step
time of a DDP training loop that saves every N steps with `dcp.save`, with `dcp.async_save`
(the state staged in memory, written by a thread while training goes on; the next save waits
for the last), and without saving, interleaved in one launch.

    python -m common.launch --nproc 2 -- python -m torch_impl.checkpoint_bench \\
        [--hidden 2048,2048] [--steps 100] [--every 10] [--repeats 3]

Rank 0 prints the median seconds per step of each way and what a checkpoint adds per step.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from concurrent.futures import Future
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.nn.parallel import DistributedDataParallel

from common.core.config import config_io
from torch_impl.model import build_model
from torch_impl.optim import build_optimizer

WAYS = ("none", "sync", "async")


def train(model, optimizer, batch, way: str, steps: int, every: int, folder: Path, group) -> float:
    """Seconds per step of `steps` steps, saving every `every` the `way` way. An asynchronous
    save's collectives run on `group`, a process group of their own: on the training's group
    they would interleave with DDP's all-reduces (gloo stops on the mismatch)."""
    images, labels = batch
    pending = None
    dist.barrier()
    start = time.perf_counter()
    for step in range(1, steps + 1):
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()
        if way == "none" or step % every:
            continue
        model_state, optim_state = get_state_dict(model, optimizer)
        state, target = {"model": model_state, "optim": optim_state}, folder / f"{way}-{step}"
        if way == "sync":
            dcp.save(state, checkpoint_id=target)
            continue
        if pending is not None:
            pending.result()  # one save in flight at a time, as DCP's docs advise
        response = dcp.async_save(state, checkpoint_id=target, process_group=group)
        # a Future, or with an async stager a response whose upload future says when it is done
        pending = response if isinstance(response, Future) else response.upload_completion
    if pending is not None:
        pending.result()
    dist.barrier()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m torch_impl.checkpoint_bench")
    parser.add_argument("--hidden", default="2048,2048", help="the MLP's hidden widths")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    cfg = config_io.load_config(None, ["model.name=mlp", f"model.hidden=[{args.hidden}]"])
    model = DistributedDataParallel(build_model(cfg.net(), cfg.train.seed))
    optimizer = build_optimizer(cfg.optim, model.parameters())
    generator = torch.Generator().manual_seed(rank)
    batch = (torch.randn(32, 1, 28, 28, generator=generator), torch.randint(0, 10, (32,)))
    folder = Path(tempfile.gettempdir()) / f"checkpoint-bench-{os.environ.get('SUITE_RUN_ID', 'x')}"
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    group = dist.new_group(backend="gloo")
    train(model, optimizer, batch, "none", args.every, args.every, folder, group)  # warm-up
    try:
        for _ in range(args.repeats):
            for way in WAYS:
                taken = train(model, optimizer, batch, way, args.steps, args.every, folder, group)
                seconds[way].append(taken)
                dist.barrier()
                if rank == 0:
                    shutil.rmtree(folder, ignore_errors=True)
    finally:  # a stopped bench leaves no checkpoints of 100s of MB behind
        if rank == 0:
            shutil.rmtree(folder, ignore_errors=True)
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(
            f"MLP {args.hidden} ({params / 1e6:.1f}M parameters, Adam), {dist.get_world_size()} "
            f"ranks, gloo, a checkpoint every {args.every} steps, {args.repeats} repeats"
        )
        plain = statistics.median(seconds["none"])
        for way in WAYS:
            median = statistics.median(seconds[way])
            added = (median - plain) * args.every
            print(
                f"{way:6} {median * 1e3:8.2f} ms/step   +{added * 1e3:7.1f} ms per checkpoint   "
                f"({', '.join(f'{s * 1e3:.2f}' for s in seconds[way])})"
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
