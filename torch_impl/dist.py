"""Bring up torch.distributed from the `common` cluster description.

The backend follows the device (gloo on the CPU, NCCL on CUDA), the device follows the local
rank, every collective has the configured timeout, and ranks that share a machine split its
cores instead of each starting one thread per core.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

import torch
import torch.distributed as torch_dist

from common import cluster
from common.config import Config
from torch_impl.parallel import check_options


@dataclass(frozen=True)
class DistInfo(cluster.RankView):
    spec: cluster.ClusterSpec
    device: torch.device
    backend: str | None  # None: one process, no process group
    store: object = None  # the rendezvous TCPStore; the chief's process serves it

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def pick_device(cfg: Config, spec: cluster.ClusterSpec) -> torch.device:
    cuda = torch.cuda.is_available()
    if cfg.dist.device == "gpu" and not cuda:
        raise ValueError("dist.device=gpu but torch sees no CUDA device; use dist.device=cpu")
    if cfg.dist.device == "cpu" or not cuda:
        return torch.device("cpu")
    return torch.device("cuda", spec.local_rank % torch.cuda.device_count())


def setup_distributed(cfg: Config) -> DistInfo:
    """Read the launch environment, check the options, join the process group."""
    spec = cluster.from_environment()
    device = pick_device(cfg, spec)
    check_options(cfg, spec.world_size, cuda=device.type == "cuda")
    torch.set_num_threads(cluster.threads_per_rank(spec.local_world_size))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if cfg.torch.strategy == "single":
        return DistInfo(spec, device, backend=None)
    backend = torch_dist.get_default_backend_for_device(device)
    # The rendezvous waits dist.startup_timeout_s for every rank to join; collectives after it
    # wait dist.timeout_s.
    try:
        store = torch_dist.TCPStore(
            spec.master_addr,
            spec.master_port,
            world_size=spec.world_size,
            is_master=spec.is_chief,
            timeout=dt.timedelta(seconds=cfg.dist.startup_timeout_s),
            wait_for_workers=True,
        )
    except (RuntimeError, OSError) as error:  # DistStoreError and timeouts derive from these
        raise RuntimeError(
            f"rank {spec.rank}: not all {spec.world_size} ranks reached the rendezvous at "
            f"{spec.master_addr}:{spec.master_port} within dist.startup_timeout_s="
            f"{cfg.dist.startup_timeout_s:g} s: {error}"
        ) from None
    torch_dist.init_process_group(
        backend=backend,
        store=store,
        rank=spec.rank,
        world_size=spec.world_size,
        timeout=dt.timedelta(seconds=cfg.dist.timeout_s),
        device_id=device if device.type == "cuda" else None,
    )
    return DistInfo(spec, device, backend, store)


def all_reduce_sum(values: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum over ranks (in place); a no-op for one process."""
    if info.distributed:
        torch_dist.all_reduce(values, op=torch_dist.ReduceOp.SUM)
    return values


def all_gather_objects(value: object, info: DistInfo) -> list:
    if not info.distributed:
        return [value]
    gathered: list = [None] * info.world_size
    torch_dist.all_gather_object(gathered, value)
    return gathered


def broadcast_object(value: object, info: DistInfo) -> object:
    """The chief's `value` on every rank."""
    if not info.distributed:
        return value
    box = [value]
    torch_dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(info: DistInfo) -> None:
    if info.distributed:
        torch_dist.barrier()


def synchronize(device: torch.device) -> None:
    """Wait for queued device work, so that a clock reading means what it says."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def teardown(info: DistInfo, timeout_s: float = 30.0) -> None:
    """Leave together. The chief serves the store, so it exits only after every rank has
    destroyed its process group (otherwise a late rank can abort inside its teardown)."""
    if not (info.distributed and torch_dist.is_initialized()):
        return
    torch_dist.barrier()
    torch_dist.destroy_process_group()
    left = info.store.add("teardown", 1)
    deadline = time.monotonic() + timeout_s
    while info.is_chief and left < info.world_size and time.monotonic() < deadline:
        time.sleep(0.01)
        left = info.store.add("teardown", 0)
