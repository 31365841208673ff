"""compare --project's memory against the whole process: a 2-rank run of each strategy projected
to 4 ranks (the tracker's tensors at 4, the run's base, and what its measured peak held above
both) against a real 4-rank run's measured peak per rank (the largest rank's VmHWM).

Measured on [B] (2026-11-27, MLP 3 x 2048 and 3 x 4096, Adam, fsdp2, ddp, mwms): -6% to +4%;
base + tensors alone, the projection before it carried the rest, read 4% to 53% low. fsdp2's
excess grows with the ranks (from 2 to 4: +40 to +86 MiB in four runs), so its projection reads
low: -1.9% in one run of this test, -10.8% in another (projected 711.7 MiB, measured 797.9).
TOLERANCE holds that; base + tensors alone still fails it by 12% to 52%."""

from pathlib import Path

import pytest

from common.projection import memory_at_n
from common.report.inputs import load_runs
from tests.launching import runner

pytestmark = pytest.mark.scaling  # 6 runs of a 10M-parameter model, 4 ranks on 2 cores
TOLERANCE = 0.15
CONFIG = str(Path(__file__).parents[2] / "configs" / "mlp_adam.yaml")  # Adam: its state counts
MODEL = [
    *("model.hidden=[2048,2048,2048]", "data.train_limit=1280", "data.test_limit=200"),
    *("train.epochs=2", "model.dropout=false"),
]
CASES = {
    "ddp": ("torch_impl.train", ["torch.strategy=ddp"]),
    "fsdp2": ("torch_impl.train", ["torch.strategy=fsdp2"]),
    "mwms": ("tf_impl.train", []),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_2_rank_run_projected_to_4_holds_against_the_4_rank_run(case, tmp_path):
    module, settings = CASES[case]
    run = runner(module, tmp_path)
    folders = {
        n: run(f"{case}-x{n}", n, *MODEL, *settings, extra=("--config", CONFIG), small=False)[1]
        for n in (2, 4)
    }
    (two,), _, _ = load_runs([str(folders[2] / "metrics.jsonl")])
    (four,), _, _ = load_runs([str(folders[4] / "metrics.jsonl")])
    (own, projected) = memory_at_n.memory_rows([two], [2, 4], None, None)
    measured = max(entry.peak_bytes for entry in four.epochs[-1].memory)
    print(
        f"{case}: 2 ranks measured {own.measured_bytes / 2**20:,.1f} MiB a rank; projected "
        f"to 4: {projected.total_bytes / 2**20:,.1f} (tensors {projected.peak_bytes / 2**20:,.1f}"
        f" + base {projected.base_bytes / 2**20:,.1f} + above {projected.above_bytes / 2**20:,.1f})"
        f", measured at 4: {measured / 2**20:,.1f}"
    )
    assert own.total_bytes == own.measured_bytes  # the run table's peak, at its own size
    assert projected.total_bytes == pytest.approx(measured, rel=TOLERANCE)
