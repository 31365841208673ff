"""How the torch probes (batchnorm_probe.py, wrapping_probe.py) join and leave a gloo group under
common.launch: on a store they hold, and leaving as torch_impl.dist.leave_together does. Rank 0
serves the store, so it waits until every rank has destroyed its group; a rank that exits
first takes the store away from a peer still in its teardown, which then aborts ("terminate
called without an active exception", SIGABRT; seen once in a full test run)."""

import os
import time

import torch.distributed as dist

LEAVE_WAIT_S = 60


def join() -> dist.TCPStore:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=rank == 0
    )
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    return store


def leave(store: dist.TCPStore) -> None:
    world, chief = dist.get_world_size(), dist.get_rank() == 0
    dist.barrier()
    dist.destroy_process_group()
    left = store.add("left", 1)
    deadline = time.monotonic() + LEAVE_WAIT_S
    while chief and left < world and time.monotonic() < deadline:
        time.sleep(0.01)
        left = store.add("left", 0)
