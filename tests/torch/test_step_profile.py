"""The step profile for real: fsdp2 on 2 local ranks, its time split by category."""

import json
import subprocess
import sys

import pytest

from torch_impl import step_profile


def test_events_fall_into_the_categories_by_name():
    assert step_profile.category("c10d::_allgather_base_") == "collectives"
    assert step_profile.category("gloo:all_reduce") == "collectives"
    assert step_profile.category("FSDP::all_gather (fc1)") == "waiting"
    assert step_profile.category("FSDP::post_backward_reduce (fc2)") == "waiting"
    assert step_profile.category("FSDP::all_gather_copy_out (fc1)") == "FSDP + DTensor"
    assert step_profile.category("FullyShardedDataParallel._post_backward_hook") == "waiting"
    assert step_profile.category("FullyShardedDataParallel._post_forward") == "FSDP + DTensor"
    assert step_profile.category("aten::addmm") == "compute"
    assert step_profile.category("Optimizer.step#Adam.step") == "the rest"


def test_an_fsdp2_step_is_split_and_its_parts_add_up_to_it():
    command = [
        sys.executable,
        "-m",
        "common.launch",
        "--nproc",
        "2",
        "--",
        sys.executable,
        "-m",
        "torch_impl.step_profile",
        "--set",
        "torch.strategy=fsdp2",
        "--set",
        "data.train_limit=1280",
        "--steps",
        "8",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = [line for line in done.stdout.splitlines() if "STEP_PROFILE " in line]
    found = json.loads(line.split("STEP_PROFILE ", 1)[1])
    parts = found["ms_per_step"]
    assert set(parts) == {"collectives", "waiting", "FSDP + DTensor", "compute", "the rest"}
    assert all(value >= 0 for value in parts.values())
    assert parts["collectives"] > 0 and parts["waiting"] > 0 and parts["compute"] > 0
    assert sum(parts.values()) == pytest.approx(found["mean_ms"], rel=0.05)
