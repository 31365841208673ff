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

import json
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

# The files that spend most of their time waiting, not computing, and why.
SIDE = {
    "tests/faults/test_lost_ranks.py": "stopped ranks, peers' timeouts",
    "tests/faults/test_startup.py": "start-up timeouts",
    "tests/faults/test_restarts.py": "rendezvous and grace waits",
    "tests/faults/test_loader_resume.py": "loader workers, one run at a time",
    "tests/faults/test_frozen_rank.py": "a rank frozen until the timeout",
    "tests/faults/test_bad_values.py": "one process at a time",
    "tests/common/test_launch.py": "the launcher's waits",
    "tests/compare/test_memory_at_n.py": "one process at a time",
    "tests/tf/test_deterministic.py": "one process at a time",
    "tests/faults/test_divergence.py": "one process at a time",
    "tests/torch/test_deterministic.py": "one process at a time",
    "tests/common/test_rendezvous.py": "peers that never come",
    "tests/common/test_loop.py": "signals' waits",
}
# Each file's wall seconds as the last run here measured them (tests/cost.py, in pytest's
# cache), else as tests/file_costs.json says (written by `pytest --save-costs`): the longest
# are taken first, so that none of them starts last and leaves the other worker idle.
COSTS_FILE = Path(__file__).resolve().parent / "file_costs.json"
COSTS_KEY = "dist-mnist/file-costs"  # in pytest's cache (.pytest_cache)
# What Lanes uses of pytest-xdist's LoadScopeScheduling beyond its public hook: its internals,
# checked at start (pytest-xdist is pinned in constraints/cpu.txt).
INTERNALS = ("_split_scope", "_reschedule", "_pending_of", "_assign_work_unit")
STATE = ("workqueue", "assigned_work", "registered_collections", "nodes")
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


def measured(config: Any) -> dict[str, float]:
    """Each file's wall seconds as the last runs here measured them ({} before the first)."""
    if getattr(config, "cache", None) is None:  # -p no:cacheprovider
        return {}
    return {path: float(s) for path, s in config.cache.get(COSTS_KEY, {}).items()}


def costs(config: Any) -> dict[str, float]:
    """Each file's wall seconds, measured: the last run's, else the committed table's."""
    found = measured(config)
    if not found and COSTS_FILE.is_file():
        found = {path: float(s) for path, s in json.loads(COSTS_FILE.read_text()).items()}
    return found


def missing_internals(scheduler: Any) -> list[str]:
    """The internals of pytest-xdist's LoadScopeScheduling that `scheduler` lacks: its methods
    (on the class too) and, on an instance, its state."""
    names = INTERNALS if isinstance(scheduler, type) else (*INTERNALS, *STATE)
    return [name for name in names if not hasattr(scheduler, name)]


class Lanes(LoadScopeScheduling):
    """The first worker runs the SLURM tier (beside the side lane, whose waits leave it room),
    then the other files, then `LAST` once the second worker has left. The second runs the side
    lane, then takes files as the first does. A lone worker (`-n 1`, or the other one lost)
    runs every unit."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        missing = missing_internals(self)
        if missing:
            import xdist

            raise pytest.UsageError(
                f"--lanes (tests/lanes.py) needs pytest-xdist's LoadScopeScheduling internals "
                f"{', '.join(missing)}, which pytest-xdist {xdist.__version__} lacks: install "
                "the version constraints/cpu.txt pins, or run without --lanes"
            )
        self.long = {(SIDE_PREFIX + p if p in SIDE else p): s for p, s in costs(config).items()}

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
                key=lambda u: (rank.get(u, 1 + u.startswith(SIDE_PREFIX)), -self.long.get(u, 0)),
            )
        else:
            units = [u for u in self.workqueue if u not in FIRST_ONLY]
            units.sort(key=lambda unit: (not unit.startswith(SIDE_PREFIX), -self.long.get(unit, 0)))
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
