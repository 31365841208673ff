"""torch's NCCL model as a link profile, for GPU runs whose links were not measured: its figures
are the model's (read off its points at every world size given), it says it is a model, and
compare prices torch GPU runs with it, saying so, where no torch profile is among the results."""

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from torch._inductor import comm_analysis

import compare
from common.core.measure import peak
from common.core.measure.traffic import wire_bytes
from common.projection import link_profile
from tests.compare.test_projection import ddp_run
from tests.records import changed
from torch_impl import nccl_model

KINDS = {
    "all_reduce": comm_analysis.NCCL_COLL.ALL_REDUCE,
    "all_gather": comm_analysis.NCCL_COLL.ALL_GATHER,
    "reduce_scatter": comm_analysis.NCCL_COLL.REDUCE_SCATTER,
}


def test_the_profile_gives_the_model_s_figures_between_its_points(tmp_path):
    out = tmp_path / "links-torch.json"
    done = subprocess.run(
        [sys.executable, "-m", "torch_impl.nccl_model", "--worlds", "64,8", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    profile = link_profile.read(out)
    assert profile.world_size == 8 and sorted(profile.groups) == [64]
    assert "NCCL model" in profile.source and "not a measurement" in profile.source
    for group in (8, 64):
        for kind, collective in KINDS.items():
            for whole in (12_345, 437_544, 3 << 20, 40_000_000):  # between the powers of 2
                payload = whole // group if kind == "all_gather" else whole
                ours = profile.seconds(kind, 2, 2 * wire_bytes(kind, payload, group), group)
                model = comm_analysis.estimate_nccl_collective_runtime_impl(
                    payload * group if kind == "all_gather" else payload, group, collective
                )
                assert ours == pytest.approx(2 * model / 1e3, rel=0.10), (group, kind, whole)


def test_bad_world_sizes_are_refused_before_any_work(tmp_path):
    for worlds in ("1,8", "8,x", ""):
        assert nccl_model.main(["--worlds", worlds, "--out", str(tmp_path / "p.json")]) == 2
    assert not (tmp_path / "p.json").exists()


def test_compare_prices_torch_gpu_runs_with_the_model_where_no_profile_was_measured(
    tmp_path, capsys
):
    from common.core.records.metrics import MetricsWriter

    run = ddp_run()
    begun = changed(run.start, device_type="gpu")
    with MetricsWriter(tmp_path / "gpu" / "metrics.jsonl") as writer:
        for record in [begun, *run.epochs]:
            writer.write(record)
    left_before = set(Path(tempfile.gettempdir()).glob("suite-nccl-model-*"))
    assert compare.main([str(tmp_path), "--project", "8"]) == 0
    # the model's profile goes beside the suite's cache, not into a new folder per call
    assert set(Path(tempfile.gettempdir()).glob("suite-nccl-model-*")) == left_before
    assert (peak.cache_path().parent / "links-torch-nccl-model-2-8.json").is_file()
    out = capsys.readouterr().out
    assert "== projection with torch " in out and "NCCL model" in out, out
    assert "torch ddp x2        8" in out, out
    assert "caveat: torch runs are priced with torch" in out and "srun python -m" in out, out
