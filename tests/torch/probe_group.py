"""How the torch probes (batchnorm_probe.py, wrapping_probe.py) join and leave a gloo group under
common.launch: on a store they hold, and leaving as the training program does
(torch_impl.dist.leave_together, then common.core.train.main's exit).

- Rank 0 serves the store, so it waits until every rank has destroyed its group; a rank that
  exits first takes the store away from a peer still in its teardown, which then aborts.
- Then each rank exits at once, running no destructor, as the training program does
  (common.core.train.main._leave). destroy_process_group leaves the group alive inside a DDP
  model's Reducer; freeing the model then frees ProcessGroupGloo, whose teardown races its
  worker threads. The training program met a deadlock there once. batchnorm_probe's rank 1
  aborted in its teardown ("terminate called without an active exception", SIGABRT) after
  rank 0 had printed its result, in two runs of make test (a clean clone's at 31e80a1, CI's
  at a04e0b1)."""

import os
import sys
import time
from typing import NoReturn

import torch.distributed as dist

LEAVE_WAIT_S = 60


def join() -> dist.TCPStore:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=rank == 0
    )
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    return store


def leave(store: dist.TCPStore) -> NoReturn:
    """Leave the group together with every rank, then end this process (exit status 0)."""
    world, chief = dist.get_world_size(), dist.get_rank() == 0
    dist.barrier()
    dist.destroy_process_group()
    left = store.add("left", 1)
    deadline = time.monotonic() + LEAVE_WAIT_S
    while chief and left < world and time.monotonic() < deadline:
        time.sleep(0.01)
        left = store.add("left", 0)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
