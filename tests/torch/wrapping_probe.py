"""Run by each rank of tests/torch/test_sizes.py: build the model as the trainer does for
fsdp1 and fsdp2 and print, as JSON, which layers became FSDP units and how each unit's
parameters are placed on this rank."""

import json
import sys

import probe_group  # beside this script
import torch
from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
from torch.distributed.tensor import DTensor, Shard

from common.core.config import config_io, strategies
from torch_impl.parallel import build_parallel

PREFIX = "_fsdp_wrapped_module."


def fsdp2_units(model) -> dict:
    units = {}
    for name, module in model.named_modules():
        if isinstance(module, FSDPModule):
            own = [p for n, p in module.named_parameters() if "." not in n or name == ""]
            placed = all(isinstance(p, DTensor) and p.placements == (Shard(0),) for p in own)
            units[name or "<root>"] = {
                "params": sorted(f"{name}.{n}" for n, _ in module.named_parameters())
                if name
                else [],
                "sharded_rows": placed,
                "local_rows": [p.to_local().shape[0] for p in own] if name else [],
            }
    return units


def fsdp1_units(model) -> dict:
    units = {}
    for name, module in model.named_modules():
        if isinstance(module, FullyShardedDataParallel):
            name = name.replace(PREFIX, "").strip(".")
            flat = module._flat_param  # the unit's own parameters, flattened and sharded
            fqns = (
                [] if flat is None else [f"{name}.{fqn.replace(PREFIX, '')}" for fqn in flat._fqns]
            )
            units[name or "<root>"] = {
                "params": sorted(fqns) if name else [],
                "local_numel": 0 if flat is None else flat.numel(),
            }
    return units


def main() -> None:
    store = probe_group.join()
    overrides = sys.argv[1:]
    report = {}
    for strategy in ("fsdp2", "fsdp1"):
        cfg = config_io.load_config(None, [*overrides, f"torch.strategy={strategy}"])
        dims = strategies.get("torch", strategy).dims(2, 2, cfg)
        model = build_parallel(cfg, torch.device("cpu"), dims)
        report[strategy] = fsdp2_units(model) if strategy == "fsdp2" else fsdp1_units(model)
    print("UNITS " + json.dumps(report), flush=True)
    probe_group.leave(store)


if __name__ == "__main__":
    main()
