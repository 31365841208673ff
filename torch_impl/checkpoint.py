"""Checkpoints with torch.distributed.checkpoint (DCP), and the final unsharded export.

`save_checkpoint` writes into the folder `common.core.train.loop` gives it
(`common.core.run.checkpoint_folders` decides where, marks it complete with a manifest of
checksums, and verifies it before a resume): the
DCP shards of model and optimizer (each rank writes its own) and each rank's RNG state.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from common.core.whole_files import whole
from torch_impl.dist import DistInfo, barrier


def _dcp():
    """DCP and its state-dict helpers, imported when a checkpoint is saved or loaded: at the
    top, every rank's start would pay for them, also in runs that never checkpoint
    (docs/frameworks.md, "What a rank's start avoids")."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    return dcp, get_state_dict, set_state_dict


def save_checkpoint(folder: Path, *, model: nn.Module, optimizer, info: DistInfo) -> None:
    """This rank's part of the state (collective: every rank calls it)."""
    dcp, get_state_dict, _ = _dcp()
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=folder)
    torch.save(torch.get_rng_state(), folder / f"rng-rank{info.rank}.pt")
    if info.device.type == "cuda":
        torch.save(torch.cuda.get_rng_state(info.device), folder / f"cuda-rng-rank{info.rank}.pt")


def load_checkpoint(folder: Path, *, model: nn.Module, optimizer, info: DistInfo) -> None:
    """Restore model, optimizer and this rank's RNG (collective). DCP loads the state into this
    launch's layout, whatever the world size or strategy that saved it (resharding at load).
    The RNG states are per rank: restored only where the same ranks saved them; at another
    world size every rank keeps the state it was seeded with (dropout draws other masks)."""
    dcp, get_state_dict, set_state_dict = _dcp()
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.load({"model": model_state, "optim": optim_state}, checkpoint_id=folder)  # in place
    set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optim_state)
    if len(list(folder.glob("rng-rank*.pt"))) != info.world_size:
        return
    torch.set_rng_state(torch.load(folder / f"rng-rank{info.rank}.pt"))
    cuda_rng = folder / f"cuda-rng-rank{info.rank}.pt"
    if info.device.type == "cuda" and cuda_rng.is_file():
        torch.cuda.set_rng_state(torch.load(cuda_rng), info.device)


def export_model(model: nn.Module, run_dir: Path, info: DistInfo) -> Path:
    """The whole model, unsharded, on the CPU, canonical names (collective; the chief writes)."""
    # Offload only from a GPU: with the model already on the CPU, FSDP1's offloading full state
    # dict segfaults in torch 2.13 (seen on 2 gloo ranks), and there is nothing to move anyway.
    offload = info.device.type == "cuda"
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=offload)
    )
    path = run_dir / "model.pt"
    if info.is_chief:
        with whole(path) as partial:  # a full disk leaves no part of it
            weights = {name: torch.as_tensor(tensor).float() for name, tensor in state.items()}
            torch.save(weights, partial)
    barrier(info)
    return path
