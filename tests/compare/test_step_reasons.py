"""Why a step takes what it takes, in parts that add up to it, on runs whose numbers are known:
torch ddp x2 (a 10 ms step) beside a torch fsdp2 x2 of 20 ms, both with a profiled step split."""

import compare
from common.core.records.entries import TrafficEntry
from common.core.records.metrics import MetricsWriter
from common.projection import link_profile, reasons
from common.report.runs import RecordedRun
from tests.compare.test_projection import MB, ddp_run, profile, split
from tests.records import changed


def fsdp2_run() -> RecordedRun:
    """20 ms a step (3,200 samples/s); 3 all-reduces of 1 MB a step, which the unit profile
    prices at 3 x (1 ms + 1 MB x 1 ns) = 6 ms at 2 ranks; split: compute 6 ms, optimizer 1 ms,
    so 7 ms of overhead."""
    sent = [
        TrafficEntry(
            phase="train",
            kind="all_reduce",
            calls=3,
            payload_bytes=3 * MB,
            wire_bytes=3 * MB,
            expected_calls=3,
            expected_payload_bytes=3 * MB,
        )
    ]
    ddp = ddp_run()
    cfg = {**ddp.start.config, "torch": {**ddp.start.config["torch"], "strategy": "fsdp2"}}
    begun = changed(ddp.start, strategy="fsdp2", config=cfg)
    epochs = [
        changed(e, samples_per_s=3200.0, traffic=sent, step_split=split(6e-3, 1e-3))
        for e in ddp.epochs
    ]
    return RecordedRun("f/metrics.jsonl", [begun, *epochs])


def test_each_step_is_said_in_parts_that_add_up_to_it():
    ddp = ddp_run(step_split=split(compute_s=6e-3, optimizer_s=2e-3))
    said = reasons.shares([ddp, fsdp2_run()], lambda run: profile())
    assert said[0].startswith("torch ddp x2 sends 1 MB per rank per step in 1 collective; ")
    assert "that is 2 ms of its 10 ms step (20%)" in said[0], said[0]
    assert "compute 6 ms" in said[0] and "optimizer 2 ms (a whole replica's)" in said[0]
    assert "overhead 0 ms" in said[0], said[0]
    assert "that is 6 ms of its 20 ms step (30%)" in said[1], said[1]
    assert "optimizer 1 ms (shrinks with the shards of its state), overhead 7 ms" in said[1]


def test_a_sharded_step_is_set_against_a_replicated_one_part_by_part_and_at_more_workers():
    """At 8 workers: ddp 6 x 2/8 + 2 (a replica's optimizer) + 0 + 8.75 (test_projection's
    ring) = 12.25 ms; fsdp2 1.5 + 1 x 2/8 + 7 + 3 x (14 x 0.5 ms + 1 MB x 14/8 x 1 ns) = 35 ms."""
    ddp = ddp_run(step_split=split(compute_s=6e-3, optimizer_s=2e-3))
    (said,) = reasons.sharded_against_replicated([ddp, fsdp2_run()], lambda run: profile(), [2, 8])
    assert said.startswith(
        "torch fsdp2 x2 takes 20 ms a step, 2x torch ddp x2's 10 ms; the 10 ms between them: "
        "communication +4 ms, overhead +7 ms, compute +0 ms, optimizer -1 ms "
        "(3 collectives a step against 1)"
    ), said
    assert said.endswith("projected without overlap: at 8 workers 35 ms against 12.2 ms"), said


def test_no_pair_is_made_without_a_split_or_across_worker_counts():
    bare = RecordedRun(
        "r/metrics.jsonl",
        [ddp_run().start, *(changed(e, step_split=None) for e in ddp_run().epochs)],
    )
    pairs = reasons.sharded_against_replicated([bare, fsdp2_run()], lambda r: profile(), [8])
    assert pairs == []
    sharded = fsdp2_run()
    four = RecordedRun(sharded.path, [changed(sharded.start, world_size=4), *sharded.epochs])
    assert reasons.sharded_against_replicated([ddp_run(), four], lambda r: profile(), []) == []


def test_the_report_pages_hold_the_projection_with_its_reasons(tmp_path):
    """compare --out printed the projection on the terminal only: the pages a reader opens
    hold its sentences, table and caveats too."""
    ddp = ddp_run(step_split=split(compute_s=6e-3, optimizer_s=2e-3))
    for name, run in (("ddp", ddp), ("fsdp2", fsdp2_run())):
        with MetricsWriter(tmp_path / name / "metrics.jsonl") as writer:
            for record in run.records:
                writer.write(record)
    link_profile.write(profile(), tmp_path / "links-torch.json")
    out = tmp_path / "report"
    assert compare.main([str(tmp_path), "--project", "8", "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "<h2>At more workers (the projection)</h2>" in page
    assert "the 10 ms between them: communication +4 ms, overhead +7 ms" in page
    assert "torch fsdp2 x2        8" in page and "projection.png" not in page  # inlined
    markdown = (out / "report.md").read_text()
    assert "## At more workers (the projection)" in markdown
    assert "![projection](plots/projection.png)" in markdown
