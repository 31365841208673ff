"""Memory at N (torch_impl.memory_plan): one rank's tensors at world sizes that were not run,
from torch's trackers over a fake process group, against what the strategies' arithmetic says."""

import subprocess
import sys

import pytest

from common.core.config.config_io import load_config
from torch_impl import memory_plan

HIDDEN = 64  # one hidden layer: 784*64 + 64 + 64*10 + 10 = 50,890 parameters
PARAMETER_BYTES = 4 * (784 * HIDDEN + HIDDEN + HIDDEN * 10 + 10)


def config(strategy: str, *extra: str):
    return load_config(
        "configs/mlp_adam.yaml",
        [f"model.hidden=[{HIDDEN}]", f"torch.strategy={strategy}", "train.batch_size=64", *extra],
    )


def test_ddp_holds_the_replica_and_its_buckets_at_every_world_size():
    rows = memory_plan.plan(config("ddp"), [2, 16], "strong")
    for row in rows:
        assert row["params"] == row["grads"] == row["buffers"] == PARAMETER_BYTES
        assert row["optimizer"] >= 2 * PARAMETER_BYTES  # Adam's two moments, at least
    assert [row["batch"] for row in rows] == [32, 4]  # the global batch of 64, split


def test_fully_shard_divides_the_optimizer_state_by_the_world_size():
    two, eight = memory_plan.plan(config("fsdp2"), [2, 8], "strong")
    assert two["optimizer"] / eight["optimizer"] == pytest.approx(4, rel=0.02)
    assert eight["peak"] < two["peak"]
    # both units gathered whole at the peak (the all-gather's output): the buffers do not
    # shrink with N; fully_shard pads each parameter's rows to a multiple of N
    for row in (two, eight):
        assert PARAMETER_BYTES <= row["buffers"] <= 1.01 * PARAMETER_BYTES


def test_hsdp_shards_within_its_group_only():
    (eight,) = memory_plan.plan(config("hsdp", "torch.hsdp_shard_size=2"), [8], "strong")
    (two,) = memory_plan.plan(config("fsdp2"), [2], "strong", local_world=2)
    assert eight["optimizer"] == two["optimizer"]  # 4 replicas of 2 shards: halves, like fsdp2 x2


def test_worlds_the_strategy_or_the_batch_cannot_take_are_named_not_priced():
    (past,) = memory_plan.plan(config("ddp"), [128], "strong")
    assert "leaves no sample for a rank at 128 ranks" in past["refused"] and "peak" not in past
    (weak,) = memory_plan.plan(config("ddp"), [128], "weak", run_world=2)
    assert weak["batch"] == 32 and weak["peak"] > 0  # the per-rank batch of a 2-rank run kept
    (flat,) = memory_plan.plan(config("fsdp1"), [2], "strong")
    assert flat["refused"].startswith("fsdp1 is not tracked")
    (alone,) = memory_plan.plan(config("single"), [4], "strong")
    assert alone["refused"] == "single runs one process, not 4"
    # fully_shard's tracker misses the unsharded gradients kept between micro-batches
    (micro,) = memory_plan.plan(config("fsdp2", "train.accumulation_steps=4"), [2], "strong")
    assert micro["refused"].startswith("train.accumulation_steps=4 is tracked for the replica")
    (uneven,) = memory_plan.plan(config("ddp", "train.accumulation_steps=4"), [32], "strong")
    assert uneven["refused"] == (
        "train.accumulation_steps=4 does not divide the per-rank batch of 2 at 32 workers"
    )


def test_accumulation_on_the_replica_holds_a_micro_batch_s_activations():
    """Each micro-batch is an iteration to MemTracker; its peak is kept across them. Checked
    against real ranks by tests/torch/test_memory_check.py."""
    cnn = ["model.name=cnn", "torch.strategy=ddp", "train.batch_size=256"]
    (whole,) = memory_plan.plan(load_config("configs/mlp_adam.yaml", cnn), [2], "strong")
    micro = load_config("configs/mlp_adam.yaml", [*cnn, "train.accumulation_steps=4"])
    (parts,) = memory_plan.plan(micro, [2], "strong")
    assert parts["params"] == whole["params"]
    assert parts["activations"] < 0.5 * whole["activations"], (parts, whole)


def test_a_bad_world_list_is_refused_before_any_work():
    command = [sys.executable, "-m", "torch_impl.memory_plan", "--config", "configs/mlp_adam.yaml"]
    done = subprocess.run([*command, "--world", "2,x"], capture_output=True, text=True)
    assert done.returncode == 2 and "'2,x': give world sizes of 1 or more" in done.stderr
