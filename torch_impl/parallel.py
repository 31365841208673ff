"""Build the model for `torch.strategy`: one function per strategy of
`common.core.config.strategies`
(single, ddp, fsdp2: fully_shard, fsdp1: FSDP, hsdp: fully_shard on a replicas x shards mesh).

fsdp2 shards the model while it is still on the meta device and then materializes only each
rank's shards, so no rank ever holds the whole model; the others materialize it whole first
(DDP replicates it; FSDP1 flattens materialized modules). fsdp1 and fsdp2 shard the same units,
`wrap_units`, so a row comparing them compares implementations, not wrapping policies.

`check_options` runs before any process group exists, so a combination that cannot work fails
at once with the fix, not after rendezvous.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import (
    CPUOffload as Fsdp1CPUOffload,
)
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    FSDPModule,
    FullyShardedDataParallel,
    MixedPrecisionPolicy,
    fully_shard,
)
from torch.distributed.fsdp import (
    MixedPrecision as Fsdp1MixedPrecision,
)
from torch.distributed.fsdp import (
    ShardingStrategy as Fsdp1ShardingStrategy,
)
from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.nn.parallel import DistributedDataParallel

from common.core.config import strategies
from common.core.config.config import Config
from common.core.config.strategies import ParallelDims
from common.launch.cluster import ClusterSpec
from common.models import zoo
from torch_impl.layers import checkpoint_blocks
from torch_impl.model import (
    build_model,
    keep_gradient_strides,
    load_initial_weights,
    meta_model,
    units,
)
from torch_impl.optim import implementation
from torch_impl.precision import DTYPES


def resolve_strategy(cfg: Config, world_size: int) -> Config:
    """torch.strategy=auto (the default) becomes single for one process and ddp for more, so
    that the run, its folder name and its records say what ran."""
    strategy = strategies.resolve("torch", cfg.torch.strategy, world_size)
    if strategy == cfg.torch.strategy:
        return cfg
    return cfg.model_copy(update={"torch": cfg.torch.model_copy(update={"strategy": strategy})})


def check_options(cfg: Config, spec: ClusterSpec, cuda: bool) -> None:
    """Raise ValueError for torch options that do not combine, naming the fix: what the
    strategy refuses (`common.core.config.strategies`), its mesh on this world, the optimizer's
    update kernels, and pinned memory without CUDA."""
    options = cfg.torch
    name = strategies.resolve("torch", options.strategy, spec.world_size)
    strategy = strategies.get("torch", name)
    reasons = strategies.refusals(strategy, cfg, spec.world_size)
    if reasons:
        raise ValueError("; ".join(reasons))
    strategy.dims(spec.world_size, spec.local_world_size, cfg)
    implementation(
        cfg.optim.name,
        options.optimizer_impl,
        loss_scaling=options.mixed_precision == "fp16",
        strategy=strategy,
    )
    if options.cpu_offload and options.pin_memory and not cuda:
        raise ValueError(
            "torch.cpu_offload with torch.pin_memory=true needs CUDA (pinned host memory); "
            "set torch.pin_memory=false on a machine without a GPU"
        )


def wrap_units(net: zoo.Net, wrap: str, min_params: int) -> list[str]:
    """The top-level layers that become FSDP units of their own, in forward order (a residual
    block is one unit); the root unit keeps the rest. torch.wrap=layer: every one holding
    parameters. torch.wrap=size: those holding at least `min_params` parameters, which is what
    FSDP1's size_based_auto_wrap_policy picks among the root's children."""
    found = units(net)
    if wrap == "layer":
        return list(found)
    return [name for name, params in found.items() if params >= min_params]


def _shard_of(param: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
    """`full` laid out as `param` (a DTensor after fully_shard): this rank keeps its shard.
    src_data_rank=None: every rank already holds `full` (the weights are generated from the
    seed), so each cuts its own shard without a scatter (torch 2.13 distribute_tensor doc)."""
    if not isinstance(param, DTensor):
        return full
    return distribute_tensor(
        full.to(param.device), param.device_mesh, param.placements, src_data_rank=None
    )


def _single(cfg: Config, device: torch.device, dims: ParallelDims) -> nn.Module:
    return build_model(cfg.net(), cfg.train.seed, device)


def _ddp(cfg: Config, device: torch.device, dims: ParallelDims) -> nn.Module:
    model = build_model(cfg.net(), cfg.train.seed, device)
    keep_gradient_strides(model)
    device_ids = [device.index] if device.type == "cuda" else None
    # Batch statistics are the global batch's on every rank (torch_impl.layers), so the
    # running statistics agree without DDP broadcasting rank 0's before every forward. torch
    # 2.13 renamed the switch (the old one warns); the sync at init it keeps copies equal values.
    renamed = "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
    no_sync: dict[str, Any] = {"forward_sync_buffers" if renamed else "broadcast_buffers": False}
    return DistributedDataParallel(model, device_ids=device_ids, **no_sync)


def _fully_sharded(cfg: Config, device: torch.device, mesh: DeviceMesh | None) -> nn.Module:
    """fully_shard per unit, then the root, over `mesh` (None: every rank, 1-D)."""
    options = cfg.torch
    kwargs: dict[str, Any] = {
        "mesh": mesh,
        "reshard_after_forward": options.sharding == "full_shard",
    }
    if options.mixed_precision != "none":
        kwargs["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=DTYPES[options.mixed_precision], reduce_dtype=torch.float32
        )
    if options.cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=options.pin_memory)
    net = cfg.net()
    model = meta_model(net)
    for name in wrap_units(net, options.wrap, options.auto_wrap_min_params):
        fully_shard(model.get_submodule(name), **kwargs)
    fully_shard(model, **kwargs)
    # Only now does storage exist, and only for this rank's shards (FSDP2's meta-device
    # initialization: fully_shard, then to_empty, then fill the parameters).
    model.to_empty(device="cpu" if options.cpu_offload else device)
    load_initial_weights(model, cfg.train.seed, _shard_of)
    return model


def _fsdp2(cfg: Config, device: torch.device, dims: ParallelDims) -> nn.Module:
    return _fully_sharded(cfg, device, mesh=None)


def _hsdp(cfg: Config, device: torch.device, dims: ParallelDims) -> nn.Module:
    """A 2-D mesh, replicas x shards: fully_shard shards over its inner dimension and
    replicates over the outer one (placements Replicate(), Shard(0))."""
    mesh = init_device_mesh(
        device.type, (dims.replicate, dims.shard), mesh_dim_names=("replicate", "shard")
    )
    return _fully_sharded(cfg, device, mesh)


def _fsdp1(cfg: Config, device: torch.device, dims: ParallelDims) -> nn.Module:
    options = cfg.torch
    model = build_model(cfg.net(), cfg.train.seed)  # FSDP1 moves each unit as it flattens it
    names = wrap_units(cfg.net(), options.wrap, options.auto_wrap_min_params)
    units = {model.get_submodule(name) for name in names}
    mixed = None
    if options.mixed_precision != "none":
        dtype = DTYPES[options.mixed_precision]
        mixed = Fsdp1MixedPrecision(
            param_dtype=dtype, reduce_dtype=torch.float32, buffer_dtype=dtype
        )
    return FullyShardedDataParallel(
        model,
        sharding_strategy=Fsdp1ShardingStrategy[options.sharding.upper()],
        auto_wrap_policy=functools.partial(lambda_auto_wrap_policy, lambda_fn=units.__contains__),
        mixed_precision=mixed,
        cpu_offload=Fsdp1CPUOffload(offload_params=options.cpu_offload),
        device_id=device,  # on the CPU FSDP1 needs torch.device("cpu") spelled out
        use_orig_params=True,
    )


# One function per strategy of `common.core.config.strategies` (a test keeps the names equal).
APPLY: dict[str, Callable[[Config, torch.device, ParallelDims], nn.Module]] = {
    "single": _single,
    "ddp": _ddp,
    "fsdp2": _fsdp2,
    "fsdp1": _fsdp1,
    "hsdp": _hsdp,
}


@contextlib.contextmanager
def gathered_once(model: nn.Module, sharding: str) -> Iterator[None]:
    """Evaluation with fully_shard's parameters gathered once for the whole pass, not once per
    batch: every unit stays whole after its first forward (its reshard_after_forward off),
    then all are resharded at the end and the setting restored (torch.sharding). The pass's
    peak holds the whole model on every rank, as a gathered unit would at a time. Other
    wrappers (DDP, FSDP1) pass through as they are."""
    units = [module for module in model.modules() if isinstance(module, FSDPModule)]
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
            unit.set_reshard_after_forward(sharding == "full_shard", recurse=False)


def build_parallel(cfg: Config, device: torch.device, dims: ParallelDims) -> nn.Module:
    """The model with the shared initial weights, on `device`, wrapped as `cfg.torch.strategy`
    says on the mesh `dims`."""
    model = APPLY[cfg.torch.strategy](cfg, device, dims)
    if cfg.model.activation_checkpointing == "blocks":
        checkpoint_blocks(model)
    if cfg.torch.compile:  # in place: the module and its parameter names stay the same
        model.compile()
    return model
