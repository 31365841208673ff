"""Train an MNIST model with PyTorch, by any strategy of its registry (listed below), on the CPU
(gloo) or GPUs (NCCL).

    python -m torch_impl.train --config configs/mlp_adam.yaml [--set torch.strategy=fsdp2 ...]

Start it with torchrun, srun or `python -m common.launch --nproc N --`: the same program.
"""

from __future__ import annotations

from common.core.run import stop_signals

if __name__ == "__main__":  # --help, and a refusal, in a second: before the framework's import
    stop_signals.defer_preemption()  # a SIGUSR1 from now on waits for the run's handler
    from common.core.config import cli  # after the signal is held: 0.4 s of pydantic on a slow CPU

    cli.answer_help_early("python -m torch_impl.train", __doc__)
    from common.core.train.main import refuse_early  # after the signal is held

    refuse_early("python -m torch_impl.train", __doc__)

import contextlib
import functools
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from common.core.config.config import Config
from common.core.config.expected_traffic import Unit
from common.core.measure import precision, replicas
from common.core.measure.clocks import HostStepClock
from common.core.measure.traffic import Call
from common.core.records.entries import StepSplit
from common.core.run import failures
from common.core.train import main as main_body
from common.core.train.trainer import TrainerBase
from common.launch.cluster import ClusterSpec
from common.models import weights as model_weights
from torch_impl import checkpoint, dist, faults, gemm, memory, traffic
from torch_impl.data import TorchData, build_dataset
from torch_impl.optim import build_optimizer, implementation
from torch_impl.parallel import (
    build_parallel,
    check_options,
    gathered_once,
    resolve_strategy,
    wrap_units,
)
from torch_impl.precision import Amp, apply_tf32, determinism_settings
from torch_impl.step import optimizer_step

TRAIN_CLOCK = (
    "the epoch's training steps: batch fetch, forward, backward, gradient sync, optimizer step; "
    "device synchronized at both ends; excludes evaluation, checkpoints and metrics; "
    "epoch 1 includes warm-up"
)


class CudaEventStepClock:
    """CUDA events recorded on the stream where each step begins and ends, read once at the
    end of the epoch: no host wait per step (torch.cuda.Event(enable_timing=True),
    Event.elapsed_time in milliseconds, valid once both events completed)."""

    description = "step times: CUDA events around each step, read at the end of the epoch"

    def __init__(self) -> None:
        self.events: list[tuple[torch.cuda.Event, torch.cuda.Event, int]] = []
        self.start = torch.cuda.Event(enable_timing=True)

    def step_started(self) -> None:
        self.start = torch.cuda.Event(enable_timing=True)
        self.start.record()

    def step_done(self, steps: int = 1) -> None:
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self.events.append((self.start, end, steps))

    def step_times(self, epoch_time_s: float) -> list[float]:
        torch.cuda.synchronize()
        return [
            start.elapsed_time(end) / 1000 / steps
            for start, end, steps in self.events
            for _ in range(steps)
        ]


# What casts the compute, by the strategy's registry entry (precision_by, parameters).
HOW = {
    ("autocast", "plain"): "torch.autocast",
    ("wrapper", "dtensor"): "fully_shard MixedPrecisionPolicy",
    ("wrapper", "flat"): "FSDP MixedPrecision",
}


T = TypeVar("T")


@torch.no_grad()
def evaluate(
    model, data: TorchData, info: dist.DistInfo, amp: Amp, sharding: str = "full_shard"
) -> tuple[float, float]:
    """(mean loss, accuracy) over the whole test set, summed over the ranks."""
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=info.device)
    with gathered_once(model, sharding):
        for images, labels, weights in data.eval_batches():
            with amp.forward_context():
                logits = model(images).float()
            losses = F.cross_entropy(logits, labels, reduction="none")
            totals[0] += (losses * weights).sum()
            totals[1] += ((logits.argmax(dim=1) == labels).float() * weights).sum()
            totals[2] += weights.sum()
    summed = dist.all_reduce_sum(totals.cpu().numpy(), info)
    model.train()
    return float(summed[0] / summed[2]), float(summed[1] / summed[2])


