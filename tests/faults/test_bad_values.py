"""Values that once passed validation and crashed later (or did something else than asked): each
now ends the program with exit 2, one line naming the variable or key and the fix, before any
run folder exists. Real processes, the way a launcher starts them."""

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.launching import in_private_mount

TORCHRUN = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
TORCHRUN_ADDR = {**TORCHRUN, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"}
# What a Kubeflow TrainJob sets in a pod started without torchrun (common.launch.kubeflow).
TRAINJOB = {
    "PET_NNODES": "2",
    "PET_NPROC_PER_NODE": "1",
    "PET_NODE_RANK": "0",
    "PET_MASTER_ADDR": "mnist-node-0-0.mnist",
    "PET_MASTER_PORT": "29500",
}
PRESET = str(Path(__file__).resolve().parents[2] / "configs" / "mlp_adam.yaml")
SMALL = ["data.train_limit=1280", "data.test_limit=500", "train.epochs=1"]


def worker_config(workers: str) -> str:
    return json.dumps({"cluster": {"worker": json.loads(workers)}, "task": {"index": 0}})


def start(module: str, tmp_path, env: dict[str, str], *settings: str, memory_gib: int = 0):
    """The program, from the repository; `output.dir=` (empty) would write into tmp_path."""
    command = [sys.executable, "-m", module, "--config", PRESET, "--quiet"]
    for setting in [*SMALL, f"output.dir={tmp_path / 'out'}", "output.run_name=r", *settings]:
        command += ["--set", setting]
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "TF_CONFIG")}
    limit = memory_gib << 30

    def cap_memory() -> None:  # address space: a batch that pads to GiBs fails at once
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.run(
        command,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=cap_memory if limit else None,
    )


def refused(done, *words: str) -> None:
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in errors[0], errors[0]


ENVIRONMENTS = {
    "port above 65535": ({**TORCHRUN_ADDR, "MASTER_PORT": "99999"}, ["MASTER_PORT=99999"]),
    "negative port": ({**TORCHRUN_ADDR, "MASTER_PORT": "-1"}, ["MASTER_PORT=-1", "1..65535"]),
    "workers not a list": (
        {**TORCHRUN_ADDR, "TF_CONFIG": worker_config("5")},
        ["TF_CONFIG", "cluster.worker"],
    ),
    "worker without a port": (
        {**TORCHRUN_ADDR, "TF_CONFIG": worker_config('["localhost", "localhost:2"]')},
        ["TF_CONFIG", "'localhost'", "host:port"],
    ),
    "worker not a string": (
        {**TORCHRUN_ADDR, "TF_CONFIG": worker_config("[7, 8]")},
        ["TF_CONFIG", "7", "host:port"],
    ),
    "negative cores": ({"SLURM_CPUS_PER_TASK": "-5"}, ["SLURM_CPUS_PER_TASK=-5", "--cpus"]),
    "trainjob node rank": (
        {**TRAINJOB, "PET_NODE_RANK": "abc"},
        ["PET_NODE_RANK='abc'", "index of 0 or more"],
    ),
}


@pytest.mark.parametrize("case", sorted(ENVIRONMENTS))
def test_bad_launch_variables_are_named(case, tmp_path):
    env, words = ENVIRONMENTS[case]
    done = start("torch_impl.train", tmp_path, env)
    refused(done, *words)
    assert not (tmp_path / "out").exists()


SETTINGS = {
    "timeout": ("dist.timeout_s=1e300", ["dist.timeout_s", "30 days"]),
    "startup timeout": ("dist.startup_timeout_s=1e300", ["dist.startup_timeout_s", "30 days"]),
    "seed": ("train.seed=100000000000000000000000", ["train.seed", "0..4294967295"]),
    "empty output.dir": ("output.dir=", ["output.dir is empty", "output.dir=results"]),
    "micro-batches": (
        "train.accumulation_steps=3",
        ["train.accumulation_steps=3 does not divide the per-rank batch of 64", "[1, 2, 4, 8"],
    ),
    "checkpointing without blocks": (
        "model.activation_checkpointing=blocks",
        ["mlp has no blocks to checkpoint", "resnet8", "model.activation_checkpointing=none"],
    ),
}


@pytest.mark.parametrize("case", sorted(SETTINGS))
@pytest.mark.parametrize("module", ["torch_impl.train", "tf_impl.train"])
def test_bad_settings_are_refused_before_a_run_folder_exists(module, case, tmp_path):
    setting, words = SETTINGS[case]
    done = start(module, tmp_path, {}, setting)
    refused(done, *words)
    assert not (tmp_path / "out").exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize("module", ["torch_impl.train", "tf_impl.train"])
def test_a_refused_launch_never_imports_its_framework(module, tmp_path):
    """A bad setting is refused before the framework's import (TensorFlow's takes 3 s here, and
    prints its start-up lines): `python -X importtime` lists every module the program imported."""
    command = [sys.executable, "-X", "importtime", "-m", module, "--set", "train.seed=-1"]
    command += ["--set", f"output.dir={tmp_path}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "numpy" in imported  # the list is there
    assert not {"torch", "tensorflow", "keras"} & imported, sorted(imported)
    assert done.stderr.splitlines()[-1].startswith("error: train.seed must be in 0..4294967295")


def test_a_key_given_twice_in_a_preset_is_refused_with_both_lines(tmp_path):
    preset = tmp_path / "twice.yaml"
    preset.write_text("optim:\n  name: sgd\n  lr: 0.01\n  lr: 0.1\n")
    command = [sys.executable, "-m", "torch_impl.train", "--config", str(preset)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    refused(done, "twice.yaml", "'lr' is given twice, on lines 3 and 4")


def test_an_eval_batch_above_the_test_set_takes_only_the_test_set(tmp_path):
    """train.eval_batch_size=1e9 once padded a 7.45 GiB batch; the batch is bounded by the
    test set, so the run fits where a whole-test-set batch fits (here: 6 GiB of address space,
    where the padded batch alone took 12 GiB)."""
    done = start("torch_impl.train", tmp_path, {}, "train.eval_batch_size=1000000000", memory_gib=6)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="a read-only bind mount needs root")
@pytest.mark.parametrize("module", ["torch_impl.train", "tf_impl.train"])
def test_a_read_only_run_folder_on_resume_is_named_once(module, tmp_path):
    (tmp_path / "out" / "r").mkdir(parents=True)
    command = [sys.executable, "-m", "common.launch", "--nproc", "2", "--"]
    command += [sys.executable, "-m", module, "--config", PRESET, "--quiet", "--resume"]
    for setting in [*SMALL, f"output.dir={tmp_path / 'out'}", "output.run_name=r"]:
        command += ["--set", setting]
    mount = f"mount --bind -o ro {tmp_path / 'out'} {tmp_path / 'out'}"
    done = in_private_mount(mount, command, timeout=180)
    output = done.stdout + done.stderr
    said = [line for line in output.splitlines() if line.split("] ")[-1].startswith("error:")]
    assert done.returncode == 2, output
    assert len(said) == 1 and "Traceback" not in output, output
    assert "Read-only file system" in said[0] and str(tmp_path / "out" / "r") in said[0], said
    last = done.stderr.strip().splitlines()[-1]  # the rank that found it is the one named
    assert last.startswith("[launch] rank 0 failed with exit code 2"), last
    assert "rank 1 only noticed it" in last, last
