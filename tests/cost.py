"""What each test file costs, printed at the end of every run (a table, not an assertion), and
kept for the next run's lanes (tests/lanes.py takes the heaviest files first).

A test's span runs from the start of its setup to the end of its teardown, so a file's module
and session fixtures count where they are made. Its CPU time is the pytest process's own, its
children's once reaped (`resource.getrusage(RUSAGE_CHILDREN)`: the launchers and the ranks they
reaped), the warm servers' ranks (tests/warm_ranks.py), read from each server's /proc/PID/stat
(its reaped children's utime and stime), and, for a test on the SLURM test cluster, what the
cluster's nodes used meanwhile (its jobs, whose slurmstepd is no child of the test), from the
cluster's cpuacct group (slurm/testcluster_cpu.py).

Under pytest-xdist each worker measures its tests and hands the figures to the controller in the
test's report (`user_properties`); the controller sums them per file.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.lanes import COSTS_FILE, COSTS_KEY

PROPERTY = "cost"
TICKS = os.sysconf("SC_CLK_TCK")


def _warm_cpu_s() -> float:
    """CPU seconds of the warm servers' reaped ranks so far (and the servers' own)."""
    from tests import launching

    total = 0.0
    for server, _ in launching._servers.values():
        try:
            fields = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields from state (3rd in proc(5)): utime, stime, cutime, cstime are 14 to 17
        total += sum(int(value) for value in fields[11:15]) / TICKS
    return total


def cluster_cpu_s() -> float:
    """CPU seconds the SLURM test cluster's nodes have used since it came up, their jobs'
    included, ended processes too (slurm/testcluster_cpu.py); 0 where no cluster counts them."""
    folder = str(Path(__file__).resolve().parents[1] / "slurm")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import testcluster_cpu

    return testcluster_cpu.accounted_s() or 0.0


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + _warm_cpu_s()


def _cluster_s(item: pytest.Item) -> float:
    """The SLURM test cluster's CPU seconds so far, for a test that uses it (its jobs' time)."""
    return cluster_cpu_s() if "cluster" in getattr(item, "fixturenames", ()) else 0.0


class Cost:
    """The plugin: measures in the process that runs the tests, sums where reports arrive."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.started: dict[str, tuple[float, float, float]] = {}
        self.files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.started[item.nodeid] = (time.perf_counter(), _cpu_s(), _cluster_s(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if call.when == "teardown" and item.nodeid in self.started:
            wall_start, cpu_start, cluster_start = self.started.pop(item.nodeid)
            cluster = _cluster_s(item)
            # a count below the start's: the cluster was brought up anew (1 node, then 2) in
            # the test's span, and counts from there
            cluster -= cluster_start if cluster >= cluster_start else 0.0
            spent = (time.perf_counter() - wall_start, _cpu_s() - cpu_start + cluster)
            report.user_properties.append((PROPERTY, spent))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        for name, value in report.user_properties:
            if name == PROPERTY:
                row = self.files[report.nodeid.split("::", 1)[0]]
                row[0] += value[0]
                row[1] += value[1]
                row[2] += 1

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.files or hasattr(self.config, "workerinput"):
            return
        rows = sorted(self.files.items(), key=lambda item: -item[1][0])
        write = terminalreporter.write_line
        terminalreporter.section("cost per test file: wall and CPU seconds, heaviest first")
        write(f"{'wall s':>8} {'CPU s':>8} {'tests':>5}  file")
        for path, (wall, cpu, count) in rows:
            write(f"{wall:8.1f} {cpu:8.1f} {int(count):5d}  {path}")
        wall = sum(row[0] for _, row in rows)
        cpu = sum(row[1] for _, row in rows)
        write(f"{wall:8.1f} {cpu:8.1f} {sum(int(r[2]) for _, r in rows):5d}  in all (serial sums)")
        seconds = {path: round(row[0], 1) for path, row in rows}
        if getattr(self.config, "cache", None) is not None:
            known = self.config.cache.get(COSTS_KEY, {})
            known.update(seconds)
            self.config.cache.set(COSTS_KEY, known)
        if self.config.getoption("save_costs", False):
            COSTS_FILE.write_text(json.dumps(dict(sorted(seconds.items())), indent=1) + "\n")
            write(f"written to {COSTS_FILE}: the lanes' order on a checkout without a cache")
