"""Build the model for `torch.strategy`: single, ddp, fsdp2 (fully_shard) or fsdp1.

fsdp2 shards the model while it is still on the meta device and then materializes only each
rank's shards, so no rank ever holds the whole model; the others materialize it whole first
(DDP replicates it; FSDP1 flattens materialized modules). fsdp1 and fsdp2 shard the same units,
`wrap_units`, so a row comparing them compares implementations, not wrapping policies.

`check_options` runs before any process group exists, so a combination that cannot work fails
at once with the fix, not after rendezvous.
"""

from __future__ import annotations

import dataclasses
import functools

import torch
from torch import nn
from torch.distributed.fsdp import (
    CPUOffload as Fsdp1CPUOffload,
)
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
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

from common.core.config import Config
from common.models import weights
from common.models.config import ModelConfig
from torch_impl.model import (
    MnistNet,
    build_model,
    keep_gradient_strides,
    load_initial_weights,
    meta_model,
)
from torch_impl.optim import implementation
from torch_impl.precision import DTYPES

FSDP = ("fsdp1", "fsdp2")


def resolve_strategy(cfg: Config, world_size: int) -> Config:
    """torch.strategy=auto (the default) becomes single for one process and ddp for more, so
    that the run, its folder name and its records say what ran."""
    if cfg.torch.strategy != "auto":
        return cfg
    strategy = "single" if world_size == 1 else "ddp"
    return dataclasses.replace(cfg, torch=dataclasses.replace(cfg.torch, strategy=strategy))


def check_options(cfg: Config, world_size: int, cuda: bool) -> None:
    """Raise ValueError for torch options that do not combine, naming the fix."""
    options = cfg.torch
    if options.strategy == "single" and world_size != 1:
        raise ValueError(
            f"torch.strategy=single runs one process, but {world_size} were launched; "
            "use ddp, fsdp2 or fsdp1, or launch one process"
        )
    if options.strategy not in FSDP:
        for key, value, default in (
            ("sharding", options.sharding, "full_shard"),
            ("cpu_offload", options.cpu_offload, False),
        ):
            if value != default:
                raise ValueError(
                    f"torch.{key}={value} is an FSDP option; with torch.strategy="
                    f"{options.strategy} leave it at {default} or use fsdp2/fsdp1"
                )
    implementation(
        cfg.optim.name,
        options.optimizer_impl,
        loss_scaling=options.mixed_precision == "fp16",
        strategy=options.strategy,
    )
    if options.compile and options.strategy == "fsdp1":
        raise ValueError(
            "torch.compile=true is offered for single, ddp and fsdp2 (FSDP1 compiled is not "
            "tested here): use torch.strategy=fsdp2"
        )
    if options.strategy == "fsdp2" and options.sharding == "no_shard":
        raise ValueError(
            "torch.sharding=no_shard does not exist in fsdp2 (fully_shard); use torch.strategy=ddp"
        )
    if options.cpu_offload and options.pin_memory and not cuda:
        raise ValueError(
            "torch.cpu_offload with torch.pin_memory=true needs CUDA (pinned host memory); "
            "set torch.pin_memory=false on a machine without a GPU"
        )


def wrap_units(model_cfg: ModelConfig, wrap: str, min_params: int) -> list[str]:
    """The layers that become FSDP units of their own, in forward order; the root unit keeps
    the rest. torch.wrap=layer: every parameter layer. torch.wrap=size: the layers holding at
    least `min_params` parameters, which is what FSDP1's size_based_auto_wrap_policy picks in
    these flat models (each layer is a leaf child of the root)."""
    layers = weights.parameter_layers(model_cfg)
    if wrap == "layer":
        return [layer.name for layer in layers]
    count = {layer.name: weights.parameter_count_of(layer) for layer in layers}
    return [name for name, params in count.items() if params >= min_params]


def _shard_of(param: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
    """`full` laid out as `param` (a DTensor after fully_shard): this rank keeps its shard.
    src_data_rank=None: every rank already holds `full` (the weights are generated from the
    seed), so each cuts its own shard without a scatter (torch 2.13 distribute_tensor doc)."""
    if not isinstance(param, DTensor):
        return full
    return distribute_tensor(
        full.to(param.device), param.device_mesh, param.placements, src_data_rank=None
    )


def _fsdp2(cfg: Config, device: torch.device) -> nn.Module:
    options = cfg.torch
    kwargs = {"reshard_after_forward": options.sharding == "full_shard"}
    if options.mixed_precision != "none":
        kwargs["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=DTYPES[options.mixed_precision], reduce_dtype=torch.float32
        )
    if options.cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=options.pin_memory)
    model = meta_model(cfg.model)
    for name in wrap_units(cfg.model, options.wrap, options.auto_wrap_min_params):
        fully_shard(getattr(model, name), **kwargs)
    fully_shard(model, **kwargs)
    # Only now does storage exist, and only for this rank's shards (FSDP2's meta-device
    # initialization: fully_shard, then to_empty, then fill the parameters).
    model.to_empty(device="cpu" if options.cpu_offload else device)
    load_initial_weights(model, cfg.train.seed, _shard_of)
    return model


def _fsdp1(model: MnistNet, cfg: Config, device: torch.device) -> nn.Module:
    options = cfg.torch
    names = wrap_units(cfg.model, options.wrap, options.auto_wrap_min_params)
    units = {getattr(model, name) for name in names}
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


def build_parallel(cfg: Config, device: torch.device) -> nn.Module:
    """The model with the shared initial weights, on `device`, wrapped as `cfg.torch.strategy`
    says."""
    model = _wrapped(cfg, device)
    if cfg.torch.compile:  # in place: the module and its parameter names stay the same
        model.compile()
    return model


def _wrapped(cfg: Config, device: torch.device) -> nn.Module:
    strategy = cfg.torch.strategy
    if strategy == "fsdp2":
        return _fsdp2(cfg, device)
    if strategy == "fsdp1":  # FSDP1 moves each unit to device_id as it flattens it
        return _fsdp1(build_model(cfg.model, cfg.train.seed), cfg, device)
    model = build_model(cfg.model, cfg.train.seed, device)
    if strategy == "ddp":
        device_ids = [device.index] if device.type == "cuda" else None
        keep_gradient_strides(model)
        return DistributedDataParallel(model, device_ids=device_ids)
    return model
