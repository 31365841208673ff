"""TensorFlow's step split, from its own profiler read by xprof: the ops fall into the categories
by type and name scope, and on 2 real workers the parts of the MLP's and the CNN's step add up to
it, as torch's do (tests/torch/test_step_profile.py); a training run records the split of its
counted step in every epoch record."""

import json
import os
import subprocess
import sys

import pytest

from common.core.config import config_io
from common.launch.cluster import local_spec
from tests import run_store
from tests.records import read_metrics
from tf_impl import step_profile

SCOPES = ("loss_scale_optimizer", "adam")


@pytest.mark.parametrize(
    ("kind", "name", "part"),
    [
        ("CollectiveReduceV2", "adam/CollectiveReduceV2", "collectives"),
        ("CollectiveGatherV2", "CollectiveGatherV2", "collectives"),
        ("Sqrt", "adam/update_0/Sqrt", "optimizer"),
        ("Mul", "loss_scale_optimizer/mul", "optimizer"),
        ("GatherV2", "GatherV2_1", "input"),  # a step's samples from the preloaded tensors
        ("IteratorGetNext", "IteratorGetNext", "input"),
        ("GatherV2", "cnn/embedding/GatherV2", "compute"),  # inside the model
        ("_MklMatMul", "gradient_tape/mlp_1/fc2_1/MatMul/MatMul", "compute"),
        ("Mul", "adamw_like/mul", "compute"),  # another scope that only starts the same
    ],
)
def test_ops_fall_into_the_categories_by_type_and_scope(kind, name, part):
    assert step_profile.part_of(kind, name, SCOPES) == part


def test_the_parts_are_summed_by_category():
    ops = [
        ("CollectiveReduceV2", "adam/CollectiveReduceV2", 0.004),
        ("Sqrt", "adam/Sqrt", 0.001),
        ("_MklMatMul", "mlp/MatMul", 0.002),
        ("_MklMatMul", "mlp/MatMul_1", 0.0005),
    ]
    found = step_profile.split(ops, ("adam",), wall_s=0.008)
    assert (found.collectives_s, found.optimizer_s, found.compute_s) == (0.004, 0.001, 0.0025)
    assert found.input_s == 0.0 and found.framework_s == 0.0 and found.wall_s == 0.008


@pytest.mark.scaling  # the parts against the step's wall time: make test-scaling
@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_a_two_worker_step_is_split_and_its_parts_add_up_to_it(model):
    command = [
        *[sys.executable, "-m", "common.launch", "--nproc", "2", "--", sys.executable],
        *["-m", "tf_impl.step_profile", "--set", f"model.name={model}"],
        *["--set", "data.train_limit=1280", "--steps", "8"],
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"}  # TensorFlow says where it profiles
    done = subprocess.run(command, capture_output=True, text=True, timeout=280, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    said = (done.stdout + done.stderr).splitlines()
    profiled = {line.split("]")[0] for line in said if "Profiler session started" in line}
    assert profiled == {"[rank 0"}  # the chief alone: rank 1's heap is not risked
    (line,) = [line for line in done.stdout.splitlines() if "STEP_PROFILE " in line]
    found = json.loads(line.split("STEP_PROFILE ", 1)[1])
    parts = found["ms_per_step"]
    assert set(parts) == {"compute", "optimizer", "input", "collectives", "the rest"}
    assert all(value >= 0 for value in parts.values())
    assert parts["collectives"] > 0 and parts["compute"] > 0 and parts["optimizer"] > 0
    assert sum(parts.values()) == pytest.approx(found["mean_ms"], rel=0.05)


def test_only_the_chief_profiles_the_counted_step():
    """TensorFlow's profiler corrupts the heap of a worker other than the first now and then
    (`step_profile.splits_here`); the records, and so the split, are the chief's."""
    net = config_io.load_config(None, ["model.name=mlp"]).net()
    resnet = config_io.load_config(None, ["model.name=resnet8"]).net()
    chief, other = (local_spec(2, rank, master_port=1, tf_ports=(2, 3)) for rank in (0, 1))
    assert step_profile.splits_here(net, chief) and not step_profile.splits_here(net, other)
    assert not step_profile.splits_here(resnet, chief)  # its forward all-reduces (`UNSAFE`)
    assert step_profile.splits_here(resnet, local_spec(1, master_port=1, tf_ports=(2,)))


def test_a_run_records_the_split_of_its_counted_step(tmp_path_factory):
    folder = run_store.run(tmp_path_factory, "tf_impl.train", "local", 2)  # SMALL: 2 epochs
    epochs = [r for r in read_metrics(folder / "metrics.jsonl") if r["record"] == "epoch"]
    splits = [epoch["step_split"] for epoch in epochs]
    assert splits[0] is not None and splits[0] == splits[1]  # the launch's counted step
    split = splits[0]
    assert split["source"] == step_profile.SOURCE
    assert split["collectives_s"] > 0 and split["compute_s"] > 0 and split["framework_s"] == 0
    parts = sum(split[f"{part}_s"] for part in step_profile.PARTS)
    assert parts <= split["wall_s"] * 1.05  # the rest is what the ops leave of the wall time


def test_tracing_a_forward_that_all_reduces_is_refused_with_one_line(tmp_path):
    """ResNet-8's global batch norm on 2 workers: TensorFlow's profiler corrupted the heap."""
    command = [
        *[sys.executable, "-m", "common.launch", "--nproc", "2", "--", sys.executable],
        *["-m", "tf_impl.train", "--config", "configs/resnet8_sgd.yaml"],
        *["--set", "output.profile_steps=3", "--set", f"output.dir={tmp_path}", "--quiet"],
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "output.profile_steps=3: TensorFlow's profiler corrupted the heap" in done.stdout
    assert not list(tmp_path.iterdir())  # refused before any run folder


def test_more_than_one_profiled_step_for_the_split_is_refused(tmp_path):
    """output.split_steps is torch's: each TensorFlow profiled step is a profiler session."""
    command = [
        *[sys.executable, "-m", "tf_impl.train", "--config", "configs/mlp_adam.yaml"],
        *["--set", "output.split_steps=3", "--set", f"output.dir={tmp_path}", "--quiet"],
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "output.split_steps=3: TensorFlow profiles one step" in done.stdout + done.stderr
    assert not list(tmp_path.iterdir())  # refused before any run folder
