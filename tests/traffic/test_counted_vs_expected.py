"""Every run records the collectives its framework really issued in one training step (torch:
the profiler's c10d ops; TensorFlow: the collective ops of the step graph), beside what the
strategy registry expects; here they agree within 1% in calls and bytes, for each strategy on
real ranks, and evaluation's collectives are recorded apart."""

import json

import pytest

import compare
from common.core.config.expected_traffic import Unit
from tests.launching import runner

SETTINGS = ["data.train_limit=640", "data.test_limit=200", "train.epochs=1"]
CASES = {
    "torch ddp": ("torch_impl.train", 2, ["torch.strategy=ddp"]),
    "torch fsdp2": ("torch_impl.train", 2, ["torch.strategy=fsdp2"]),
    "torch fsdp2 shard_grad_op": (  # 3 steps profiled for the split: one step's calls counted
        "torch_impl.train",
        2,
        ["torch.strategy=fsdp2", "torch.sharding=shard_grad_op", "output.split_steps=3"],
    ),
    "torch fsdp2 size units": ("torch_impl.train", 2, ["torch.strategy=fsdp2", "torch.wrap=size"]),
    "torch fsdp1": ("torch_impl.train", 2, ["torch.strategy=fsdp1"]),
    "torch fsdp1 size units": ("torch_impl.train", 2, ["torch.strategy=fsdp1", "torch.wrap=size"]),
    "torch hsdp 2x2": ("torch_impl.train", 4, ["torch.strategy=hsdp", "torch.hsdp_shard_size=2"]),
    "tf mwms": ("tf_impl.train", 2, []),
}


def first_epoch(run_dir) -> dict:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return next(record for record in records if record["record"] == "epoch")


def traffic(run_dir) -> list[dict]:
    return first_epoch(run_dir)["traffic"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_counted_collectives_agree_with_the_registry(case, tmp_path, capsys):
    module, nproc, extra = CASES[case]
    _, run_dir = runner(module, tmp_path, warm=True)("t", nproc, *SETTINGS, *extra, small=False)
    entries = traffic(run_dir)
    train = [entry for entry in entries if entry["phase"] == "train"]
    expected_total = sum(entry["expected_payload_bytes"] for entry in train)
    assert expected_total > 0, entries
    for entry in train:
        if entry["expected_calls"]:
            assert entry["calls"] == pytest.approx(entry["expected_calls"], rel=0.01), entry
            assert entry["payload_bytes"] == pytest.approx(
                entry["expected_payload_bytes"], rel=0.01
            ), entry
        else:  # control messages the registry does not model (DDP's 2 int broadcasts)
            assert entry["payload_bytes"] < 0.01 * expected_total, entry
    for entry in entries:  # by payload, each size apart: the projection prices them so
        sizes = entry["sizes"]
        assert sum(size["calls"] for size in sizes) == pytest.approx(entry["calls"]), entry
        total = sum(size["calls"] * size["payload_bytes"] for size in sizes)
        assert total == pytest.approx(entry["payload_bytes"]), entry
    at = sorted(i for entry in train for size in entry["sizes"] for i in size["at"])
    assert at == list(range(round(sum(entry["calls"] for entry in train)))), train
    if case == "torch fsdp2":  # the step in order: it gathers first and scatters last
        where = {i: e["kind"] for e in train for size in e["sizes"] for i in size["at"]}
        assert where[0] == "all_gather" and where[len(at) - 1] == "reduce_scatter", where
    if "fsdp2" in case or "hsdp" in case:  # each unit's calls hand its own shard
        units = 2 if "size units" in case else 3
        assert {len(e["sizes"]) for e in train if e["kind"] != "all_reduce"} == {units}, train
    assert {entry["kind"] for entry in entries if entry["phase"] == "eval"} >= {"all_reduce"}
    assert all(entry["expected_calls"] is None for entry in entries if entry["phase"] == "eval")
    if "fsdp2" in case or "hsdp" in case:  # gathered once per evaluation pass, not per batch
        (gathered,) = [e for e in entries if e["phase"] == "eval" and e["kind"] == "all_gather"]
        assert gathered["calls"] == (2 if "size units" in case else 3), gathered
    split = first_epoch(run_dir).get("step_split")  # of the same profiled step
    assert 0 < split["compute_s"] < split["wall_s"] and split["collectives_s"] > 0, split
    if module == "tf_impl.train":  # TensorFlow's profiler, read by xprof
        assert split["source"].startswith("TensorFlow profiler via xprof"), split
    sharded = "fsdp" in case or "hsdp" in case  # FSDP's hooks and copies: its own share
    assert (split["framework_s"] > 0) == sharded, split
    compare.main([str(run_dir), "--format", "json"])
    (row,) = json.loads(capsys.readouterr().out)["rows"]  # the report's columns hold the sums
    assert row["collectives"] == sum(entry["calls"] for entry in train)
    assert row["sent_mb"] == pytest.approx(sum(entry["wire_bytes"] for entry in train) / 1e6)
    if case in ("torch ddp", "tf mwms"):  # the worked check: 109,386 float32 gradients
        (reduced,) = [entry for entry in train if entry["kind"] == "all_reduce"]
        assert (reduced["calls"], reduced["payload_bytes"]) == (1, 437_544)
        assert reduced["wire_bytes"] == 437_544  # 2(n-1)/n of the payload, n = 2


def test_shards_are_padded_on_dim_0_per_parameter_or_per_flat_unit():
    unit = Unit(((10, 3), (5,)))  # 35 numbers
    assert unit.numel == 35
    assert unit.dim0_shard(4) == 3 * 3 + 2  # ceil(10/4) rows of 3, ceil(5/4)
    assert unit.flat_shard(4) == 9  # ceil(35/4)
