"""Train an MNIST model with PyTorch: single, DDP, FSDP2 or FSDP1, on CPU (gloo) or GPU (NCCL).

    python -m torch_impl.train --config configs/mlp_adam.yaml [--set torch.strategy=fsdp2 ...]

Start it with torchrun, srun or `python -m common.launch --nproc N --`: the same program.
"""

from __future__ import annotations

from common import run

if __name__ == "__main__":  # --help in a second, before the framework is imported
    run.answer_help_early("python -m torch_impl.train", __doc__)

import os
import sys

import torch
import torch.nn.functional as F

from common import cluster, config_io, loop
from common.config import Config
from common.trainer import TrainerBase
from torch_impl import checkpoint, dist, memory
from torch_impl.data import TorchData, build_dataset
from torch_impl.model import build_model
from torch_impl.optim import build_optimizer, set_learning_rate
from torch_impl.parallel import check_options, parallelize, resolve_strategy

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
    totals = dist.all_reduce_sum(totals.cpu().numpy(), info)
    model.train()
    return float(totals[0] / totals[2]), float(totals[1] / totals[2])


class TorchTrainer(TrainerBase):
    """torch_impl's side of `common.trainer.Trainer`: what only torch knows, nothing else."""

    framework = "torch"
    framework_version = torch.__version__
    train_clock = TRAIN_CLOCK
    dist, memory, checkpoint = dist, memory, checkpoint  # this side's modules, for TrainerBase

    def __init__(self, cfg: Config, info: dist.DistInfo):
        super().__init__(cfg, info)
        self.strategy = cfg.torch.strategy
        self.precision = PRECISION[cfg.torch.mixed_precision]

    def versions(self) -> dict[str, str]:
        found = {"torch": torch.__version__}
        if self.info.device.type == "cuda":
            found["cuda"] = str(torch.version.cuda)
            found["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version())
        return found

    def build(self) -> None:
        cfg, info = self.cfg, self.info
        self.data = build_dataset(cfg, info)
        torch.manual_seed(cfg.train.seed * 1_000_003 + info.rank)  # dropout masks, per rank
        self.model = parallelize(build_model(cfg.model, cfg.train.seed), cfg, info.device)
        self.optimizer = build_optimizer(cfg.optim, self.model.parameters())

    def train_step(self, batch, lr: float) -> torch.Tensor:
        set_learning_rate(self.optimizer, lr)
        images, labels = batch
        # The rank's mean over its batch; the ranks' shares of the global mean add up to it.
        return train_step(self.model, self.optimizer, images, labels) / self.info.world_size

    def evaluate(self) -> tuple[float, float]:
        return evaluate(self.model, self.data, self.info)

    def describe_failure(self, failure: Exception) -> str:
        return f"rank {self.info.rank}: {type(failure).__name__}: {failure}"


def main(argv: list[str] | None = None) -> int:
    args, options = run.parse_train_args("python -m torch_impl.train", __doc__, argv)
    try:
        spec = cluster.from_environment()
        cfg = resolve_strategy(config_io.config_from_args(args), spec.world_size)
        run.check_launch(cfg, spec.world_size)
        on_gpu = dist.pick_device(cfg, spec).type == "cuda"
        check_options(cfg, spec.world_size, cuda=on_gpu)  # before any process group
        info = dist.setup_distributed(cfg, spec)
    except ValueError as error:  # bad config or launch variables: nothing has started
        print(f"error: {error}", file=sys.stderr)
        return 2
    except RuntimeError as error:  # the rendezvous did not complete in time
        print(f"error: {error}", file=sys.stderr)
        return 1
    status, code = loop.execute(cfg, options, TorchTrainer(cfg, info))
    if status != "success":  # peers may be gone: leave without waiting for them
        os._exit(code)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
