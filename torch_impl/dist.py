"""Bring up torch.distributed from the `common` cluster description.

The backend follows the device (gloo on the CPU, NCCL on CUDA), the device follows the local
rank, every collective has the configured timeout, and ranks that share a machine split its
cores instead of each starting one thread per core.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as torch_dist

from common.core import devices, strategies
from common.core.config import Config
from common.launch import cluster
from torch_impl import nccl
from torch_impl.precision import apply_determinism


@dataclass(frozen=True)
class DistInfo(cluster.RankView):
    spec: cluster.ClusterSpec
    device: torch.device
    device_type: str  # "cpu" or "gpu"
    device_name: str  # "cpu" or the GPU's name
    backend: str | None  # None: one process, no process group
    store: torch_dist.TCPStore | None = None  # the rendezvous store; the chief serves it
    threads: dict[str, int] = field(default_factory=dict)  # {"intra_op": n, "inter_op": m}

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def pick_device(cfg: Config, spec: cluster.ClusterSpec) -> torch.device:
    """This rank's device (`common.core.devices.place` decides; ValueError when it cannot work)."""
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    placed = devices.place(
        framework="torch", requested=cfg.dist.device, visible_gpus=visible, spec=spec
    )
    if placed.device_type == "cpu":
        return torch.device("cpu")
    return torch.device("cuda", placed.gpu_index)


def set_threads(spec: cluster.ClusterSpec) -> dict[str, int]:
    """Intra- and inter-op threads by `common.core.devices`' rule (the same as TensorFlow's
    side)."""
    intra = devices.threads_per_rank(spec, devices.available_cores())
    torch.set_num_threads(intra)
    try:  # allowed once, before any inter-op work has started
        torch.set_num_interop_threads(devices.inter_op_threads(intra))
    except RuntimeError:
        pass
    return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}


def setup_distributed(cfg: Config, spec: cluster.ClusterSpec) -> DistInfo:
    """Take this rank's device and its share of the cores, join the process group."""
    apply_determinism(cfg.dist.deterministic)  # before CUDA starts
    device = pick_device(cfg, spec)
    threads = set_threads(spec)
    on_gpu = device.type == "cuda"
    if on_gpu:
        torch.cuda.set_device(device)
    device_type = "gpu" if on_gpu else "cpu"
    device_name = torch.cuda.get_device_name(device) if on_gpu else "cpu"
    if strategies.get("torch", cfg.torch.strategy).processes == "one":
        return DistInfo(spec, device, device_type, device_name, None, threads=threads)
    backend = torch_dist.get_default_backend_for_device(device)
    if backend == "nccl":  # read by ProcessGroupNCCL when init_process_group creates it
        os.environ.update(nccl.error_settings(os.environ))
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
    return DistInfo(spec, device, device_type, device_name, backend, store, threads)


def versions(info: DistInfo) -> dict[str, str]:
    """torch's libraries that shape a run on this rank's device (CUDA, cuDNN, NCCL on a GPU)."""
    found = {"torch": str(torch.__version__)}
    if info.device.type == "cuda":
        found["cuda"] = str(torch.version.cuda)
        found["cudnn"] = str(torch.backends.cudnn.version())
        found["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version())
    return found


def all_reduce_sum(values: np.ndarray, info: DistInfo) -> np.ndarray:
    """The float64 sum of `values` over the ranks, on every rank (a copy for one process).
    The sum runs on the rank's device: NCCL reduces CUDA tensors only."""
    local = np.array(values, dtype=np.float64)
    if not info.distributed:
        return local
    tensor = torch.from_numpy(local).to(info.device)
    torch_dist.all_reduce(tensor, op=torch_dist.ReduceOp.SUM)
    return tensor.cpu().numpy()


def barrier(info: DistInfo) -> None:
    if info.distributed:
        torch_dist.barrier()


def synchronize(info: DistInfo) -> None:
    """Wait for queued device work, so that a clock reading means what it says."""
    if info.device.type == "cuda":
        torch.cuda.synchronize(info.device)


def leave_together(info: DistInfo, timeout_s: float) -> None:
    """Return once every rank has finished its collectives. The chief serves the rendezvous
    store, so it leaves only after every rank has destroyed its process group (otherwise a
    late rank aborts inside its teardown); after that, no collective works."""
    if not (info.distributed and torch_dist.is_initialized()):
        return
    torch_dist.barrier()
    torch_dist.destroy_process_group()
    if info.store is None:
        return
    left = info.store.add("teardown", 1)
    deadline = time.monotonic() + timeout_s
    while info.is_chief and left < info.world_size and time.monotonic() < deadline:
        time.sleep(0.01)
        left = info.store.add("teardown", 0)
