"""Run by each rank of tests/torch/test_batchnorm.py: ResNet-8 in float64, one backward of a
fixed batch, first alone (rank 0, before any process group: plain batch normalization), then
as DDP with each rank holding half the batch (statistics over the global batch). Prints, as
JSON, how far the gradients and the running statistics of the two are apart."""

import json

import probe_group  # beside this script
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from common.core.config import config_io
from torch_impl.model import build_model


def backward(model, images, labels) -> dict[str, torch.Tensor]:
    model.zero_grad()
    F.cross_entropy(model(images), labels).backward()
    found = {name.removeprefix("module."): p.grad.clone() for name, p in model.named_parameters()}
    found |= {name.removeprefix("module."): b.clone() for name, b in model.named_buffers()}
    return found


def main() -> None:
    net = config_io.load_config(None, ["model.name=resnet8"]).net()
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(16, 1, 28, 28, dtype=torch.float64, generator=generator)
    labels = torch.randint(0, 10, (16,), generator=generator)
    alone = backward(build_model(net, 0).double(), images, labels)
    store = probe_group.join()
    rank, half = dist.get_rank(), len(labels) // 2
    model = DistributedDataParallel(build_model(net, 0).double(), broadcast_buffers=False)
    mine = slice(rank * half, (rank + 1) * half)
    together = backward(model, images[mine], labels[mine])
    apart = {
        name: ((together[name] - alone[name]).abs().max() / alone[name].abs().max()).item()
        for name in alone
    }
    if rank == 0:
        print("APART " + json.dumps(apart), flush=True)
    probe_group.leave(store)


if __name__ == "__main__":
    main()
