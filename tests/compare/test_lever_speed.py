"""A memory lever's speed at N priced from the run that has not got it
(common.projection.lever_speed): accumulation's collectives by strategy, checkpointing's
recomputed forward from a measured pair, and what is said where neither can be priced."""

import pytest

from common.core.config.config_io import load_config
from common.core.records.entries import TrafficEntry
from common.projection import lever_speed, step_model
from common.report.runs import RecordedRun
from tests.compare.test_projection import MB, ddp_run, profile, split
from tests.records import changed, epoch, start

RESNET = ["model.name=resnet8", "optim.name=sgd", "train.target_accuracy=0.9"]
CKPT = "model.activation_checkpointing=blocks"


def entry(kind: str, calls: int) -> TrafficEntry:
    return TrafficEntry(
        phase="train",
        kind=kind,
        calls=calls,
        payload_bytes=calls * MB,
        wire_bytes=calls * MB,
        expected_calls=calls,
        expected_payload_bytes=calls * MB,
    )


def run_of(
    strategy: str, settings: list[str], sent: list[TrafficEntry], compute_s=8e-3, step_s=10e-3
):
    """A torch run of 2 ranks, global batch 64 in a `step_s` step, with the traffic `sent` and a
    step split of `compute_s`."""
    cfg = load_config(None, ["train.target_accuracy=0.9", f"torch.strategy={strategy}", *settings])
    epochs = [
        changed(
            epoch(n, 0.9, 2.0 * n),
            samples_per_s=64 / step_s,
            traffic=sent,
            step_split=split(compute_s),
        )
        for n in (1, 2, 3)
    ]
    begun = changed(start(cfg=cfg), hosts=["localhost"] * 2, strategy=strategy)
    return RecordedRun(f"{strategy}/metrics.jsonl", [begun, *epochs])


def test_accumulation_keeps_ddp_s_collectives_and_multiplies_fully_shard_s_gathers():
    of = lambda run: profile()  # noqa: E731
    ddp = ddp_run()
    (plain,), _ = step_model.project(ddp, profile(), [8])
    speed, said = lever_speed.priced(ddp, ["train.accumulation_steps=4"], 8, None, [ddp], of)
    assert speed == pytest.approx((plain.samples_s_low, plain.samples_s_high))  # no_sync
    assert "their compute taken as the whole batch's (no measured pair: run torch ddp x2" in said
    speed, said = lever_speed.priced(ddp, ["train.accumulation_steps=4"], 32, None, [ddp], of)
    assert speed is None and said.endswith(
        "not projected to 32 workers: its per-rank batch of 2 there does not split into "
        "train.accumulation_steps=4 micro-batches"
    ), said

    sharded = run_of("fsdp2", [], [entry("all_gather", 4), entry("reduce_scatter", 2)])
    gathers_only = run_of("fsdp2", [], [entry("all_gather", 4)])
    gather_s = step_model.communication_s(gathers_only, profile(), 8)
    (before,), _ = step_model.project(sharded, profile(), [8])
    speed, _ = lever_speed.priced(sharded, ["train.accumulation_steps=4"], 8, None, [sharded], of)
    # each unit gathered once per micro-batch: 3 more times the gathers, the rest unchanged
    assert 64 / speed[0] == pytest.approx(before.step_slow_s + 3 * gather_s)


def test_checkpointing_is_priced_from_a_measured_pair_and_named_without_one():
    of = lambda run: profile()  # noqa: E731
    sent = [entry("all_reduce", 1)]
    sharded = [entry("all_gather", 4), entry("reduce_scatter", 2)]  # 8 ms at 2 ranks
    target = run_of("fsdp2", RESNET, sharded, compute_s=20e-3, step_s=40e-3)
    without = run_of("ddp", RESNET, sent, compute_s=8e-3)
    with_it = run_of("ddp", [*RESNET, CKPT], sent, compute_s=10e-3, step_s=12e-3)
    speed, said = lever_speed.priced(target, [CKPT], 8, None, [target], of)
    assert speed is None and said.startswith("no measured pair: run torch fsdp2 x2 with --set")

    speed, said = lever_speed.priced(target, [CKPT], 8, None, [target, without, with_it], of)
    assert "1.25x the compute (torch ddp x2 against torch ddp x2)" in said, said
    comm = step_model.communication_s(target, profile(), 8)
    # the fsdp2 run's 20 ms of compute at 2 ranks, 1.25x, shared over 8; its overhead (the
    # 12 ms of its step neither compute nor collectives) stays
    assert 64 / speed[0] == pytest.approx(1.25 * 20e-3 * 2 / 8 + 12e-3 + comm)


def test_accumulation_with_batch_normalization_and_a_strategy_change_are_not_priced():
    run = run_of("ddp", RESNET, [entry("all_reduce", 1)])
    of = lambda _: profile()  # noqa: E731
    speed, said = lever_speed.priced(run, ["train.accumulation_steps=2"], 8, None, [run], of)
    assert speed is None and "k changes the maths) all-reduces in every micro-batch" in said
    speed, said = lever_speed.priced(run, ["torch.strategy=fsdp2"], 8, None, [run], of)
    assert speed is None and "another strategy's collectives" in said


def test_accumulation_s_compute_comes_from_a_measured_pair_where_there_is_one():
    """On a CPU smaller micro-batches may run faster (docs/model_size.md): a pair of runs at
    k = 4 and k = 1 gives the factor, as checkpointing's pair gives the recomputed forward (the
    run itself is the k = 1 one here: 6 ms of compute against its 20)."""
    of = lambda run: profile()  # noqa: E731
    sent = [entry("all_reduce", 1)]
    target = run_of("ddp", [], sent, compute_s=20e-3, step_s=40e-3)
    at_4 = run_of("ddp", ["train.accumulation_steps=4"], sent, compute_s=6e-3, step_s=8e-3)
    speed, said = lever_speed.priced(
        target, ["train.accumulation_steps=4"], 8, None, [target, at_4], of
    )
    assert "4 micro-batches, 0.30x the compute (torch ddp x2 against torch ddp x2)" in said, said
    comm = step_model.communication_s(target, profile(), 8)
    assert 64 / speed[0] == pytest.approx(0.3 * 20e-3 * 2 / 8 + 18e-3 + comm)
