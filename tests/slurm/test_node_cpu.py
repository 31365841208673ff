"""Nodes of a fixed CPU size on the SLURM test cluster (`testcluster.py cpu --node-cpu`,
slurm/testcluster_cpu.py): a size the machine cannot give is refused; a given size holds at
every moment, is recorded by the runs, and `off` takes it away."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cost import cluster_cpu_s
from tests.records import read_metrics
from tests.slurm.jobs import CLUSTER_DIR, QUICK, REPO, ROOT_ONLY, slurm_env

pytestmark = ROOT_ONLY

NAMES = ("quota", "period")
# wall over CPU seconds of a 20 ms CPU burst after 300 ms idle
BURST = """
import time
time.sleep(0.3)
wall, cpu = time.perf_counter(), time.process_time()
while time.process_time() - cpu < 0.02:
    pass
print((time.perf_counter() - wall) / (time.process_time() - cpu))
"""

# one CPU-second, then the process ends
BURN = """
import time
cpu = time.process_time()
while time.process_time() - cpu < 1.0:
    pass
"""


def _cluster_cpu(share: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "slurm/testcluster.py", "cpu", "--node-cpu", share]
    command += ["--dir", str(CLUSTER_DIR)]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)


def test_a_node_size_the_machine_cannot_give_is_refused_before_anything():
    done = _cluster_cpu("3.5" if (os.cpu_count() or 1) < 3.5 else "0")
    assert done.returncode == 2
    assert "--node-cpu" in done.stderr and "give a node's size in cores" in done.stderr


def test_nodes_of_a_fixed_cpu_size_are_held_to_it_and_the_run_says_so(cluster, tmp_path):
    """`testcluster.py cpu --node-cpu 0.5`: each node's slurmd, and so the tasks it starts, in
    a CPU quota of half a core, whatever the number of nodes; the run records it; `off` takes
    the quotas and their groups away."""
    if cluster != 2:
        pytest.skip("the 2-node cluster's")
    sized = _cluster_cpu("0.5")
    assert sized.returncode == 0, sized.stderr
    try:
        for node in ("n1", "n2"):
            group = Path(f"/sys/fs/cgroup/cpu/suite-{node}")
            quota, period = (int((group / f"cpu.cfs_{name}_us").read_text()) for name in NAMES)
            assert quota / period == 0.5
        # Held at every moment, not on average: a burst after an idle spell runs at half speed
        # too. A 100 ms period let one run at full speed until its quota ran out, so a node that
        # mostly waits (on 8 nodes) computed faster than one that did not (on 2).
        burst = ["srun", "--nodes=1", "--job-name=burst", sys.executable, "-c", BURST]
        ran = subprocess.run(burst, env=slurm_env(tmp_path), capture_output=True, text=True)
        assert ran.returncode == 0, ran.stderr
        assert float(ran.stdout) > 1.6, f"a 20 ms burst ran at {ran.stdout.strip()} x its CPU"
        command = ["srun", "--nodes=2", "--ntasks-per-node=1", "--job-name=q", "--time=5"]
        command += ["slurm/run_slurm.sh", "torch", "configs/mlp_adam.yaml", *QUICK]
        command += ["--set", "data.train_limit=640", "--set", "train.epochs=1"]
        done = subprocess.run(
            command, cwd=REPO, env=slurm_env(tmp_path), capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
        (folder,) = tmp_path.glob("q-*")
        records = read_metrics(folder / "metrics.jsonl")
        start = records[0]
        assert start["cpu_quota_cores"] == 0.5
        # each epoch says how often the node's quota held it, and the chief's CPU seconds
        for epoch in (r for r in records if r["record"] == "epoch"):
            assert 0 <= epoch["quota_throttled"] <= 1 and epoch["cpu_time_s"] > 0, epoch
        assert start["hosts"] == ["n1", "n2"]
    finally:
        off = _cluster_cpu("off")
    assert off.returncode == 0, off.stderr
    assert not list(Path("/sys/fs/cgroup/cpu").glob("suite-*"))


def test_the_cluster_counts_its_jobs_cpu_time_for_the_tests_cost(cluster, tmp_path):
    """A job's processes run under slurmstepd, which no test reaps, so a test's rusage never saw
    their CPU time: the cluster counts its nodes' in a cpuacct group of its own, ended
    processes included, and each test's cost (tests/cost.py) adds what its jobs used."""
    if not Path("/sys/fs/cgroup/cpuacct/cpuacct.usage").exists():
        pytest.skip("this kernel has no cgroup v1 cpuacct: the cluster's jobs are not counted")
    before = cluster_cpu_s()
    burn = ["srun", "--nodes=1", "--job-name=burn", sys.executable, "-c", BURN]
    ran = subprocess.run(burn, env=slurm_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    used = cluster_cpu_s() - before
    assert 0.9 <= used < 5, f"the cluster counted {used:.2f} CPU s for a job of 1.0"
