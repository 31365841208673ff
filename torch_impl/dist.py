"""Bring up torch.distributed from the `common` cluster description.

The backend follows the device (gloo on the CPU, NCCL on CUDA), the device follows the local
rank, every collective has the configured timeout, and ranks that share a machine split its
cores instead of each starting one thread per core.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as torch_dist

from common.core.config import devices, strategies
from common.core.config.config import Config
from common.launch import cluster, rendezvous
from torch_impl import nccl
from torch_impl.precision import apply_determinism, settle_vector_math


@dataclass(frozen=True)
class DistInfo(cluster.RankView):
    spec: cluster.ClusterSpec
    device: torch.device
    device_type: str  # "cpu" or "gpu"
    device_name: str  # "cpu" or the GPU's name
    backend: str | None  # None: one process, no process group
    store: torch_dist.Store | None = None  # the rendezvous store; the chief serves it
    threads: dict[str, int] = field(default_factory=dict)  # {"intra_op": n, "inter_op": m}

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def pick_device(cfg: Config, spec: cluster.ClusterSpec) -> torch.device:
    """This rank's device (`common.core.config.devices.place` decides; ValueError when it cannot
    work)."""
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    placed = devices.place(
        framework="torch", requested=cfg.dist.device, visible_gpus=visible, spec=spec
    )
    if placed.device_type == "cpu":
        return torch.device("cpu")
    return torch.device("cuda", placed.gpu_index)


def set_threads(spec: cluster.ClusterSpec) -> dict[str, int]:
    """Intra- and inter-op threads by `common.core.config.devices`' rule (the same as TensorFlow's
    side)."""
    intra = devices.threads_per_rank(spec, devices.available_cores())
    torch.set_num_threads(intra)
    settle_vector_math()
    try:  # allowed once, before any inter-op work has started
        torch.set_num_interop_threads(devices.inter_op_threads(intra))
    except RuntimeError:
        pass
    return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}


# How long past dist.startup_timeout_s a rank waits for the store's own error before it gives up
# on it: TCPStore raises on time when nobody listens or a peer is missing, but a client whose
# server accepts and never answers (a stopped chief, a stale process on the port) waits forever.
STORE_GRACE_S = 2.0


def _meet(spec: cluster.ClusterSpec, timeout_s: float) -> torch_dist.Store:
    """The rendezvous store: the chief serves it and waits for every rank; the others connect.
    RuntimeError within timeout_s (and STORE_GRACE_S) naming the address, the port and what was
    found there. The store is built in a thread of its own, since a client of a silent server
    never returns; that thread is left behind when it does not (the rank then exits).

    Under torchrun's agent (TORCHELASTIC_USE_AGENT_STORE=True) the agent serves the store:
    every rank is a client, as in torch's own env:// rendezvous. A restarted attempt's keys go
    under a prefix of their own, so nothing an earlier attempt left in a store that outlived it
    is read again."""
    built: dict[str, Any] = {}
    agent_serves = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"

    def build() -> None:
        try:
            store = torch_dist.TCPStore(
                spec.master_addr,
                spec.master_port,
                world_size=spec.world_size,
                is_master=spec.is_chief and not agent_serves,
                timeout=dt.timedelta(seconds=timeout_s),
                wait_for_workers=not agent_serves,
            )
            prefix = f"attempt-{spec.attempt}/"
            built["store"] = torch_dist.PrefixStore(prefix, store) if spec.attempt else store
        except (RuntimeError, OSError) as error:  # DistStoreError and timeouts derive from these
            built["error"] = error

    thread = threading.Thread(target=build, name="rendezvous", daemon=True)
    thread.start()
    thread.join(timeout_s + STORE_GRACE_S)
    if "store" in built:
        return built["store"]
    where = f"{spec.master_addr}:{spec.master_port}"
    if spec.is_chief:
        error = built.get("error", "no answer")
        if "address already in use" in str(error).lower():
            raise RuntimeError(
                f"rank 0: cannot serve the rendezvous on {where}: another process holds the "
                "port (a stale run?); end it, or set MASTER_PORT to a free port"
            )
        raise RuntimeError(
            f"rank 0: not all {spec.world_size} ranks reached the rendezvous at {where} within "
            f"dist.startup_timeout_s={timeout_s:g} s: {_first_line(error)}"
        )
    raise RuntimeError(
        f"rank {spec.rank}: no rendezvous at {where} within dist.startup_timeout_s="
        f"{timeout_s:g} s: {rendezvous.what_is_at(spec.master_addr, spec.master_port)}"
    )


def _first_line(error: object) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else repr(error)


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
    store = _meet(spec, cfg.dist.startup_timeout_s)
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
