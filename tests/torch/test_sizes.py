"""The model-size axis on torch, with real 2-rank gloo runs: fsdp1 and fsdp2 shard the same
units; DDP and FSDP stay bitwise equal at a second model size; memory above the baseline
counts the model."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import compare
from tests.records import read_metrics
from tests.reference import net
from tests.torch.conftest import train_command
from torch_impl.parallel import wrap_units

ODD = ["data.name=synthetic", "model.hidden=[301, 203, 101]"]  # odd rows: uneven shards
PROBE = Path(__file__).with_name("wrapping_probe.py")


def units_seen(*overrides: str) -> dict:
    command = [sys.executable, "-m", "common.launch", "--nproc", "2", "--"]
    command += [sys.executable, str(PROBE), *overrides]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("[rank 0] UNITS "))
    return json.loads(line.removeprefix("[rank 0] UNITS "))


@pytest.mark.parametrize(
    "wrap, expected",
    [
        (["torch.wrap=layer"], ["fc1", "fc2", "fc3", "fc4"]),
        (["torch.wrap=size", "torch.auto_wrap_min_params=50000"], ["fc1", "fc2"]),
    ],
)
def test_fsdp1_and_fsdp2_shard_the_same_units(wrap, expected):
    seen = units_seen(*ODD, *wrap)
    for strategy in ("fsdp2", "fsdp1"):
        assert sorted(set(seen[strategy]) - {"<root>"}) == expected, strategy
        for name in expected:  # each unit holds its own layer's parameters, nothing else
            assert seen[strategy][name]["params"] == [f"{name}.bias", f"{name}.weight"]
    rows = {"fc1": 301, "fc2": 203, "fc3": 101, "fc4": 10}
    for name in expected:  # fsdp2: dim-0 shards, rank 0 keeps ceil(rows / 2) of them
        assert seen["fsdp2"][name]["sharded_rows"]
        assert seen["fsdp2"][name]["local_rows"] == [math.ceil(rows[name] / 2)] * 2
    sizes = {"fc1": 784 * 301 + 301, "fc2": 301 * 203 + 203, "fc3": 203 * 101 + 101}
    for name in set(expected) & set(sizes):  # fsdp1: half of the unit's flat parameter, which
        # with use_orig_params pads each parameter to 16 bytes (measured: fc3 10,303, not 10,302)
        half = math.ceil(sizes[name] / 2)
        assert half <= seen["fsdp1"][name]["local_numel"] <= half + 4, name


def test_wrapping_units_are_a_decision_on_the_layer_sizes():
    model = net(hidden=(301, 203, 101))
    assert wrap_units(model, "layer", 1) == ["fc1", "fc2", "fc3", "fc4"]
    assert wrap_units(model, "size", 61_306) == ["fc1", "fc2"]  # fc2 holds exactly 61,306
    assert wrap_units(model, "size", 61_307) == ["fc1"]
    assert wrap_units(net("cnn"), "size", 100_000) == ["fc1"]
    resnet = ["conv1", "bn1", "block1", "block2", "block3", "fc"]  # a block is one unit
    assert wrap_units(net("resnet8"), "layer", 1) == resnet
    assert wrap_units(net("resnet8"), "size", 10_000) == ["block2", "block3"]


@pytest.fixture(scope="module")
def odd_size_runs(tmp_path_factory):
    """ddp, fsdp2, fsdp1 on 2 ranks at a second model size (odd widths), synthetic data."""
    root = tmp_path_factory.mktemp("odd")
    for strategy in ("ddp", "fsdp2", "fsdp1"):
        settings = [
            *ODD,
            "data.train_limit=1024",
            "data.test_limit=256",
            "train.epochs=2",
            "model.dropout=false",
            "optim.name=adam",
            f"torch.strategy={strategy}",
            "output.save_model=true",
            f"output.dir={root}",
            f"output.run_name={strategy}",
        ]
        done = subprocess.run(
            train_command(2, settings, ["--quiet"]), capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stdout + done.stderr
    return root


def test_ddp_and_fsdp_agree_bitwise_at_a_second_size(odd_size_runs):
    ddp = torch.load(odd_size_runs / "ddp" / "model.pt")
    assert ddp["fc1.weight"].shape == (301, 784) and ddp["fc4.weight"].shape == (10, 101)
    for strategy in ("fsdp2", "fsdp1"):
        other = torch.load(odd_size_runs / strategy / "model.pt")
        assert other.keys() == ddp.keys()
        assert all(torch.equal(other[name], ddp[name]) for name in ddp), strategy
    records = read_metrics(odd_size_runs / "ddp" / "metrics.jsonl")
    epochs = [r for r in records if r["record"] == "epoch"]
    assert records[0]["dataset"] == "synthetic" and records[0]["model_params"] == 319_215
    assert epochs[-1]["val_accuracy"] > 0.3  # synthetic labels are learnable (chance: 0.1)


def _memory(run_dir: Path) -> dict:
    records = read_metrics(run_dir / "metrics.jsonl")
    return [r for r in records if r["record"] == "epoch"][-1]["memory"][0]


def test_memory_above_the_baseline_counts_the_model(run_torch):
    """One process, Adam, a small and a 5.8M-parameter MLP: the peak above the baseline is at
    least what the rank's state holds, and grows by at least the state's growth."""
    held = {}
    for name, hidden in (("small", "[64]"), ("big", "[2048, 2048]")):
        _, folder = run_torch(
            name, 0, "data.name=synthetic", f"model.hidden={hidden}", "torch.strategy=single"
        )
        held[name] = _memory(folder)
    state = {
        name: m["param_bytes"] + m["grad_bytes"] + m["optim_bytes"] for name, m in held.items()
    }
    assert state["big"] == 4 * 4 * 5_824_522  # fp32 parameters, gradients, 2 Adam moments
    for name, memory in held.items():
        assert memory["peak_counts"] == "process peak RSS during the epoch (VmHWM)"
        assert 0 < memory["baseline_bytes"] < memory["peak_bytes"]
        above = memory["peak_above_baseline_bytes"]
        assert above == memory["peak_bytes"] - memory["baseline_bytes"]
        assert above >= state[name], name
    growth = held["big"]["peak_above_baseline_bytes"] - held["small"]["peak_above_baseline_bytes"]
    assert growth >= state["big"] - state["small"]
    # compare.py draws these two sizes as one series against parameter count
    root = folder.parent
    assert compare.main([str(root), "--out", str(root / "report")]) == 0
    written = json.loads((root / "report" / "report.json").read_text())
    assert [row["params"] for row in written["model_sizes"]] == [50_890, 5_824_522]
    assert (root / "report" / "size.png").stat().st_size > 10_000
    assert "## Model-size axis" in (root / "report" / "report.md").read_text()
