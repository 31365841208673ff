"""The device and thread decisions (`common.core.config.devices`), with faked device counts and
faked
launch environments: what a GPU node or a SLURM step would show, without one."""

import pytest

from common.core.config import devices
from common.launch import environment
from tests.common.test_cluster import slurm_env


def torchrun_env(local_world=4, **extra):
    return {
        "RANK": "1",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": str(local_world),
        "LOCAL_WORLD_SIZE": str(local_world),
        "MASTER_PORT": "29500",
        **extra,
    }


def place(requested, visible, env, framework="torch"):
    spec = environment.from_environment(env)
    return devices.place(framework=framework, requested=requested, visible_gpus=visible, spec=spec)


def test_auto_takes_the_gpu_of_the_local_rank_and_the_cpu_without_one():
    assert place("auto", 4, torchrun_env()) == devices.Placement("gpu", 1)
    assert place("auto", 0, torchrun_env()) == devices.Placement("cpu", 0)
    assert place("cpu", 4, torchrun_env()) == devices.Placement("cpu", 0)


@pytest.mark.parametrize(
    "framework, fix", [("torch", "download.pytorch.org/whl/cu"), ("tf", "tensorflow[and-cuda]")]
)
def test_gpu_asked_but_not_seen_names_the_framework_and_its_cuda_build(framework, fix):
    with pytest.raises(ValueError, match=f"dist.device=gpu but {framework} sees no GPU") as error:
        place("gpu", 0, torchrun_env(), framework)
    assert fix in str(error.value) and "dist.device=cpu" in str(error.value)


@pytest.mark.parametrize("requested", ["auto", "gpu"])
def test_more_local_ranks_than_gpus_are_refused_before_nccl(requested):
    with pytest.raises(ValueError, match=r"4 ranks on .* sees 2 GPU\(s\).*Duplicate GPU"):
        place(requested, 2, torchrun_env(local_world=4))


def test_a_task_with_its_own_gpu_takes_it_whatever_its_local_rank():
    # slurm/task.sh narrowed CUDA_VISIBLE_DEVICES to the task's GPU, or --gpus-per-task did
    for extra in ({"SUITE_TASK_GPU_BOUND": "1"}, {"SLURM_GPUS_PER_TASK": "1"}):
        assert place("auto", 1, slurm_env(3, 1, "gpu-02", **extra)) == devices.Placement("gpu", 0)
    # without either, the 2 tasks of gpu-02 see the same single GPU: refused
    with pytest.raises(ValueError, match="2 ranks on gpu-02 but torch sees 1 GPU"):
        place("auto", 1, slurm_env(3, 1, "gpu-02"))


def threads(env, available):
    return devices.threads_per_rank(environment.from_environment(env), available)


def test_threads_follow_the_slurm_allocation():
    # srun gave each of the node's 2 tasks 4 cores: each rank runs 4, not 4 / 2
    assert threads(slurm_env(3, 1, "gpu-02", SLURM_CPUS_PER_TASK="4"), available=4) == 4
    # a cluster without task binding shows the whole node: the allocation still decides
    assert threads(slurm_env(3, 1, "gpu-02", SLURM_CPUS_PER_TASK="4"), available=64) == 4
    # srun without --cpus-per-task: the node's tasks split what they see
    assert threads(slurm_env(3, 1, "gpu-02"), available=8) == 4


def test_ranks_forked_inside_one_task_split_its_cores():
    assert threads(torchrun_env(local_world=4, SLURM_CPUS_PER_TASK="16"), available=16) == 4
    assert threads(torchrun_env(local_world=4), available=2) == 1  # never 0
    assert threads({}, available=2) == 2  # one process alone


def test_inter_op_threads_are_at_most_two():
    assert [devices.inter_op_threads(n) for n in (1, 2, 8)] == [1, 2, 2]


def task_sh(**env):
    """slurm/task.sh for real, in a bare environment: what CUDA_VISIBLE_DEVICES and the bound
    mark its command sees."""
    import os
    import subprocess
    from pathlib import Path

    script = Path(__file__).parents[2] / "slurm" / "task.sh"
    show = 'echo "${CUDA_VISIBLE_DEVICES:-}|${SUITE_TASK_GPU_BOUND:-}"'
    done = subprocess.run(
        ["bash", str(script), "bash", "-c", show],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_task_sh_gives_each_task_its_own_gpu_and_leaves_extra_tasks_unbound():
    assert task_sh(CUDA_VISIBLE_DEVICES="4,5", SLURM_LOCALID="1") == "5|1"
    assert task_sh(CUDA_VISIBLE_DEVICES="4,5", SLURM_LOCALID="2") == "4,5|"  # place() refuses
    assert task_sh(CUDA_VISIBLE_DEVICES="7", SLURM_LOCALID="1", SLURM_GPUS_PER_TASK="1") == "7|1"
    assert task_sh(SLURM_LOCALID="1") == "|"  # no GPUs at all


def test_auto_eval_batch_is_each_frameworks_fastest_on_the_device_and_is_recorded():
    from common.core.config import config_io

    auto = config_io.load_config(None, [])
    assert auto.train.eval_batch_size == 0
    assert devices.resolve_eval_batch(auto, "torch", "cpu").train.eval_batch_size == 100
    assert devices.resolve_eval_batch(auto, "tf", "cpu").train.eval_batch_size == 1000
    assert devices.resolve_eval_batch(auto, "torch", "gpu").train.eval_batch_size == 1000
    chosen = config_io.load_config(None, ["train.eval_batch_size=250"])
    assert devices.resolve_eval_batch(chosen, "torch", "cpu").train.eval_batch_size == 250


@pytest.mark.parametrize(
    ("cgroups", "files", "cores"),
    [
        ("1:cpu:/suite-n1\n0::/\n", {"cpu/suite-n1/cpu.cfs_quota_us": "25000"}, 0.25),
        ("2:cpu,cpuacct:/job\n", {"cpu,cpuacct/job/cpu.cfs_quota_us": "150000"}, 1.5),
        ("1:cpu:/\n", {"cpu/cpu.cfs_quota_us": "-1"}, None),  # v1 without a quota
        ("0::/pod\n", {"pod/cpu.max": "50000 100000"}, 0.5),  # v2
        ("0::/\n", {"cpu.max": "max 100000"}, None),
        ("1:cpu:/gone\n", {}, None),  # unreadable: nothing made up
    ],
)
def test_a_cpu_quota_is_read_as_cores(tmp_path, cgroups, files, cores):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
        if name.endswith("cfs_quota_us"):
            (path.parent / "cpu.cfs_period_us").write_text("100000\n")
    assert devices.cpu_quota(cgroups, root=tmp_path) == cores
