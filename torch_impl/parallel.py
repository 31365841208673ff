"""Wrap an unmodified model for `torch.strategy`: single, ddp, fsdp2 (fully_shard) or fsdp1.

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
from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy
from torch.nn.parallel import DistributedDataParallel

from common.config import Config
from torch_impl.model import MnistNet, parameter_layers
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
    if options.strategy == "fsdp2" and options.sharding == "no_shard":
        raise ValueError(
            "torch.sharding=no_shard does not exist in fsdp2 (fully_shard); use torch.strategy=ddp"
        )
    if options.cpu_offload and options.pin_memory and not cuda:
        raise ValueError(
            "torch.cpu_offload with torch.pin_memory=true needs CUDA (pinned host memory); "
            "set torch.pin_memory=false on a machine without a GPU"
        )


def _fsdp2(model: MnistNet, cfg: Config) -> nn.Module:
    options = cfg.torch
    kwargs = {"reshard_after_forward": options.sharding == "full_shard"}
    if options.mixed_precision != "none":
        kwargs["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=DTYPES[options.mixed_precision], reduce_dtype=torch.float32
        )
    if options.cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=options.pin_memory)
    for layer in parameter_layers(model):  # one FSDP unit per layer, then the root
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def _fsdp1(model: MnistNet, cfg: Config, device: torch.device) -> nn.Module:
    options = cfg.torch
    mixed = None
    if options.mixed_precision != "none":
        dtype = DTYPES[options.mixed_precision]
        mixed = Fsdp1MixedPrecision(
            param_dtype=dtype, reduce_dtype=torch.float32, buffer_dtype=dtype
        )
    return FullyShardedDataParallel(
        model,
        sharding_strategy=Fsdp1ShardingStrategy[options.sharding.upper()],
        auto_wrap_policy=functools.partial(
            size_based_auto_wrap_policy, min_num_params=options.auto_wrap_min_params
        ),
        mixed_precision=mixed,
        cpu_offload=Fsdp1CPUOffload(offload_params=options.cpu_offload),
        device_id=device,  # on the CPU FSDP1 needs torch.device("cpu") spelled out
        use_orig_params=True,
    )


def parallelize(model: MnistNet, cfg: Config, device: torch.device) -> nn.Module:
    """Move `model` to `device` and wrap it as `cfg.torch.strategy` says."""
    strategy = cfg.torch.strategy
    if strategy == "fsdp2":
        if not cfg.torch.cpu_offload:
            model.to(device)
        return _fsdp2(model, cfg)
    if strategy == "fsdp1":
        return _fsdp1(model, cfg, device)
    model.to(device)
    if strategy == "ddp":
        device_ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids)
    return model
