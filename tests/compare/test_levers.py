"""compare --project N --device-memory SIZE names, for a run that does not fit, the memory levers
priced by the same plan (common.projection.levers): a ddp ResNet-8 that does not fit gets 2 and
4 micro-batches, fully_shard, then fully_shard with its blocks checkpointed, and the first that
fits is named."""

import json
from pathlib import Path

from common.core.config.config_io import load_config
from common.core.records import metrics
from common.projection import levers, link_profile, memory_at_n
from common.projection.step_model import Projected
from common.report.runs import RecordedRun
from tests.compare.test_memory_at_n import projection
from tests.compare.test_projection import profile
from tests.records import write_run

SHARDED = "torch.strategy=fsdp2"
ACCUMULATE = "train.accumulation_steps="
MADE = "torch fsdp2 x2 (activation_checkpointing=blocks)"  # the run made with the lever
CHECKPOINTING = "model.activation_checkpointing=blocks"
RESNET = ["model.name=resnet8", "model.width=2", "train.batch_size=512", "optim.name=sgd"]
# Between what the plan gives a rank of the ddp run (and of fsdp2 alone) and what it gives
# fsdp2 with checkpointing, each with memory_at_n's 15% spare (on [B]: 253, 260 and 223 MiB)
DEVICE = "270MiB"


def write_runs(root: Path) -> Path:
    """The ddp run that does not fit, and one made with the lever that fits; the latter's path."""
    write_run(root / "ddp" / "metrics.jsonl", cfg=load_config(None, RESNET))
    made = root / "made" / "metrics.jsonl"
    write_run(made, cfg=load_config(None, [*RESNET, SHARDED, CHECKPOINTING]))
    lines = made.read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), "strategy": "fsdp2"})  # records' trainer: ddp
    made.write_text("\n".join(lines) + "\n")
    return made


def test_a_run_that_does_not_fit_gets_the_first_lever_that_fits(tmp_path, capsys):
    write_run(tmp_path / "ddp" / "metrics.jsonl", cfg=load_config(None, RESNET))
    link_profile.write(profile(), tmp_path / "links.json")
    found = projection([str(tmp_path), "--project", "2", "--device-memory", DEVICE], capsys)
    rows = {row["label"]: row for row in found["memory"]}
    assert rows["torch ddp x2"]["fits"] is False, rows
    two, four, sharded, checkpointed = found["levers"]
    assert (two["change"], four["change"]) == (ACCUMULATE + "2", ACCUMULATE + "4")
    assert (sharded["change"], checkpointed["change"]) == (SHARDED, f"{SHARDED} {CHECKPOINTING}")
    # the activations of half and a quarter of the batch (on [B]: 130 and 67 MiB against 253)
    assert two["total_bytes"] < 0.6 * rows["torch ddp x2"]["total_bytes"]
    assert four["total_bytes"] < 0.6 * two["total_bytes"]
    assert two["fits"] and sharded["fits"] is False and checkpointed["fits"] is True
    assert checkpointed["total_bytes"] < rows["torch ddp x2"]["total_bytes"]
    # the run holds no traffic: not projected, and a lever's speed is never guessed
    assert not found["rows"] and checkpointed["samples_s"] is None

    said = levers.lines(
        [
            levers.Lever(**{**lever, "samples_s": lever["samples_s"] and tuple(lever["samples_s"])})
            for lever in found["levers"]
        ],
        [memory_at_n.MemoryRow(**row) for row in found["memory"]],
    )
    assert said[1].startswith("torch ddp x2 at 2 workers: ") and "does not fit" in said[1]
    assert said[2].startswith(f"    --set {ACCUMULATE}2: ") and "(the smallest change" in said[2]
    assert "samples/s: not priced: its batch normalization" in said[2], said[2]
    assert said[4].startswith(f"    --set {SHARDED}: ") and "does not fit;" in said[4], said
    assert said[5].startswith(f"    --set {SHARDED} {CHECKPOINTING}: ")
    assert said[5].endswith(
        "fits; samples/s: not priced: another strategy's collectives: project a run made with it"
    ), said[5]


def test_a_lever_s_speed_is_the_projection_of_a_run_made_with_it(tmp_path):
    ddp = tmp_path / "ddp" / "metrics.jsonl"
    made = write_runs(tmp_path)
    runs = [RecordedRun(str(path), metrics.scan(path).records) for path in (ddp, made)]
    priced = [Projected(MADE, w, 1, 2, 100.0 * w, 200.0 * w, 1, 1, 0, 0) for w in (2, 8)]
    wrong_model = [Projected("torch ddp x2", 8, 1, 2, 5, 6, 1, 1, 0, 0)]
    speed, said = levers.speed_of(runs[0], [SHARDED, CHECKPOINTING], 8, runs, priced)
    assert (speed, said) == ((800, 1600), f"projected from {MADE}")
    assert levers.speed_of(runs[0], [SHARDED], 8, runs, priced)[0] is None  # not checkpointed
    assert levers.speed_of(runs[0], [SHARDED, CHECKPOINTING], 8, runs, wrong_model)[0] is None