class TorchTrainer(TrainerBase):
    """torch_impl's side of `common.core.train.trainer.Trainer`: what only torch knows, nothing
    else."""

    framework = "torch"
    framework_version = str(torch.__version__)
    dist, memory, checkpoint, gemm = dist, memory, checkpoint, gemm  # for TrainerBase
    data: TorchData

    def __init__(self, cfg: Config, info: dist.DistInfo):
        super().__init__(cfg, info)
        self.precision = precision.LOW[cfg.torch.mixed_precision]
        self.amp = faults.amp_for(cfg, self.strategy, info.device, info.rank)
        self.on_cuda = info.device.type == "cuda"
        self.counted_split: StepSplit | None = None
        clock = CudaEventStepClock if self.on_cuda else HostStepClock
        self.train_clock = f"{TRAIN_CLOCK}; {clock.description}"
        self.tf32 = apply_tf32(cfg.dist.tf32)
        self.optimizer_impl = implementation(
            cfg.optim.name,
            cfg.torch.optimizer_impl,
            loss_scaling=cfg.torch.mixed_precision == "fp16",
            strategy=self.strategy,
        )

    def numerics(self) -> dict:
        return {
            **self.shared_numerics(loss_scaling=self.amp.scaler is not None),
            "tf32_settings": self.tf32,
            "deterministic_settings": determinism_settings(),
            "how": HOW[(self.strategy.precision_by, self.strategy.parameters)],
            "optimizer_impl": self.optimizer_impl,
        }

    def build(self) -> None:
        cfg, info = self.cfg, self.info
        self.data = build_dataset(cfg, info, self.dims)
        self.take_memory_baseline()
        torch.manual_seed(cfg.train.seed * 1_000_003 + info.rank)  # dropout masks, per rank
        self.model = build_parallel(cfg, info.device, self.dims)
        self.optimizer = build_optimizer(cfg.optim, self.model.parameters(), self.optimizer_impl)
        self.amp.watch(self.optimizer)

    def step_clock(self):
        # on the CPU a step has run when train_step returns: nothing to wait for
        return CudaEventStepClock() if self.on_cuda else HostStepClock()

    def train_step(self, batch, lr: float) -> torch.Tensor:
        images, labels = batch
        return optimizer_step(
            self.model,
            self.optimizer,
            self.amp,
            images,
            labels,
            lr,
            self.dims.dp_size,
            self.cfg.train.accumulation_steps,
        )

    def evaluate(self) -> tuple[float, float]:
        return evaluate(self.model, self.data, self.info, self.amp, self.cfg.torch.sharding)

    def count_calls(self, work: Callable[[], T]) -> tuple[T, list[Call]]:
        dims = self.dims  # an all-reduce spans the replicas (hsdp), else every rank
        group = dims.replicate if dims.replicate > 1 else self.info.world_size
        result, calls, split = traffic.counted(work, group)
        self.counted_split = None if self.on_cuda else split  # the GPU's kernels run apart
        return result, calls

    def step_split(self) -> StepSplit | None:
        return self.counted_split

    @contextlib.contextmanager
    def tracing(self, folder: Path) -> Iterator[None]:
        """torch's profiler (the CPU, and the GPU's kernels on one) over what runs inside; a
        Chrome trace of this rank written into `folder` at the end."""
        traffic.quiet_profiler()
        activities = [ProfilerActivity.CPU]
        if self.on_cuda:
            activities.append(ProfilerActivity.CUDA)
        with profile(activities=activities, record_shapes=True) as profiler:
            yield
        profiler.export_chrome_trace(str(folder / f"torch-rank-{self.info.rank}.json"))

    def traffic_units(self) -> list[Unit]:
        if not self.strategy.shards:
            return super().traffic_units()
        cfg, shapes = self.cfg, model_weights.parameter_shapes(self.cfg.net())
        wrapped = wrap_units(cfg.net(), cfg.torch.wrap, cfg.torch.auto_wrap_min_params)
        rest = [shape for name, held in shapes.items() if name not in wrapped for shape in held]
        units = [Unit(tuple(shapes[name])) for name in wrapped]
        return [*units, Unit(tuple(rest), root=True)]

    def loss_scaling(self) -> tuple[float, int] | None:
        return self.amp.loss_scaling()

    def replica_digest(self) -> float | None:
        if self.strategy.shards:  # each rank holds its own shard
            return None
        held = itertools.chain(self.model.parameters(), self.model.buffers())
        with torch.no_grad():  # integer sums of the bit patterns: exact, in any order
            total = sum(
                int(t.detach().float().view(torch.int32).sum(dtype=torch.int64))
                for t in held
                if t.is_floating_point()
            )
        return float(total % replicas.DIGEST_MODULUS)

    def save_checkpoint(self, folder: Path) -> None:
        super().save_checkpoint(folder)
        self.amp.save(folder, self.info.rank)

    def load_checkpoint(self, folder: Path) -> None:
        super().load_checkpoint(folder)
        self.amp.load(folder, self.info.rank)

    def lost_peer(self, failure: BaseException) -> str | None:
        if isinstance(failure, torch.distributed.DistError):  # NCCL or gloo, raised in Python
            return "a collective failed"
        # gloo raises RuntimeError, from work.wait() or from DDP's hooks inside backward
        root, where = failures.root_cause(failure)
        said = str(root)
        if isinstance(root, RuntimeError) and (
            "gloo" in said or "NCCL" in said or f"torch{os.sep}distributed{os.sep}" in where
        ):
            return "a collective failed"
        return None


def prepare(cfg: Config, spec: ClusterSpec) -> Config:
    """torch.strategy resolved, and options that do not combine refused, before any process
    group exists."""
    cfg = resolve_strategy(cfg, spec.world_size)
    on_gpu = dist.pick_device(cfg, spec).type == "cuda"
    check_options(cfg, spec, cuda=on_gpu)
    return cfg


SIDE = main_body.Side(
    framework="torch",
    prepare=prepare,
    setup=dist.setup_distributed,
    trainer=TorchTrainer,
    startup_errors=(RuntimeError,),  # the rendezvous did not complete in time
)


# The program: `main(argv)` is the shared body with this side's parts (no frame of its own,
# so that a reader reaches train_step in 5 frames: main, loop.execute, train_epochs,
# train_epoch, train_step).
main = functools.partial(main_body.main, SIDE, "python -m torch_impl.train", __doc__)


if __name__ == "__main__":
    main()
