"""Train an MNIST model with PyTorch: single, DDP, FSDP2 or FSDP1, on CPU (gloo) or GPU (NCCL).

    python -m torch_impl.train --config configs/mlp_adam.yaml [--set torch.strategy=fsdp2 ...]

Start it with torchrun, srun or `python -m common.launch --nproc N --`: the same program.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from common import config_io, metrics, run
from common.config import Config
from common.optim import learning_rate
from torch_impl import checkpoint, dist, memory
from torch_impl.data import TorchData, build_dataset
from torch_impl.model import build_model
from torch_impl.optim import build_optimizer, set_learning_rate
from torch_impl.parallel import parallelize

TRAIN_CLOCK = (
    "the epoch's training steps: batch fetch, forward, backward, gradient sync, optimizer step; "
    "device synchronized at both ends; excludes evaluation, checkpoints and metrics; "
    "epoch 1 includes warm-up"
)
PRECISION = {"none": "fp32", "bf16": "bf16", "fp16": "fp16"}


def train_step(model, optimizer, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """One optimizer step on this rank's batch. The loss is the mean over the rank's batch; DDP
    and FSDP average gradients over the ranks, so the step follows the global-batch mean."""
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(images).float(), labels)
    loss.backward()
    optimizer.step()
    return loss.detach()


@torch.no_grad()
def evaluate(model, data: TorchData, info: dist.DistInfo) -> tuple[float, float]:
    """(mean loss, accuracy) over the whole test set, summed over the ranks."""
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=info.device)
    for images, labels, weights in data.eval_batches():
        logits = model(images).float()
        losses = F.cross_entropy(logits, labels, reduction="none")
        totals[0] += (losses * weights).sum()
        totals[1] += ((logits.argmax(dim=1) == labels).float() * weights).sum()
        totals[2] += weights.sum()
    dist.all_reduce_sum(totals, info)
    model.train()
    return (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()


def train_epoch(cfg: Config, epoch: int, model, optimizer, data, info, writer) -> dict:
    """Train one epoch; return its global mean loss, clock readings and step times."""
    steps = data.steps_per_epoch
    loss_sum = torch.zeros(1, dtype=torch.float64, device=info.device)
    step_times = []
    paused = 0.0  # time spent on step records: metrics, not training
    dist.barrier(info)
    dist.synchronize(info.device)
    start = last = time.perf_counter()
    for step, (images, labels) in enumerate(data.train_batches(epoch)):
        lr = learning_rate(cfg.optim, epoch, step, steps, cfg.train.epochs)
        set_learning_rate(optimizer, lr)
        loss = train_step(model, optimizer, images, labels)
        loss_sum += loss
        dist.synchronize(info.device)
        now = time.perf_counter()
        step_times.append(now - last)
        global_step = epoch * steps + step + 1
        if cfg.train.log_every_steps and global_step % cfg.train.log_every_steps == 0:
            step_loss = dist.all_reduce_sum(loss.double().reshape(1), info) / info.world_size
            if writer:
                record = {"record": "step", "epoch": epoch + 1, "step": global_step,
                          "loss": step_loss.item(), "lr": lr}  # fmt: skip
                writer.write(record)
            paused += time.perf_counter() - now
        last = time.perf_counter()
    train_time = time.perf_counter() - start - paused
    dist.all_reduce_sum(loss_sum, info)
    return {"loss": loss_sum.item() / (steps * info.world_size), "time": train_time,
            "step_times": step_times, "lr": lr, "steps": steps}  # fmt: skip


def run_training(cfg: Config, info: dist.DistInfo, run_dir: Path, args, state: dict) -> None:
    data = build_dataset(cfg, info)
    torch.manual_seed(cfg.train.seed * 1_000_003 + info.rank)  # dropout masks, per rank
    model = parallelize(build_model(cfg.model, cfg.train.seed), cfg, info.device)
    optimizer = build_optimizer(cfg.optim, model.parameters())
    start_epoch, elapsed_before = 0, 0.0
    latest = checkpoint.latest_checkpoint(run_dir)
    if args.resume and latest is None:
        raise RuntimeError(f"--resume: no complete checkpoint under {run_dir}/checkpoints")
    if latest is not None and (args.resume or args.auto_resume):
        extras = checkpoint.load_checkpoint(latest, model, optimizer, info)
        start_epoch, elapsed_before = extras["epoch"], extras["elapsed_s"]
        state["epochs"] = extras["epoch_records"]
    writer = state.get("writer")
    loop_start = time.perf_counter()
    for epoch in range(start_epoch, cfg.train.epochs):
        memory.reset_peak(info.device)
        trained = train_epoch(cfg, epoch, model, optimizer, data, info, writer)
        dist.synchronize(info.device)
        eval_start = time.perf_counter()
        val_loss, val_accuracy = evaluate(model, data, info)
        eval_time = time.perf_counter() - eval_start
        entry = memory.memory_entry(info.rank, info.device, model, optimizer)
        record = run.epoch_record(
            epoch + 1, trained, (val_loss, val_accuracy, eval_time), data.plan.global_batch,
            TRAIN_CLOCK, elapsed_before + time.perf_counter() - loop_start,
            dist.all_gather_objects(entry, info),
        )  # fmt: skip
        state["epochs"].append(record)
        if writer:
            writer.write(record)
            print(metrics.console_line(record), flush=True)
        every = cfg.train.checkpoint_every_epochs
        preempted = (
            dist.all_reduce_sum(
                torch.tensor([float(run.preemption_requested())], device=info.device), info
            ).item()
            > 0
        )
        stopping = args.stop_after_epoch == epoch + 1 or preempted
        if (every and (epoch + 1) % every == 0) or stopping:
            extras = {"elapsed_s": record["elapsed_s"], "epoch_records": state["epochs"]}
            checkpoint.save_checkpoint(run_dir, epoch + 1, model, optimizer, info, extras)
        if preempted and epoch + 1 < cfg.train.epochs:
            raise run.Preempted(f"preempted (SIGUSR1): checkpointed epoch {epoch + 1}; resume")
        if stopping and epoch + 1 < cfg.train.epochs:
            raise run.Aborted(f"stopped after epoch {epoch + 1} (--stop-after-epoch); --resume")
    if cfg.output.save_model:
        checkpoint.export_model(model, run_dir, info)


def versions() -> dict[str, str]:
    found = {"torch": torch.__version__}
    if torch.cuda.is_available():
        found["cuda"] = str(torch.version.cuda)
        found["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version())
    return found


def start_run(cfg: Config, info: dist.DistInfo) -> tuple[Path, metrics.MetricsWriter | None]:
    name = dist.broadcast_object(run.run_name(cfg, "torch", cfg.torch.strategy, info.spec), info)
    run_dir = run.prepare_run_dir(cfg, name, info.is_chief)
    kind = torch.cuda.get_device_name(info.device) if info.device.type == "cuda" else "cpu"
    devices = dist.all_gather_objects(f"{info.spec.node}:{info.device}:{kind}", info)
    if not info.is_chief:
        return run_dir, None
    writer = metrics.MetricsWriter(run_dir / metrics.METRICS_FILENAME)
    record = run.run_start_record(
        cfg, info.spec, run_id=name, framework="torch", framework_version=torch.__version__,
        strategy=cfg.torch.strategy, device_type="gpu" if info.device.type == "cuda" else "cpu",
        devices=devices, versions=versions(), precision=PRECISION[cfg.torch.mixed_precision],
    )  # fmt: skip
    writer.write(record)
    print(metrics.console_line(record), flush=True)
    return run_dir, writer


def main(argv: list[str] | None = None) -> int:
    args = run.parse_train_args("python -m torch_impl.train", __doc__, argv)
    try:
        cfg = config_io.config_from_args(args)
        info = dist.setup_distributed(cfg)
    except ValueError as error:  # bad config or launch variables: nothing has started
        print(f"error: {error}", file=sys.stderr)
        return 2
    except RuntimeError as error:  # the rendezvous did not complete in time
        print(f"error: {error}", file=sys.stderr)
        return 1
    status, code = run.execute(
        cfg, args, start=lambda: start_run(cfg, info),
        train=lambda run_dir, state: run_training(cfg, info, run_dir, args, state),
        describe_failure=lambda failure: f"rank {info.rank}: {type(failure).__name__}: {failure}",
    )  # fmt: skip
    if status != "success":  # peers may be gone: leave without a collective teardown
        os._exit(code)
    dist.teardown(info)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
