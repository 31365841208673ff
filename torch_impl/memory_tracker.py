"""One rank's tensors at a world size, followed by torch's own memory trackers
(`torch.distributed._tools`) over a fake process group, in this process, on the CPU: the
machinery of `torch_impl.memory_plan` (which plans every world size of a run) and
`torch_impl.memory_check` (which checks it against real ranks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as torch_dist
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
from torch.distributed._tools.mem_tracker import MemTracker
from torch.testing._internal.distributed.fake_pg import FakeStore

from common.core.config.config import Config
from common.core.config.strategies import ParallelDims, Strategy, get
from torch_impl.optim import build_optimizer, implementation
from torch_impl.parallel import build_parallel
from torch_impl.precision import Amp
from torch_impl.step import optimizer_step

CATEGORIES = ("params", "grads", "optimizer", "activations", "buffers")
# the trackers' own category names, by ours
KINDS = {
    "params": ("Parameter", "Sharded Param", "Unsharded Param", "Buffer"),
    "grads": ("Gradient", "Sharded Grad", "Unsharded Grad"),
    "optimizer": ("Optstate", "OptState"),
    "activations": ("Activation", "Temp", "Inputs", "Other"),
    "buffers": ("All Gather", "Reduce Scatter"),
}
STEPS = 2  # the optimizer's state exists from the first step on; the second is the steady one


def per_rank_batch(cfg: Config, world: int, scaling: str, run_world: int = 1) -> int:
    """The batch of one rank at `world` ranks. Strong scaling splits the run's global batch
    (ValueError when a rank would get less than one sample); weak keeps the per-rank batch the
    run had at `run_world` ranks. train.batch_mode=per_rank is weak scaling by definition."""
    per_rank_at_run = cfg.train.per_rank_batch_size(run_world)
    if scaling == "weak" or cfg.train.batch_mode == "per_rank":
        return per_rank_at_run
    global_batch = cfg.train.global_batch_size(run_world)
    if global_batch < world:
        raise ValueError(
            f"a global batch of {global_batch} leaves no sample for a rank at {world} ranks; "
            "project with --scaling weak, or to fewer ranks"
        )
    return global_batch // world


def untracked(cfg: Config) -> str | None:
    """Why no tracker follows `cfg`'s step, or None: fsdp1's flat parameters, gradient
    accumulation, and activation checkpointing on a replica."""
    parameters = get("torch", cfg.torch.strategy).parameters
    if cfg.train.accumulation_steps > 1 and parameters == "dtensor":
        return (
            f"train.accumulation_steps={cfg.train.accumulation_steps} is tracked for the "
            "replica only: fully_shard's tracker read a real fsdp2 rank 5% low with the "
            "gradient sync off (the unsharded gradients it keeps between micro-batches)"
        )
    if cfg.model.activation_checkpointing != "none" and parameters == "plain":
        return (
            f"model.activation_checkpointing={cfg.model.activation_checkpointing} is tracked "
            "for fully_shard only: MemTracker read a real ddp rank's ResNet-8 21.8% low with it "
            "(fully_shard's tracker agreed to 0.1%); plan it with torch.strategy=fsdp2"
        )
    if parameters == "flat":
        return (
            "fsdp1 is not tracked: torch's memory trackers follow fully_shard and plain modules, "
            "not FSDP1's flat parameters; fsdp2 with the same sharding shards the same units"
        )
    return None


def tracked(cfg: Config, world: int, batch: int, local_world: int | None = None) -> dict[str, int]:
    """Rank 0's tensor bytes by category at the peak of STEPS optimizer steps at `world` ranks,
    and 'peak', their sum there. `local_world`: ranks per node (hsdp's shard group by default).
    ValueError where no tracker follows the step (`untracked`)."""
    strategy = get("torch", cfg.torch.strategy)
    reason = untracked(cfg)
    if reason:
        raise ValueError(reason)
    if strategy.name == "ddp":
        # The replica, stepped alone (the fake group cannot run DDP's all-reduce hook), plus
        # DDP's gradient buckets: a second copy of the gradients (gradient_as_bucket_view is
        # off, torch's default and this suite's)
        alone = cfg.model_copy(
            update={"torch": cfg.torch.model_copy(update={"strategy": "single"})}
        )
        sizes = tracked(alone, 1, batch)
        return {**sizes, "buffers": sizes["grads"], "peak": sizes["peak"] + sizes["grads"]}
    dims: ParallelDims = strategy.dims(world, local_world or world, cfg)
    torch_dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        found = _peak(cfg, strategy, dims, batch)
    finally:
        torch_dist.destroy_process_group()
    by_name = {str(getattr(kind, "value", kind)): int(size) for kind, size in found.items()}
    sizes = {
        category: sum(by_name.get(name, 0) for name in names) for category, names in KINDS.items()
    }
    return {**sizes, "peak": by_name.get("Total", sum(sizes.values()))}


@dataclass
class Stepper:
    """The run's model, optimizer and precision on a rank, and a random batch to step on."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    amp: Amp
    images: torch.Tensor
    labels: torch.Tensor
    lr: float
    dp_size: int
    micro_batches: int = 1  # train.accumulation_steps

    def step(self, between_parts: Callable[[], None] | None = None) -> None:
        optimizer_step(
            self.model,
            self.optimizer,
            self.amp,
            self.images,
            self.labels,
            self.lr,
            self.dp_size,
            self.micro_batches,
            between_parts,
        )


def stepper(
    cfg: Config, strategy: Strategy, dims: ParallelDims, batch: int, device: torch.device, rank: int
) -> Stepper:
    """Build as the training program does (`build_parallel`), on a random batch of `batch`."""
    torch.manual_seed(0)
    model = build_parallel(cfg, device, dims)
    impl = implementation(
        cfg.optim.name,
        cfg.torch.optimizer_impl,
        loss_scaling=cfg.torch.mixed_precision == "fp16",
        strategy=strategy,
    )
    optimizer = build_optimizer(cfg.optim, model.parameters(), impl)
    net = cfg.net()
    images = torch.randn(batch, *net.inputs, device=device)
    labels = torch.randint(0, net.classes, (batch,), device=device)
    amp = Amp(cfg, strategy, device)
    micro = cfg.train.accumulation_steps
    return Stepper(model, optimizer, amp, images, labels, cfg.optim.lr, dims.dp_size, micro)


def _peak(cfg: Config, strategy: Strategy, dims: ParallelDims, batch: int) -> dict[Any, int]:
    """The tracker's peak snapshot of STEPS optimizer steps on a random batch of `batch`."""
    ready = stepper(cfg, strategy, dims, batch, torch.device("cpu"), rank=0)
    model, optimizer, images = ready.model, ready.optimizer, ready.images
    sharded = strategy.parameters == "dtensor"
    tracker: Any = FSDPMemTracker(model, optimizer) if sharded else MemTracker()
    if sharded:
        tracker.track_inputs((images,))
    else:
        tracker.track_external(model, optimizer, images)
    with tracker:
        for _ in range(STEPS):
            # MemTracker takes a second forward of the root for a new iteration: each
            # micro-batch is one for it (the peak it holds stays)
            ready.step(None if sharded else tracker.reset_mod_stats)
            if not sharded:  # MemTracker follows one iteration at a time (its peak stays)
                tracker.reset_mod_stats()
    (found,) = tracker.get_tracker_snapshot("peak").values()
    return dict(found)
