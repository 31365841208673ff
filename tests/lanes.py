"""Two lanes for `make test` (pytest-xdist, `-n 2 --lanes`): the tests that mostly wait run
beside the ones that keep the cores busy.

On 2 cores the suite is CPU-bound for much of its time, but some files spend most of theirs
waiting (a rank frozen or stopped until a peer's timeout names it, a chief that never starts, a
rendezvous that gives up) or run one process at a time. Those in `SIDE` run first on the second
worker, while the first runs the SLURM tier, whose jobs also leave the cores room. Then both
workers take the other files, one file at a time each (a file's module fixtures, its shared
runs, are made once). The shaped-link measurements run last, alone, once the second worker has
left: the step times they check against the projection need the cores to themselves. Only the
first worker runs the SLURM tier (the machine has one test cluster, brought up by its session).
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadScopeScheduling

# Each file's serial wall time and its processes' share of the 2 cores (busy core-s / 2 / wall),
# measured on [D] at c4877a4 in a serial make test (docs/testing.md).
SIDE = {
    "tests/faults/test_lost_ranks.py": "85 s at 0.32: stopped ranks, peers' timeouts",
    "tests/faults/test_startup.py": "68 s at 0.17: start-up timeouts",
    "tests/faults/test_restarts.py": "63 s at 0.51 ([B], 440f8b0+): rendezvous and grace waits",
    "tests/faults/test_loader_resume.py": "63 s at 0.39",
    "tests/faults/test_frozen_rank.py": "49 s at 0.17: a rank frozen until the timeout",
    "tests/faults/test_bad_values.py": "36 s at 0.56: one process at a time",
    "tests/common/test_launch.py": "20 s at 0.07: the launcher's waits",
    "tests/compare/test_memory_at_n.py": "16 s at 0.54: one process at a time",
    "tests/tf/test_deterministic.py": "14 s at 0.52: one process at a time",
    "tests/faults/test_divergence.py": "11 s at 0.54: one process at a time",
    "tests/torch/test_deterministic.py": "10 s at 0.54: one process at a time",
    "tests/common/test_rendezvous.py": "5 s at 0.01: peers that never come",
    "tests/common/test_loop.py": "2 s at 0.09: signals' waits",
}
# The longest of the other files, taken first (longest first), so that none of them starts last
# and leaves the other worker idle: serial seconds of their tests, from the --durations of a
# clean-clone make test on [B] at af4ec88.
LONG = {
    "tests/tf/test_resnet.py": 130,
    "tests/torch/test_distributed.py": 70,
    "tests/faults/test_kubeflow_pods.py": 61,
    "tests/faults/test_one_run_per_folder.py": 28,  # [B], a tenth of MNIST
    "tests/compare/test_levers.py": 11,  # [B], alone
    "tests/tf/test_activation_checkpointing.py": 33,  # [B], alone
    "tests/preflight/test_preflight.py": 32,
    "tests/torch/test_resize.py": 27,
    "tests/torch/test_precision.py": 25,
    "tests/torch/test_compile.py": 25,
    "tests/faults/test_step_preemption.py": 25,  # [B], d629ca8
}
SIDE_PREFIX = "side:"  # the unit of a side-lane file
SLURM = "slurm"  # the SLURM tier but its shaped links: one unit, the machine has one cluster
LAST = "slurm-shaped"  # run last and alone: step times on shaped links need the cores
FIRST_ONLY = (SLURM, LAST)  # units only the first worker runs (the cluster is its session's)
WAIT = "wait"  # not a unit: the first worker waits for the other to leave before LAST


def group_of(nodeid: str) -> str:
    """The work unit of a test: the SLURM tier's, its side-lane file's, or its file's.

    From the node id's file, not from `xdist_group` marks: pytest 9 builds a node id from its
    parts, so the suffix pytest-xdist 3.8 writes into `item._nodeid` for `--dist loadgroup`
    is lost, and every test would be a unit of its own."""
    path = nodeid.split("::", 1)[0]
    if path == "tests/slurm/test_shaped_links.py":
        return LAST
    if path.startswith("tests/slurm/"):
        return SLURM
    return SIDE_PREFIX + path if path in SIDE else path


class Lanes(LoadScopeScheduling):
    """The first worker runs the SLURM tier (beside the side lane, whose waits leave it room),
    then the other files, then `LAST` once the second worker has left. The second runs the side
    lane, then takes files as the first does. A lone worker (`-n 1`, or the other one lost)
    runs every unit."""

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid)

    def _next(self, node: Any) -> str | None:
        """The unit `node` takes next; WAIT while `LAST` waits for the other worker to leave;
        None when nothing is left for it."""
        first = node.gateway.id == "gw0"
        alone = all(other is node for other in self.nodes)
        if first or alone:
            rank = {SLURM: 0, LAST: 3}
            units = sorted(
                self.workqueue,
                key=lambda u: (rank.get(u, 1 + u.startswith(SIDE_PREFIX)), -LONG.get(u, 0)),
            )
        else:
            units = [u for u in self.workqueue if u not in FIRST_ONLY]
            units.sort(key=lambda unit: (not unit.startswith(SIDE_PREFIX), -LONG.get(unit, 0)))
        if not units:
            return None
        return WAIT if units[0] == LAST and not alone else units[0]

    def _assign_work_unit(self, node: Any) -> None:
        self._reschedule(node)

    def _reschedule(self, node: Any) -> None:
        if node.shutting_down or self._pending_of(self.assigned_work[node]) > 2:
            return
        scope = self._next(node)
        if scope is None:
            node.shutdown()
        elif scope is not WAIT:
            work_unit = self.workqueue.pop(scope)
            self.assigned_work[node][scope] = work_unit
            collection = self.registered_collections[node]
            node.send_runtest_some(
                [collection.index(nodeid) for nodeid, done in work_unit.items() if not done]
            )

    def remove_node(self, node: Any) -> str | None:
        """A worker that left (or was lost) may be what `LAST` waited for."""
        crashed = super().remove_node(node)
        for other in self.nodes:
            self._reschedule(other)
        return crashed
