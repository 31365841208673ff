"""The real slurm/run_slurm.sh on a real SLURM cluster that slurm/testcluster.py starts here:
one node, then two nodes (network namespaces with their own hostnames and addresses)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import compare
from tests.records import read_metrics
from tests.slurm.jobs import (
    QUICK,
    REPO,
    ROOT_ONLY,
    layout,
    scontrol_field,
    slurm_env,
    submit,
    wait_for,
)

pytestmark = ROOT_ONLY


@pytest.mark.parametrize("cluster", [2], indirect=True)  # 2 tasks on one node: the srun test
@pytest.mark.parametrize(
    "framework,strategy", [("torch", "ddp"), ("torch", "fsdp2"), ("tf", "mwms")]
)
def test_two_tasks_train_and_compare_reads_them(cluster, framework, strategy, tmp_path):
    """sbatch of the script, a task on each of 2 nodes, one core each; compare reads the run."""
    env = slurm_env(tmp_path)
    extra = ["--set", f"torch.strategy={strategy}"] if framework == "torch" else []
    job = submit(
        [*layout(cluster), "--cpus-per-task=1", "--job-name=t", f"--output={tmp_path}/%x-%j.out"],
        [framework, "configs/mlp_adam.yaml", *QUICK, *extra],
        env,
    )
    state = wait_for(job, env)
    log = (tmp_path / f"t-{job}.out").read_text()
    assert state == "COMPLETED", log
    records = read_metrics(tmp_path / f"t-{job}" / "metrics.jsonl")
    start, end = records[0], records[-1]
    assert (start["framework"], start["strategy"], start["launcher"]) == (
        framework,
        strategy,
        "slurm",
    )
    assert start["hosts"] == ["n1", "n2"]
    assert [device.split(":")[0] for device in start["devices"]] == start["hosts"]
    assert start["threads"]["intra_op"] == 1  # --cpus-per-task reached the step (not 2 cores)
    assert end["status"] == "success" and end["epochs_completed"] == 2
    assert compare.main([str(tmp_path / f"t-{job}")]) == 0


def test_torchrun_variant_runs_one_agent_per_node(cluster, tmp_path):
    env = {**slurm_env(tmp_path), "SUITE_NPROC_PER_NODE": str(2 // cluster)}
    options = ["--nodes=1", "--ntasks=1"] if cluster == 1 else ["--nodes=2", "--ntasks-per-node=1"]
    job = submit(
        [*options, "--job-name=tr", f"--output={tmp_path}/%x-%j.out"],
        ["torchrun", "configs/mlp_adam.yaml", *QUICK],
        env,
    )
    assert wait_for(job, env) == "COMPLETED", (tmp_path / f"tr-{job}.out").read_text()
    start = read_metrics(tmp_path / f"tr-{job}" / "metrics.jsonl")[0]
    assert start["launcher"] == "torchrun" and start["world_size"] == 2
    assert start["hosts"] == (["n1", "n1"] if cluster == 1 else ["n1", "n2"])  # was ["n1"]


def test_an_impossible_request_fails_at_once(cluster, tmp_path):
    command = [
        "sbatch",
        "--gpus-per-node=4",
        "slurm/run_slurm.sh",
        "torch",
        "configs/mlp_adam.yaml",
    ]
    started = time.monotonic()
    done = subprocess.run(
        command, cwd=REPO, env=slurm_env(tmp_path), capture_output=True, text=True, timeout=30
    )
    assert done.returncode != 0 and time.monotonic() - started < 5
    assert "Requested node configuration is not available" in done.stderr


UNINTERRUPTED: dict[str, dict] = {}  # the requeue tests' reference: the final weights


@pytest.mark.parametrize("cluster", [1], indirect=True)  # once is enough
@pytest.mark.parametrize("variant", ["torch", "torchrun"])
def test_a_requeued_job_resumes_from_its_checkpoint(cluster, variant, tmp_path):
    """SIGUSR1 before the time limit, in the middle of epoch 2 (200 steps): checkpoint at the
    next step boundary (a step cadence makes the ranks vote after every step), exit 75,
    requeue, resume inside the epoch; the result is the uninterrupted run's, bit for bit.
    torchrun agents pass the signal on (torch_impl.agent)."""
    env = {**slurm_env(tmp_path), "SUITE_NPROC_PER_NODE": str(2 // cluster)}
    settings = [
        "configs/parity_sgd.yaml",
        "--set",
        "data.train_limit=12800",
        "--set",
        "train.epochs=3",
        "--set",
        "train.log_every_steps=0",
        "--set",
        "output.save_model=true",
        "--set",
        "torch.strategy=ddp",
        "--set",
        "train.checkpoint_every_steps=1000",  # none due: the vote after every step
    ]
    if "model" not in UNINTERRUPTED:  # the same run for both variants: made once
        whole = submit(
            ["--ntasks=2", "--job-name=whole", f"--output={tmp_path}/%x-%j.out"],
            ["torch", *settings],
            env,
        )
        assert wait_for(whole, env) == "COMPLETED"
        UNINTERRUPTED["model"] = torch.load(tmp_path / f"whole-{whole}" / "model.pt")
    tasks = ["--ntasks=2"] if variant == "torch" else [f"--nodes={cluster}", "--ntasks-per-node=1"]
    job = submit(
        [*tasks, "--job-name=rq", f"--output={tmp_path}/%x-%j.out"], [variant, *settings], env
    )
    metrics_file = tmp_path / f"rq-{job}" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics_file.is_file() and '"epoch"' in metrics_file.read_text()):
        assert time.monotonic() < deadline, "epoch 1 never finished"
        time.sleep(0.1)
    # What SLURM does before the time limit (--signal=B:USR1@180), done now.
    subprocess.run(["scancel", "--batch", "--signal=USR1", job], env=env, check=True)
    deadline = time.monotonic() + 120
    while scontrol_field(job, "Restarts", env) != "1":
        assert time.monotonic() < deadline, "the job was not requeued"
        time.sleep(0.2)
    # SLURM holds a requeued job for about two minutes (BeginTime); a cluster would wait. The
    # update must not race the requeue itself: moving StartTime in the same second once gave
    # "Job credential revoked" and a FAILED job. So wait until it is pending, a second more.
    while scontrol_field(job, "JobState", env) != "PENDING":
        assert time.monotonic() < deadline, "the requeued job never became pending"
        time.sleep(0.2)
    time.sleep(1.5)
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=env, check=True)
    assert wait_for(job, env) == "COMPLETED"
    log = (tmp_path / f"rq-{job}.out").read_text()
    assert "requeueing job" in log and "(restart 1)" in log
    ends = [r for r in read_metrics(metrics_file) if r["record"] == "run_end"]
    assert [e["status"] for e in ends] == ["aborted", "success"]
    assert "preempted (SIGUSR1): checkpointed step" in ends[0]["error"]
    assert ends[0]["epochs_completed"] < 3
    (resumed,) = [r for r in read_metrics(metrics_file) if r["record"] == "resume"]
    assert resumed["step"] % 200, resumed  # inside an epoch
    a = UNINTERRUPTED["model"]
    b = torch.load(tmp_path / f"rq-{job}" / "model.pt")
    assert all(torch.equal(a[name], b[name]) for name in a)


@pytest.mark.parametrize("cluster", [1], indirect=True)  # once is enough
def test_a_small_sweep_runs_and_its_manifest_lists_every_run(cluster, tmp_path):
    command = [
        sys.executable,
        "slurm/sweep.py",
        "--config",
        "configs/mlp_adam.yaml",
        "--frameworks",
        "torch,tf",
        "--strategies",
        "ddp,mwms",
        "--tasks",
        "1,2",
        "--results",
        str(tmp_path),
        "--name",
        "small",
        "--wait",
        *QUICK[:6],
    ]
    done = subprocess.run(
        command, cwd=REPO, env=slurm_env(tmp_path), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((tmp_path / "sweeps" / "small.json").read_text())
    cells = {(r["framework"], r["strategy"], r["tasks"]) for r in manifest["runs"]}
    assert cells == {("torch", "ddp", 1), ("torch", "ddp", 2), ("tf", "mwms", 1), ("tf", "mwms", 2)}
    assert all(r["state"] == "COMPLETED" for r in manifest["runs"])
    assert compare.main([str(tmp_path / "sweeps" / "small.json")]) == 0
    runs = [read_metrics(Path(r["result_dir"]) / "metrics.jsonl") for r in manifest["runs"]]
    for index in range(1, len(runs)):  # one after another: no two shared the cores
        assert runs[index][0]["time"] >= runs[index - 1][-1]["time"]


def test_the_script_outside_a_job_says_how_to_submit_it():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    done = subprocess.run(
        ["bash", "slurm/run_slurm.sh", "torch", "configs/mlp_adam.yaml"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "not inside a SLURM job" in done.stderr
    done = subprocess.run(
        ["bash", "slurm/run_slurm.sh", "jax", "x.yaml"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "unknown framework 'jax'" in done.stderr


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_srun_of_the_script_makes_each_task_one_rank(cluster, framework, tmp_path):
    """The form users type: `srun run_slurm.sh ...`, here 2 nodes x 2 tasks (1 x 2 on one)."""
    env = slurm_env(tmp_path)
    command = [
        "srun",
        f"--nodes={cluster}",
        "--ntasks-per-node=2",
        "--job-name=s",
        "--time=5",
        "slurm/run_slurm.sh",
        framework,
        "configs/mlp_adam.yaml",
        *QUICK,
    ]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (folder,) = tmp_path.glob("s-*")
    records = read_metrics(folder / "metrics.jsonl")
    start, end = records[0], records[-1]
    assert [r["record"] for r in records].count("run_start") == 1  # one run, not one per task
    assert (start["launcher"], start["world_size"]) == ("slurm", 2 * cluster)
    assert start["hosts"] == (["n1", "n1"] if cluster == 1 else ["n1", "n1", "n2", "n2"])
    assert end["status"] == "success" and end["epochs_completed"] == 2
    assert done.stdout.count(" step ") == 1  # the start line, from rank 0 only


def test_the_torchrun_variant_refuses_srun_with_a_reason(cluster, tmp_path):
    command = [
        "srun",
        "--ntasks=1",
        "--time=1",
        "slurm/run_slurm.sh",
        "torchrun",
        "configs/mlp_adam.yaml",
    ]
    done = subprocess.run(
        command, cwd=REPO, env=slurm_env(tmp_path), capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0 and "submit it with sbatch" in done.stderr
