"""The preflight for real: both frameworks on 1 and 2 local ranks (the 2-node SLURM run is in
tests/slurm), and a failing check that names itself."""

import subprocess
import sys

import pytest

from common.core.config import devices
from common.projection import link_profile
from common.tools import preflight

# bf16 is trained only where the CPU has its instructions; elsewhere it is named as emulated
TRAINED = ["none"] + ([] if devices.emulated_on_cpu("bf16") else ["bf16"])


def run_preflight(*args):
    command = [sys.executable, "-m", "common.tools.preflight", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=900)


# the link profiles up to 2 MiB a call, not 64 MiB: the same kinds and fit, in a third of the time
LINKS = ["--links-max-bytes", str(2**21)]


# 2 ranks measures both frameworks' links and trains six runs: make test-scaling, with the cores
@pytest.mark.parametrize("nproc", [1, pytest.param(2, marks=pytest.mark.scaling)])
def test_the_preflight_checks_both_frameworks(nproc, tmp_path):
    done = run_preflight("--nproc", str(nproc), "--links-dir", str(tmp_path), *LINKS)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert out.rstrip().endswith("preflight passed")
    assert f"torch: {nproc} rank(s)" in out and f"tf: {nproc} rank(s)" in out
    assert out.count("intra-op") == 2 * nproc  # every rank of both frameworks reported
    assert "tf32       matmul ieee, conv ieee" in out
    assert "tf32       tensor_float_32_execution False" in out
    strategies = ["single"] if nproc == 1 else ["ddp", "fsdp2", "fsdp1"]
    for run in [f"torch-{s}-{p}" for s in strategies for p in TRAINED]:
        assert f"[preflight] {run}: 20 training steps ..." in out  # said as it started
        assert f"{run} " in out and "ok," in out.split(f"{run} ", 1)[1].splitlines()[0]
    assert ("tf-mwms-bf16" in out) == ("bf16" in TRAINED) and "tf-mwms-none" in out
    if "bf16" not in TRAINED:
        assert out.count("(bf16, fp16 emulated by this CPU: not trained)") == 2
    rows = out.count("67,108,864")  # the largest all-reduce, once per framework
    assert rows == (2 if nproc == 2 else 0)
    # 2 ranks: each framework's link profile, where compare.py --project finds it
    profiles = sorted(path.name for path in tmp_path.glob("links-*.json"))
    assert profiles == (["links-tf.json", "links-torch.json"] if nproc == 2 else [])
    if nproc == 2:
        profile = link_profile.read(tmp_path / "links-torch.json")
        assert profile.transport == "gloo" and profile.world_size == 2
        assert set(profile.kinds) == {"all_reduce", "all_gather", "reduce_scatter"}
        assert set(link_profile.read(tmp_path / "links-tf.json").kinds) == {
            "all_reduce",
            "all_gather",
        }
        assert out.count("  links      ") == 2 and "all_gather      alpha" in out


def test_a_failed_check_is_named_and_fails_the_preflight():
    done = run_preflight("--nproc", "1", "--device", "gpu", "--frameworks", "torch")
    assert done.returncode == 1
    assert "preflight FAILED: torch probe (exit 2)" in done.stderr
    assert "dist.device=gpu but torch sees no GPU" in done.stderr


def test_a_link_profile_too_small_to_fit_is_refused_before_any_work(capsys):
    with pytest.raises(SystemExit) as stop:
        preflight.main(["--links-max-bytes", "8"])
    assert stop.value.code == 2
    assert "--links-max-bytes 8: a fit takes two sizes at least" in capsys.readouterr().err


def test_bus_bandwidth_is_computed_as_nccl_tests_does():
    row = preflight.bandwidth_row(2**20, 1e-3, world_size=4)
    assert row["algbw_gbps"] == pytest.approx(2**20 / 1e-3 / 1e9)
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 2 * 3 / 4)
    sizes = [size for size, _ in preflight.sizes_and_iterations()]
    assert sizes[0] == 8 and sizes[-1] == 64 * 2**20 and sizes == sorted(sizes)
