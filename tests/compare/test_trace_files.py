"""Traces a user can open (output.profile_steps): on 2 real ranks of each framework, every rank
writes its trace of the steps after the counted one into the run folder (torch: a Chrome trace;
TensorFlow: an XSpace that xprof, TensorBoard's Profile tab, reads), and compare's report names
and links each of them."""

import json
import subprocess
import sys

import compare
from tests.launching import runner

SETTINGS = ["train.epochs=1", "output.profile_steps=3"]


def test_each_rank_writes_a_trace_and_the_report_links_every_one(tmp_path):
    runner("torch_impl.train", tmp_path, warm=True)("torch", 2, *SETTINGS, "torch.strategy=ddp")
    runner("tf_impl.train", tmp_path, warm=True)("tf", 2, *SETTINGS)
    for rank in (0, 1):
        trace = json.loads((tmp_path / "torch" / "traces" / f"torch-rank-{rank}.json").read_text())
        names = {event.get("name", "") for event in trace["traceEvents"]}
        assert any(name.startswith("aten::") for name in names), sorted(names)[:20]
        assert any("allreduce" in name for name in names)  # DDP's gradients, traced
        (xspace,) = (tmp_path / "tf" / "traces" / f"tf-rank-{rank}").glob(
            "plugins/profile/*/*.xplane.pb"
        )
        read = [sys.executable, "-m", "tf_impl.xspace_ops", str(xspace)]  # xprof, apart from TF
        done = subprocess.run(read, capture_output=True, text=True, timeout=120, check=True)
        ops = {kind for kind, _, _ in json.loads(done.stdout)}
        assert "CollectiveReduceV2" in ops, sorted(ops)[:20]
    out = tmp_path / "report"
    assert compare.main([str(tmp_path / "torch"), str(tmp_path / "tf"), "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "<h2>Traces</h2>" in page
    assert page.count(".json</a>") == 2 and page.count(".xplane.pb</a>") == 2
    markdown = (out / "report.md").read_text()
    assert "[torch-rank-0.json](../torch/traces/torch-rank-0.json)" in markdown
