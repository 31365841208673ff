"""Checkpoints with torch.distributed.checkpoint (DCP), and the final unsharded export.

A checkpoint is `<run>/checkpoints/epoch-NNNN/`: the DCP shards of model and optimizer (each
rank writes its own), each rank's RNG state, and `complete.json`, written by the chief after
every rank has finished, so a checkpoint without it is ignored by --resume.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

from torch_impl.dist import DistInfo, barrier

COMPLETE = "complete.json"


def checkpoint_root(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def save_checkpoint(
    run_dir: Path, epoch: int, *, model: nn.Module, optimizer, info: DistInfo, extras: dict
) -> Path:
    """Save after `epoch` epochs (collective: every rank calls it)."""
    path = checkpoint_root(run_dir) / f"epoch-{epoch:04d}"
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=path)
    torch.save(torch.get_rng_state(), path / f"rng-rank{info.rank}.pt")
    if info.device.type == "cuda":
        torch.save(torch.cuda.get_rng_state(info.device), path / f"cuda-rng-rank{info.rank}.pt")
    barrier(info)
    if info.is_chief:
        (path / COMPLETE).write_text(json.dumps({"epoch": epoch, **extras}))
    barrier(info)
    return path


def latest_checkpoint(run_dir: Path) -> Path | None:
    complete = sorted(checkpoint_root(run_dir).glob(f"epoch-*/{COMPLETE}"))
    return complete[-1].parent if complete else None


def load_checkpoint(path: Path, *, model: nn.Module, optimizer, info: DistInfo) -> dict:
    """Restore model, optimizer and this rank's RNG; return the chief's extras."""
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
    )
    rng = path / f"rng-rank{info.rank}.pt"
    if not rng.is_file():
        raise RuntimeError(
            f"{path} has no RNG state for rank {info.rank}: it was written by a run with another "
            "world size; resume with the same number of ranks"
        )
    torch.set_rng_state(torch.load(rng))
    if info.device.type == "cuda" and (path / f"cuda-rng-rank{info.rank}.pt").is_file():
        torch.cuda.set_rng_state(torch.load(path / f"cuda-rng-rank{info.rank}.pt"), info.device)
    return json.loads((path / COMPLETE).read_text())


def export_model(model: nn.Module, run_dir: Path, info: DistInfo) -> Path:
    """The whole model, unsharded, on the CPU, canonical names (collective; the chief writes)."""
    # Offload only from a GPU: with the model already on the CPU, FSDP1's offloading full state
    # dict segfaults in torch 2.13 (seen on 2 gloo ranks), and there is nothing to move anyway.
    offload = info.device.type == "cuda"
    state = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=offload)
    )
    path = run_dir / "model.pt"
    if info.is_chief:
        torch.save({name: tensor.float() for name, tensor in state.items()}, path)
    barrier(info)
    return path
