"""Check a machine or a SLURM allocation before a sweep: both frameworks, as the runs will use
them, in about a minute. Exits 1 naming the first check that failed.

    python -m common.tools.preflight [--nproc 2] [--device auto|cpu|gpu] [--frameworks torch,tf]
                                     [--links-dir results] [--links-max-bytes BYTES]
    sbatch -N2 --ntasks-per-node=1 slurm/run_slurm.sh preflight      (the same, as srun steps)

Per framework, with the launcher the runs use: `probe` (versions, device, threads, TF32 and
the precisions the hardware runs, and all-reduce algbw and busbw from 8 B to 64 MiB, as
nccl-tests reports them); `links` (2 ranks or more: the framework's link tool, written as
`<links-dir>/links-<framework>.json` for `compare.py --project`); `train` (20 steps of every
strategy at every precision the probe found, each a real launch).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.core.config import devices
from common.core.records import metrics
from common.core.records.records import METRICS_FILENAME, Epoch, RunEnd
from common.launch import exchanges
from common.projection import link_groups, link_lines, link_profile
from common.tools import programs

MARK = "PREFLIGHT "
SIZES = [8 * 8**k for k in range(8)] + [64 * 2**20]  # 8 B, 64 B, ... 16 MiB, 64 MiB
STEPS = 20
BATCH = 64
TIMEOUT_S = 600


def sizes_and_iterations() -> list[tuple[int, int]]:
    """Every message size with its timed repetitions: more for small ones (tens of µs each)."""
    return [(size, max(3, min(50, 2**24 // size))) for size in SIZES]


def bandwidth_row(size_bytes: int, seconds: float, world_size: int) -> dict[str, Any]:
    algbw = size_bytes / seconds
    return {
        "bytes": size_bytes,
        "time_us": seconds * 1e6,
        "algbw_gbps": algbw / 1e9,
        "busbw_gbps": algbw * 2 * (world_size - 1) / world_size / 1e9,
    }


def cpu_precisions() -> list[str]:
    """The precisions a CPU rank trains in the preflight: fp32, and bf16 where the CPU has its
    instructions (`common.core.config.devices.emulated_on_cpu`); an emulated one would take minutes
    and measure the emulation."""
    return ["none"] + [p for p in ("bf16",) if not devices.emulated_on_cpu(p)]


def report_probe(
    info: Any,
    *,
    framework: str,
    backend: str,
    versions: dict[str, str],
    visible_gpus: int,
    tf32: dict[str, Any],
    precisions: list[str],
    strategies: list[str],
    all_reduce_seconds: Callable[[int, int], float],
    all_reduce_sum: exchanges.AllReduceSum,
) -> None:
    """Collective, the body of both frameworks' probes: gather what every rank sees (`info`,
    a framework's DistInfo), time all-reduces over SIZES (`all_reduce_seconds(bytes,
    repetitions)`; none for one rank), and print the chief's `MARK {json}` line."""
    seen = {
        "node": info.spec.node,
        "device": f"{info.device_type}:{info.device_name}",
        "visible_gpus": visible_gpus,
        "threads": info.threads,
    }
    exchange = {"rank": info.rank, "world_size": info.world_size, "all_reduce_sum": all_reduce_sum}
    ranks = [json.loads(text) for text in exchanges.gather_texts(json.dumps(seen), **exchange)]
    rows = []
    if info.world_size > 1:
        rows = [
            bandwidth_row(size, all_reduce_seconds(size, repetitions), info.world_size)
            for size, repetitions in sizes_and_iterations()
        ]
    found = {
        "framework": framework,
        "backend": backend,
        "world_size": info.world_size,
        "versions": versions,
        "ranks": ranks,
        "tf32": tf32,
        "precisions": precisions,
        "emulated": [
            p for p in ("bf16", "fp16") if info.device_type == "cpu" and devices.emulated_on_cpu(p)
        ],
        "strategies": strategies,
        "all_reduce": rows,
    }
    if info.is_chief:
        print(MARK + json.dumps(found), flush=True)


class Failed(Exception):
    """A check failed; the message names it."""


def launcher(kind: str, nproc: int) -> list[str]:
    """The command prefix that starts `nproc` ranks: common.launch here, srun in a job."""
    if kind == "slurm":
        return ["srun", "--kill-on-bad-exit=1", "bash", "slurm/task.sh"]
    return programs.local_launch(nproc)


def step(text: str) -> None:
    """Say what starts now, so that a slow step is seen while it runs."""
    print(f"[preflight] {text} ...", flush=True)


def probe(framework: str, start: list[str], device: str, tf32: bool) -> dict[str, Any]:
    step(f"{framework}: probe (versions, devices, threads, all-reduce bandwidth)")
    module = programs.get(framework).preflight_module
    command = [*start, sys.executable, "-m", module, "--device", device]
    done = subprocess.run(
        [*command, *(["--tf32"] if tf32 else [])], capture_output=True, text=True, timeout=600
    )
    for line in done.stdout.splitlines():
        if MARK in line:
            found: dict[str, Any] = json.loads(line.split(MARK, 1)[1])
            return found
    errors = [line for line in (done.stderr + done.stdout).splitlines() if "error" in line]
    raise Failed(
        f"{framework} probe (exit {done.returncode}): "
        + ("; ".join(errors[-3:]) or done.stderr[-800:])
    )


def profile_links(
    framework: str, start: list[str], device: str, folder: Path, max_bytes: int, tiers: bool
) -> list[str]:
    """Run the framework's link tool, up to `max_bytes` a call (`tiers`: with --tiers); the
    report's lines on the profile it wrote."""
    step(f"{framework}: link profile (collectives from 8 B to {_size(max_bytes)}, fitted)")
    out = folder / f"links-{framework}.json"
    module = f"{programs.get(framework).package}.links"
    command = [*start, sys.executable, "-m", module, "--out", str(out), "--device", device]
    command += ["--max-bytes", str(max_bytes), *(["--tiers"] if tiers else [])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0 or not out.is_file():
        tail = " ".join((done.stderr or done.stdout).split())[-600:]
        raise Failed(f"{framework} link profile failed (exit {done.returncode}): {tail}")
    profile = link_profile.read(out)
    lines = [f"  links      {out} ({profile.transport}, {profile.world_size} ranks)"]
    for kind, fit in profile.kinds.items():
        bandwidth = 1 / fit.beta_s_per_byte / 1e9 if fit.beta_s_per_byte else float("inf")
        lines.append(
            f"             {kind:<15} alpha {fit.alpha_s * 1e6:9.1f} µs  "
            f"1/beta {bandwidth:8.3f} GB/s"
        )
    return lines + [f"           {line}" for line in link_lines.tier_lines(profile)]


def _size(count: int) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale and count % scale == 0:
            return f"{count // scale} {unit}"
    return f"{count} B"


def train(
    framework: str, start: list[str], found: dict[str, Any], *, device: str, out: Path
) -> list[dict[str, Any]]:
    """20 steps of each strategy x precision; one row per launch."""
    rows = []
    for strategy in found["strategies"]:
        for precision in found["precisions"]:
            name = f"{framework}-{strategy}-{precision}"
            overrides = [
                f"data.train_limit={STEPS * BATCH}",
                "data.test_limit=1000",
                f"train.batch_size={BATCH}",
                "train.epochs=1",
                f"dist.device={device}",
                f"{framework}.mixed_precision={precision}",
                f"output.dir={out}",
                f"output.run_name={name}",
                f"{framework}.strategy={strategy}",
            ]
            command = [*start, *programs.get(framework).train_command(overrides, "--quiet")]
            step(f"{name}: {STEPS} training steps")
            done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
            records = metrics.scan(out / name / METRICS_FILENAME).records
            ends = [record for record in records if isinstance(record, RunEnd)]
            if done.returncode != 0 or not ends or ends[-1].status != "success":
                tail = " ".join((done.stderr or done.stdout).split())[-600:]
                raise Failed(f"{name}: 20 training steps failed (exit {done.returncode}): {tail}")
            epoch = [record for record in records if isinstance(record, Epoch)][-1]
            rows.append({"run": name, "samples_per_s": epoch.samples_per_s})
    return rows


def report(found: dict[str, Any], rows: list[dict[str, Any]], linked: list[str]) -> str:
    lines = [f"{found['framework']}: {found['world_size']} rank(s), backend {found['backend']}"]
    lines.append("  versions   " + ", ".join(f"{k} {v}" for k, v in found["versions"].items()))
    for rank, seen in enumerate(found["ranks"]):
        threads = seen["threads"]
        lines.append(
            f"  rank {rank:<5} {seen['node']}: {seen['device']}, {seen['visible_gpus']} GPU(s) "
            f"visible, {threads.get('intra_op')} intra-op / {threads.get('inter_op')} "
            "inter-op threads"
        )
    lines.append("  tf32       " + ", ".join(f"{k} {v}" for k, v in found["tf32"].items()))
    emulated = found.get("emulated") or []
    lines.append(
        "  precisions "
        + ", ".join(found["precisions"])
        + (f" ({', '.join(emulated)} emulated by this CPU: not trained)" if emulated else "")
    )
    if found["all_reduce"]:
        lines.append("  all-reduce       bytes   time µs  algbw GB/s  busbw GB/s")
        for row in found["all_reduce"]:
            lines.append(
                f"             {row['bytes']:>11,} {row['time_us']:>9.1f} "
                f"{row['algbw_gbps']:>11.3f} {row['busbw_gbps']:>11.3f}"
            )
    lines += linked
    for row in rows:
        lines.append(f"  train      {row['run']:<24} ok, {row['samples_per_s']:,.0f} samples/s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m common.tools.preflight", description=__doc__)
    parser.add_argument("--nproc", type=int, default=2, help="ranks (local launcher only)")
    parser.add_argument("--launcher", default="local", choices=["local", "slurm"])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    parser.add_argument("--frameworks", default="torch,tf")
    parser.add_argument("--tf32", action="store_true", help="probe with dist.tf32=true")
    parser.add_argument("--out", help="folder for the 20-step runs (default: a temporary one)")
    parser.add_argument(
        "--links-dir",
        default="results",
        type=Path,
        help="where each framework's link profile goes (links-<framework>.json), for "
        "compare.py --project (default: results)",
    )
    parser.add_argument(
        "--links-max-bytes",
        type=int,
        default=link_profile.SIZES[-1],
        metavar="BYTES",
        help=f"the link profile's largest call (default {link_profile.SIZES[-1]:,}: 64 MiB; "
        "a smaller one measures slow links sooner, and fits on fewer sizes)",
    )
    args = parser.parse_args(argv)
    if args.links_max_bytes < link_profile.SIZES[1]:
        parser.error(
            f"--links-max-bytes {args.links_max_bytes}: a fit takes two sizes at least, and the "
            f"second is {link_profile.SIZES[1]} bytes"
        )
    start = launcher(args.launcher, args.nproc)
    with tempfile.TemporaryDirectory(prefix="preflight-") as scratch:
        out = Path(args.out or scratch)
        for framework in args.frameworks.split(","):
            try:
                found = probe(framework, start, args.device, args.tf32)
                linked = []
                if found["world_size"] > 1:  # --tiers: torch's only (MWMS has no sub-groups)
                    nodes = [rank["node"] for rank in found["ranks"]]
                    tiers = framework == "torch" and link_groups.tiers_fit(nodes)
                    linked = profile_links(
                        framework, start, args.device, args.links_dir, args.links_max_bytes, tiers
                    )
                rows = train(framework, start, found, device=args.device, out=out)
            except (Failed, subprocess.TimeoutExpired) as failure:
                print(f"preflight FAILED: {failure}", file=sys.stderr)
                return 1
            print(report(found, rows, linked), flush=True)
    print("preflight passed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
