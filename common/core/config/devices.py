"""Which device a rank takes and how many threads it runs: pure decisions, made before any
process group or strategy exists, so that a launch that cannot work stops at once (exit 2)
with the fix, instead of training on the wrong device or failing inside NCCL.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from common.core.config.config import Config
from common.launch.cluster import ClusterSpec

# train.eval_batch_size=0: the global evaluation batch by framework and device. Measured here
# (CNN, the 10,000 test images, one process on 2 cores, median of 3 runs, seconds per
# evaluation): torch 100: 2.04, 250: 3.43, 1000: 4.16; TensorFlow 100: 1.37, 250: 1.20,
# 1000: 1.11; loss and accuracy were equal to 6 digits at every size. With torch's
# convolutions channels-last (on a Zen 5 host): 50: 1.05, 100: 1.01, 200: 2.05, 1000: 2.89
# (NCHW there: 100: 2.09, 1000: 4.89), so 100 stays. On GPUs 1000 on both
# sides, not measured (no GPU here): a large batch keeps a GPU busy.
EVAL_BATCH = {
    ("torch", "cpu"): 100,
    ("tf", "cpu"): 1000,
    ("torch", "gpu"): 1000,
    ("tf", "gpu"): 1000,
}

# How to get a build of each framework that sees GPUs (the suite's constraints pin CPU torch).
CUDA_BUILDS = {
    "torch": "install a CUDA build of torch (pip install torch==<version> --index-url "
    "https://download.pytorch.org/whl/cu<CUDA version, e.g. 128>)",
    "tf": "install TensorFlow with its CUDA libraries (pip install 'tensorflow[and-cuda]'); "
    "plain `tensorflow` wheels on a GPU node train on the CPU",
}


@dataclass(frozen=True)
class Placement:
    device_type: str  # "cpu" or "gpu"
    gpu_index: int  # among the GPUs this process sees; 0 on the CPU


def ranks_per_device_set(spec: ClusterSpec) -> int:
    """How many ranks share the GPUs this process sees: 1 when SLURM (or slurm/task.sh) gave
    each task its own, else every rank of the node."""
    return 1 if spec.gpus_bound_per_task else spec.local_world_size


def place(*, framework: str, requested: str, visible_gpus: int, spec: ClusterSpec) -> Placement:
    """The device of this rank for dist.device=`requested` (auto, cpu, gpu), given the GPUs
    `framework` sees. Raises ValueError naming the problem and its fix."""
    if requested == "cpu" or (requested == "auto" and visible_gpus == 0):
        return Placement("cpu", 0)
    if visible_gpus == 0:
        raise ValueError(
            f"dist.device=gpu but {framework} sees no GPU on {spec.node}: "
            f"{CUDA_BUILDS[framework]}, or set dist.device=cpu"
        )
    sharing = ranks_per_device_set(spec)
    if sharing > visible_gpus:
        raise ValueError(
            f"{sharing} ranks on {spec.node} but {framework} sees {visible_gpus} GPU(s); two "
            'ranks on one GPU fail in NCCL ("Duplicate GPU detected"): start at most '
            f"{visible_gpus} rank(s) per node, or set dist.device=cpu"
        )
    return Placement("gpu", 0 if sharing == 1 else spec.local_rank)


def available_cores() -> int:
    """The cores this process may run on (its affinity mask: a cpuset or taskset narrows it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_group(cgroups: str | None = None, root: Path = Path("/sys/fs/cgroup")) -> Path | None:
    """The folder of this process's cgroup under the cpu controller (cgroup v1's cpu hierarchy,
    or v2's one), None where /proc/self/cgroup cannot be read or names none. `cgroups`: the
    text of /proc/self/cgroup."""
    try:
        text = cgroups if cgroups is not None else Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):  # v1
            folder = root / controllers / path.lstrip("/")
            return folder if folder.is_dir() else root / "cpu" / path.lstrip("/")
        if controllers == "":  # v2: one hierarchy
            return root / path.lstrip("/")
    return None


def cpu_quota(cgroups: str | None = None, root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The cores this process's cgroup may use by its CPU quota (cgroup v1's cpu controller,
    or v2's cpu.max), None where it has none or the files cannot be read. `cgroups`: the text
    of /proc/self/cgroup."""
    folder = cpu_group(cgroups, root)
    try:
        if folder is not None and (folder / "cpu.cfs_quota_us").exists():  # v1
            limit = int((folder / "cpu.cfs_quota_us").read_text())
            period = int((folder / "cpu.cfs_period_us").read_text())
            return limit / period if limit > 0 else None
        if folder is not None:  # v2
            limit_text, period_text = (folder / "cpu.max").read_text().split()
            return None if limit_text == "max" else int(limit_text) / int(period_text)
    except (OSError, ValueError):
        return None
    return None


def threads_per_rank(spec: ClusterSpec, available_cores: int) -> int:
    """Intra-op threads of one rank. `available_cores`: the cores this process may run on
    (its affinity mask). Under srun each task is a rank, and SLURM_CPUS_PER_TASK is its own
    share (the mask can be the whole node when the cluster does not bind tasks to cores);
    ranks forked inside one task (common.launch, torchrun) split that task's cores."""
    cores = available_cores
    if spec.cpus_per_task:
        cores = min(cores, spec.cpus_per_task)
    sharing = 1 if spec.launcher == "slurm" and spec.cpus_per_task else spec.local_world_size
    return max(1, cores // sharing)


def inter_op_threads(intra_op: int) -> int:
    """Inter-op threads, the same rule on both sides: these models have at most 2 independent
    ops at a time (the data input and the step)."""
    return min(2, intra_op)


def resolve_eval_batch(cfg: Config, framework: str, device_type: str) -> Config:
    """The config with train.eval_batch_size=0 (auto) replaced by EVAL_BATCH's choice, so that
    the run's records say what ran; an explicit size is kept."""
    if cfg.train.eval_batch_size:
        return cfg
    chosen = EVAL_BATCH[(framework, device_type)]
    return cfg.model_copy(
        update={"train": cfg.train.model_copy(update={"eval_batch_size": chosen})}
    )


# The CPU instructions that compute a reduced precision natively (Linux /proc/cpuinfo: x86
# "flags", Arm "Features"). Without them the frameworks emulate it in fp32 arithmetic, many
# times slower than fp32 itself (bf16 GEMMs at about 9 GFLOP/s on 1 thread of an AMD EPYC
# family 25 model 1 without AVX-512, fp32 at 62): its timings measure the emulation.
NATIVE_ON_CPU = {
    "bf16": frozenset({"avx512_bf16", "amx_bf16", "bf16"}),
    "fp16": frozenset({"avx512_fp16", "amx_fp16", "fphp"}),
}


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first processor's feature flags; empty where they cannot be read."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def emulated_on_cpu(precision: str, cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU lacks the instructions for `precision` ("fp32", "bf16", "fp16"), so
    that a framework emulates it; False for fp32, and where the flags cannot be read."""
    needed, flags = NATIVE_ON_CPU.get(precision, frozenset()), cpu_flags(cpuinfo)
    return bool(needed) and bool(flags) and not needed & flags
