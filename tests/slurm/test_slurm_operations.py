"""Operating the suite on the SLURM test cluster: the preflight as a job, host lists as SLURM
expands them, nodes with cores of their own, and scancel."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.records import read_metrics
from tests.slurm.jobs import REPO, ROOT_ONLY, layout, slurm_env, submit, wait_for

pytestmark = ROOT_ONLY


@pytest.mark.scaling  # every check and the link profiles, measured on 2 nodes: make test-scaling
@pytest.mark.parametrize("cluster", [2], indirect=True)  # 1 x 2 ranks: tests/preflight
def test_the_preflight_runs_as_a_job_on_the_cluster(cluster, tmp_path):
    """sbatch of the preflight: every check as srun steps of the job's own layout, a rank on
    each node (the preflight of 2 ranks on one machine is tests/preflight's)."""
    env = slurm_env(tmp_path)
    options = [*layout(cluster), "--job-name=p", f"--output={tmp_path}/%x-%j.out"]
    job = submit(options, ["preflight", "--links-max-bytes", str(2**21)], env)  # 2 MiB
    state, log = wait_for(job, env, timeout_s=600), (tmp_path / f"p-{job}.out").read_text()
    assert state == "COMPLETED" and "preflight passed" in log, log
    for rank, node in enumerate(["n1", "n2"]):
        assert f"rank {rank:<5} {node}: cpu:cpu" in log
    assert log.count("67,108,864") == 2 and "torch-fsdp1-none" in log


HOSTLISTS = [
    "n1",
    "n[1-2]",
    "gpu-[01-03,7],cpu9",
    "n[1-2]x[3-4]y[5-6]",
    "a[1-3]b[4-5]c[6-7]d[8-9]",
    "a b,c",
    "c[3,1],x[08-11]",
]


@pytest.mark.parametrize("cluster", [1], indirect=True)
def test_the_built_in_hostlist_expansion_equals_scontrols(cluster, tmp_path):
    from common.launch.hostlist import expand_hostlist

    for text in HOSTLISTS:
        shown = subprocess.run(
            ["scontrol", "show", "hostnames", text],
            env=slurm_env(tmp_path),
            capture_output=True,
            text=True,
            check=True,
        )
        assert expand_hostlist(text) == shown.stdout.split(), text


def test_each_node_runs_on_cores_of_its_own(cluster, tmp_path):
    shown = subprocess.run(
        [
            "srun",
            f"--nodes={cluster}",
            "--ntasks-per-node=1",
            "python3",
            "-c",
            "import os, socket; print(socket.gethostname(), sorted(os.sched_getaffinity(0)))",
        ],
        env=slurm_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    cores = [json.loads(line.split(" ", 1)[1]) for line in shown.stdout.splitlines()]
    assert len(cores) == cluster and all(cores)
    if cluster == 2:  # no core is shared by the two nodes
        assert not set(cores[0]) & set(cores[1])


@pytest.mark.parametrize("cluster", [2], indirect=True)
@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_scancel_ends_the_run_as_aborted_before_killwait(cluster, framework, tmp_path):
    env = slurm_env(tmp_path)
    job = submit(
        [*layout(cluster), "--job-name=c", f"--output={tmp_path}/%x-%j.out"],
        [
            framework,
            "configs/mlp_adam.yaml",
            "--set",
            "train.epochs=20",
            "--set",
            "train.log_every_steps=1",
        ],
        env,
    )
    metrics_file = tmp_path / f"c-{job}" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics_file.is_file() and metrics_file.read_text().count('"step"') >= 30):
        assert time.monotonic() < deadline, (tmp_path / f"c-{job}.out").read_text()
        time.sleep(0.2)
    subprocess.run(["scancel", job], env=env, check=True)
    assert wait_for(job, env, timeout_s=60) == "CANCELLED"
    end = read_metrics(metrics_file)[-1]
    assert end["record"] == "run_end" and end["status"] == "aborted", end
    assert "SIGTERM" in end["error"]


def rank_process(job: str, rank: int) -> int:
    """The pid of the training process of `rank` in `job` (the test cluster's nodes share
    this machine's process table)."""
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            found = set(environ.read_bytes().split(b"\0"))
            command = (environ.parent / "cmdline").read_bytes()
        except OSError:
            continue
        mine = {f"SLURM_JOB_ID={job}".encode(), f"SLURM_PROCID={rank}".encode()}
        if mine <= found and b"_impl.train" in command and b"task.sh" not in command:
            return int(environ.parent.name)
    raise AssertionError(f"no rank {rank} of job {job} found")


@pytest.mark.parametrize("cluster", [2], indirect=True)
@pytest.mark.parametrize("how", ["sbatch torch", "sbatch tf", "srun torch"])
def test_a_killed_chief_still_gets_a_run_end(cluster, how, tmp_path):
    """SIGKILL to rank 0: a surviving rank (or, after srun, the batch script) writes the
    run_end, naming rank 0, under sbatch and under plain srun alike."""
    env = slurm_env(tmp_path)
    launch, framework = how.split()
    args = [
        framework,
        "configs/mlp_adam.yaml",
        "--set",
        "train.epochs=20",
        "--set",
        "train.log_every_steps=1",
        "--set",
        "dist.timeout_s=30",
    ]
    if launch == "sbatch":
        job = submit(
            [*layout(cluster), "--job-name=k", f"--output={tmp_path}/%x-%j.out"], args, env
        )
        waiting = None
    else:
        command = ["srun", *layout(cluster), "--job-name=k", "--time=5", "slurm/run_slurm.sh"]
        waiting = subprocess.Popen(
            [*command, *args], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("k-*")):
            assert time.monotonic() < deadline and waiting.poll() is None
            time.sleep(0.2)
        job = list(tmp_path.glob("k-*"))[0].name.split("-", 1)[1]
    metrics_file = tmp_path / f"k-{job}" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics_file.is_file() and metrics_file.read_text().count('"step"') >= 30):
        assert time.monotonic() < deadline, f"job {job} never trained"
        time.sleep(0.2)
    os.kill(rank_process(job, 0), signal.SIGKILL)
    if waiting is not None:
        waiting.communicate(timeout=120)
    assert wait_for(job, env, timeout_s=120) == "FAILED"
    records = read_metrics(metrics_file)
    ends = [r for r in records if r["record"] == "run_end"]
    assert len(ends) == 1 and records[-1] is ends[0] and ends[0]["status"] == "failed", records[-2:]
    assert ends[0]["error"].startswith(("rank 0 (host n1, pid ", "the srun step ended")), ends[0]
