"""The step profile for real: fsdp2 on 2 local ranks, its time split by category."""

import json
import subprocess
import sys
from dataclasses import dataclass

import pytest

from torch_impl import traffic


def test_events_fall_into_the_categories_by_name():
    assert traffic.category("c10d::_allgather_base_") == "collectives"
    assert traffic.category("gloo:all_reduce") == "collectives"
    assert traffic.category("FSDP::all_gather (fc1)") == "waiting"
    assert traffic.category("FSDP::post_backward_reduce (fc2)") == "waiting"
    assert traffic.category("FSDP::all_gather_copy_out (fc1)") == "FSDP + DTensor"
    assert traffic.category("FullyShardedDataParallel._post_backward_hook") == "waiting"
    assert traffic.category("FullyShardedDataParallel._post_forward") == "FSDP + DTensor"
    assert traffic.category("aten::addmm") == "compute"
    assert traffic.category("Optimizer.step#Adam.step") == "optimizer"
    assert traffic.category("autograd::engine::evaluate_function: AddmmBackward0") == "the rest"


@dataclass
class Event:
    """What split_seconds reads of a profiler event: its name, own time (us) and caller."""

    name: str
    self_cpu_time_total: float
    cpu_parent: "Event | None" = None
    is_async: bool = False  # a collective the backend runs on its own thread is async


def test_an_aten_op_is_its_caller_s_when_a_range_of_fsdp_or_the_optimizer_calls_it():
    copy_out = Event("FSDP::all_gather_copy_out (fc1)", 100)
    step = Event("Optimizer.step#Adam.step", 50)
    backward = Event("autograd::engine::evaluate_function: AddmmBackward0", 10)
    events = [
        copy_out,
        Event("aten::split_with_sizes_copy", 300, copy_out),  # FSDP's copy out of a gather
        step,
        Event("aten::_foreach_addcdiv_", 400, Event("aten::_foreach_div", 0, step)),
        backward,
        Event("aten::mm", 2000, backward),  # the model's math, under the autograd engine
        Event("c10d::allreduce_", 70),
    ]
    seconds = traffic.split_seconds(events)
    assert seconds["FSDP + DTensor"] == pytest.approx(400e-6)
    assert seconds["optimizer"] == pytest.approx(450e-6)
    assert seconds["compute"] == pytest.approx(2000e-6)
    assert seconds["collectives"] == pytest.approx(70e-6) and seconds["waiting"] == 0


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
    assert set(parts) == {
        "collectives",
        "waiting",
        "FSDP + DTensor",
        "optimizer",
        "compute",
        "the rest",
    }
    assert all(value >= 0 for value in parts.values())
    assert parts["collectives"] > 0 and parts["waiting"] > 0 and parts["compute"] > 0
    assert sum(parts.values()) == pytest.approx(found["mean_ms"], rel=0.05)
