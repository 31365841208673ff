"""torch.compile=true on real 2-rank gloo runs: DDP and FSDP2 still agree, compiled runs
follow the eager curve within a tolerance, compile time is reported apart, fsdp1 is refused."""

import json
import subprocess

import pytest
import torch

import compare
from tests.records import read_metrics
from tests.torch.conftest import train_command

SETTINGS = [
    "data.train_limit=1280",
    "data.test_limit=500",
    "train.epochs=2",
    "train.batch_size=64",
    "model.dropout=false",
    "optim.name=sgd",
    "optim.lr=0.05",
    "train.log_every_steps=1",
    "output.save_model=true",
]


@pytest.fixture(scope="module")
def compiled_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("compiled")
    for name, strategy, compiled in (
        ("ddp-eager", "ddp", False),
        ("ddp-compiled", "ddp", True),
        ("fsdp2-compiled", "fsdp2", True),
    ):
        settings = [
            *SETTINGS,
            f"torch.strategy={strategy}",
            f"torch.compile={str(compiled).lower()}",
            f"output.dir={root}",
            f"output.run_name={name}",
        ]
        done = subprocess.run(
            train_command(2, settings, ["--quiet"]), capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root


def step_losses(run_dir):
    records = read_metrics(run_dir / "metrics.jsonl")
    return [r["loss"] for r in records if r["record"] == "step"]


def test_compiled_ddp_and_fsdp2_agree_and_follow_eager(compiled_runs):
    """Within a tolerance, not bitwise (eager DDP and FSDP2 are bitwise equal: see
    test_distributed). Measured: 3e-8 apart after 40 steps. Likely because, compiled, DDP's
    graphs are cut at its buckets (DDPOptimizer) and FSDP2's at its per-layer hooks, so inductor
    can fuse into different kernels (not inspected); compiled against eager differs the same
    way."""
    ddp = torch.load(compiled_runs / "ddp-compiled" / "model.pt")
    fsdp2 = torch.load(compiled_runs / "fsdp2-compiled" / "model.pt")
    worst = max((ddp[name] - fsdp2[name]).abs().max().item() for name in ddp)
    print(f"compiled ddp vs fsdp2: max weight difference {worst:.2e}")
    assert worst < 1e-4
    losses = {name: step_losses(compiled_runs / name) for name in ("ddp-eager", "ddp-compiled")}
    losses["fsdp2-compiled"] = step_losses(compiled_runs / "fsdp2-compiled")
    assert all(len(curve) == 40 for curve in losses.values())
    for name in ("ddp-compiled", "fsdp2-compiled"):
        assert losses[name] == pytest.approx(losses["ddp-eager"], rel=1e-4), name


def test_compile_time_is_reported_apart(compiled_runs, capsys):
    assert compare.main([str(compiled_runs), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out.splitlines()[0])["rows"]
    warmups = {row["strategy"]: row["warmup_s"] for row in rows}
    assert set(warmups) == {"ddp", "ddp (compile=True)", "fsdp2 (compile=True)"}
    eager = warmups.pop("ddp")
    assert min(warmups.values()) > 5 * eager  # compiling takes seconds, an eager step not


def test_compile_with_fsdp1_is_refused_before_anything_starts(run_torch):
    done, _ = run_torch("x", 2, "torch.strategy=fsdp1", "torch.compile=true", check=False)
    assert done.returncode == 2
    refusal = "torch.compile=true is offered for single, ddp, fsdp2, hsdp, not fsdp1"
    assert refusal in done.stdout + done.stderr
