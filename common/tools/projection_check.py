"""The projection checked from the fewest nodes to more, on the SLURM test cluster: a benchmark
that prints a table, not a test.

    python -m common.tools.projection_check [--nodes 2,8] [--rates 50mbit,200mbit] [--repeats 1]
        [--node-cpu .25] [--strategies ddp,fsdp2,hsdp,mwms] [--profiles-at all] [--out|--from D]

As root, on slurm/testcluster.py's cluster of nodes of a fixed CPU size, every link shaped to
each rate: each framework's link profile on the fewest nodes (torch's with --tiers, 2 ranks a
node, for hsdp; `--profiles-at all`: on every node count); each strategy's runs at every node
count (1 rank a node, hsdp 2); the fewest nodes' runs projected to the others as `compare.py
--project` would, from the fewest nodes' profile and again from all (`merged`). Each repeat
measures every profile and run anew. Each row: medians of the runs' samples/s (epochs 2-3) and
of their projections, each profile point's median pricing them; the error against the range's
nearer end; whether it holds (`projection_table`). `--from DIR` prices a kept `--out` again.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from common.projection import link_profile
from common.projection.profiles import median_of, merged
from common.projection.step_model import project
from common.report.inputs import load_runs
from common.report.runs import RecordedRun
from common.tools.projection_table import Row, judged, table

REPO = Path(__file__).resolve().parents[2]
# The MLP of 784-512-256-10 with Adam, no dropout, 3 epochs of 30 steps of 64: the seed MLP's
# all-reduce (17-31 ms on the wire at 200 Mbit/s) measured the CPU quota more than the model.
SETTINGS = [
    "data.train_limit=1920",
    "data.test_limit=500",
    "train.epochs=3",
    "dist.timeout_s=300",
    "model.dropout=false",
    "model.hidden=[512,256]",
]
SPLIT = "output.split_steps=5"  # torch: the median of 5 profiled steps splits the step
# strategy -> (framework, its settings, ranks a node, the profile that prices it)
CASES = {
    "ddp": ("torch", ["torch.strategy=ddp", SPLIT], 1, "torch"),
    "fsdp2": ("torch", ["torch.strategy=fsdp2", SPLIT], 1, "torch"),
    "hsdp": ("torch", ["torch.strategy=hsdp", SPLIT], 2, "torch-tiers"),
    "mwms": ("tf", [], 1, "tf"),
}
# The link profiles' largest power of 8, also tests/slurm's. The runs' own calls (the MLP's
# gradients: 2,143,272 B) are measured at their sizes (--sizes-of), not read off a line past it.
MAX_BYTES = {"torch": 262_144, "tf": 262_144}
# profile -> (module, ranks a node, its largest call, more options)
PROFILES = {
    "torch": ("torch_impl.links", 1, MAX_BYTES["torch"], []),
    "torch-tiers": ("torch_impl.links", 2, MAX_BYTES["torch"], ["--tiers"]),
    "tf": ("tf_impl.links", 1, MAX_BYTES["tf"], []),
}


class Cluster:
    """The test cluster's commands, on its folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.env = {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")}

    def control(self, *args: str) -> None:
        command = [sys.executable, "slurm/testcluster.py", *args, "--dir", str(self.folder)]
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"testcluster.py {' '.join(args)}: {done.stderr.strip()}")

    def job(self, options: list[str], out: Path, results: Path | None = None) -> None:
        """One SLURM job, waited for; its output is kept in `out`, its runs in `results`."""
        command = ["sbatch", "--wait", "--quiet", "--cpus-per-task=1", f"--output={out}"]
        env = {**self.env, **({"SUITE_RESULTS": str(results)} if results else {})}
        done = subprocess.run([*command, *options], cwd=REPO, env=env)
        if done.returncode != 0:
            tail = out.read_text()[-2000:] if out.exists() else ""
            raise RuntimeError(f"job {out.stem} failed (exit {done.returncode}):\n{tail}")


def profile_path(folder: Path, name: str, nodes: int | None = None, repeat: int = 1) -> Path:
    """Where a profile is kept: on the fewest nodes (None) links-NAME.json, else -xNODES; the
    second and later repeats' .rREPEAT.json."""
    return (
        folder
        / f"links-{name}{f'-x{nodes}' if nodes else ''}{f'.r{repeat}' if repeat > 1 else ''}.json"
    )


def read_profile(folder: Path, name: str, nodes: int | None = None) -> link_profile.LinkProfile:
    """A profile as every repeat kept measured it: per point the median (`median_of`)."""
    first = profile_path(folder, name, nodes)
    repeats = sorted(first.parent.glob(f"{first.stem}.r*.json"))
    return median_of([link_profile.read(path) for path in [first, *repeats]])


def measure_profile(
    cluster: Cluster,
    name: str,
    nodes: int,
    folder: Path,
    more: bool = False,
    repeat: int = 1,
    runs: list[Path] | None = None,
) -> Path:
    """One profile on `nodes` nodes; `more`: on more than the fewest (kept apart); also at the
    sizes of the calls `runs` issue there (`--sizes-of`)."""
    module, per_node, max_bytes, extra = PROFILES[name]
    out = profile_path(folder, name, nodes if more else None, repeat)
    tool = ["srun", sys.executable, "-m", module, "--out", str(out), "--max-bytes", str(max_bytes)]
    tool += ["--sizes-of", ",".join(map(str, runs))] if runs else []
    layout = [f"--nodes={nodes}", f"--ntasks-per-node={per_node}"]
    cluster.job([*layout, "--wrap", " ".join([*tool, *extra])], out.with_suffix(".out"))
    return out


def measure_run(cluster: Cluster, strategy: str, nodes: int, folder: Path) -> Path:
    """One run of `strategy` on `nodes` nodes; its folder."""
    framework, extra, per_node, _ = CASES[strategy]
    name = f"{strategy}-x{nodes}"
    settings = [part for setting in [*SETTINGS, *extra] for part in ("--set", setting)]
    cluster.job(
        [f"--nodes={nodes}", f"--ntasks-per-node={per_node}", f"--job-name={name}"]
        + ["slurm/run_slurm.sh", framework, "configs/mlp_adam.yaml", *settings],
        folder / f"{name}.out",
        results=folder,
    )
    return max(folder.glob(f"{name}-*/"), key=lambda path: int(path.name.rsplit("-", 1)[1]))


def measure_rate(cluster: Cluster, args: argparse.Namespace, rate: str, folder: Path) -> None:
    """Every profile and run of one rate into `folder`, every link shaped to `rate`."""
    names = sorted({CASES[strategy][3] for strategy in args.strategies})
    cluster.control("link", "--link", rate)
    try:
        # Each repeat makes the runs, then measures the profiles again, also at the sizes of
        # the calls of its runs on the fewest nodes: two checks a few hours apart found the
        # 8-node profiles 13-21% apart, their runs 0-9% (docs/communication.md).
        for repeat in range(args.repeats):
            made: dict[str, list[Path]] = {}
            for strategy in args.strategies:
                for nodes in args.nodes:
                    said = f"[projection-check] {rate}: {strategy} x{nodes} ({repeat + 1})"
                    print(said, file=sys.stderr, flush=True)
                    run = measure_run(cluster, strategy, nodes, folder)
                    if nodes == args.nodes[0]:
                        made.setdefault(CASES[strategy][3], []).append(run)
            said = f"[projection-check] {rate}: profiles ({repeat + 1})"
            print(said, file=sys.stderr, flush=True)
            for name in names:
                measure_profile(cluster, name, args.nodes[0], folder, False, repeat + 1, made[name])
            for nodes in args.nodes[1:] if args.profiles_at == "all" else []:
                for name in names:
                    measure_profile(cluster, name, nodes, folder, True, repeat + 1, made[name])
    finally:
        cluster.control("link", "--link", "off")


def read_runs(folder: Path, strategy: str, nodes: int) -> list[RecordedRun]:
    """Every run of `strategy` on `nodes` nodes that `folder` keeps (one per --repeats)."""
    found = sorted(folder.glob(f"{strategy}-x{nodes}-*/metrics.jsonl"))
    if not found:
        raise RuntimeError(f"no run of {strategy} on {nodes} nodes in {folder}")
    runs, problems, _ = load_runs([str(path) for path in found])
    if problems:
        raise RuntimeError(f"{folder}: {problems}")
    return runs


def samples_s(run: RecordedRun) -> float:
    return statistics.median(epoch.samples_per_s for epoch in run.epochs[1:])


def judge_rate(args: argparse.Namespace, rate: str, folder: Path) -> list[Row]:
    """The rows of one rate from what `folder` holds: each strategy's run on the fewest nodes
    projected to the other node counts with its profile, against the run measured there; with
    several runs of each (--repeats), the medians of their projections and of their speeds."""
    fewest, rows = args.nodes[0], []
    for strategy in args.strategies:
        _, _, per_node, name = CASES[strategy]
        bases = {str(fewest): [read_profile(folder, name)]}
        more = [n for n in args.nodes[1:] if profile_path(folder, name, n).is_file()]
        if more:  # --profiles-at all
            kept = [read_profile(folder, name, n) for n in more]
            bases[",".join(map(str, [fewest, *more]))] = bases[str(fewest)] + kept
        runs = {nodes: read_runs(folder, strategy, nodes) for nodes in args.nodes}
        for nodes in args.nodes[1:]:
            measured = statistics.median(samples_s(run) for run in runs[nodes])
            for basis, each in bases.items():
                ends = []
                for run in runs[fewest]:
                    found, caveats = project(run, merged(each), [nodes * per_node])
                    if not found:
                        raise RuntimeError(f"{strategy} at {nodes} nodes not projected: {caveats}")
                    ends.append((found[0].samples_s_low, found[0].samples_s_high))
                low, high = (statistics.median(end) for end in zip(*ends, strict=True))
                rows.append(judged(strategy, rate, nodes, measured, low, high, basis))
    return rows


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m common.tools.projection_check", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--nodes", default="2,8", help="node counts, the fewest projected")
    parser.add_argument("--rates", default="50mbit,200mbit", help="tc rates of every link")
    parser.add_argument("--node-cpu", default="0.25", help="each node's cores (a CPU quota)")
    parser.add_argument("--strategies", default=",".join(CASES), help="of " + ", ".join(CASES))
    parser.add_argument(
        "--profiles-at",
        choices=["fewest", "all"],
        default="fewest",
        help="measure torch's and TensorFlow's link profiles on the fewest nodes only, or on "
        "every node count too (each row then priced both ways)",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="times each profile and run is measured (medians)"
    )
    parser.add_argument("--out", help="keep the runs and profiles here (default: a temp folder)")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/projection-check-slurm"))
    parser.add_argument(
        "--from",
        dest="kept",
        type=Path,
        help="price again what an earlier check kept (its --out), with no cluster and no root",
    )
    args = parser.parse_args(argv)
    try:
        args.nodes = sorted({int(part) for part in args.nodes.split(",")})
    except ValueError:
        parser.error(f"--nodes {args.nodes!r}: give node counts such as 2,8")
    if len(args.nodes) < 2 or args.nodes[0] < 2:
        parser.error("--nodes: two node counts at least, the fewest 2 or more (e.g. 2,8)")
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: give 1 or more runs of each")
    args.strategies = args.strategies.split(",")
    unknown = [name for name in args.strategies if name not in CASES]
    if unknown:
        parser.error(f"--strategies: unknown {', '.join(unknown)}; choose from {', '.join(CASES)}")
    args.rates = [rate for rate in args.rates.split(",") if rate]
    if not args.rates or "off" in args.rates:
        parser.error("--rates: one tc rate at least, such as 50mbit; 'off' checks no link")
    if args.kept is not None:
        missing = [rate for rate in args.rates if not (args.kept / rate).is_dir()]
        if missing:
            parser.error(f"--from {args.kept}: no folder of {', '.join(missing)} (its --rates)")
    elif os.geteuid() != 0:
        parser.error("the test cluster needs root (network namespaces, tc, cgroups): run as root")
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    try:
        rows = rows_of(args)
    except (RuntimeError, ValueError) as error:  # ValueError: a kept profile that is not one
        print(f"projection_check: {error}", file=sys.stderr)
        return 1
    print(f"projected from {args.nodes[0]} nodes (each run's record gives its nodes' CPU quota):")
    print(table(rows))
    if args.out:
        with (Path(args.out) / "projection_check.jsonl").open("w") as out:
            out.writelines(json.dumps(asdict(row)) + "\n" for row in rows)
    return 0 if all(row.ok for row in rows) else 1


def rows_of(args: argparse.Namespace) -> list[Row]:
    """Every rate's rows: from what --from kept, else measured on a cluster brought up here."""
    if args.kept is not None:
        return [row for rate in args.rates for row in judge_rate(args, rate, args.kept / rate)]
    cluster = Cluster(args.dir)
    # SIGTERM as Ctrl-C: the links are unshaped and the cluster taken down on the way out
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    cluster.control("up", "--nodes", str(args.nodes[-1]), "--node-cpu", args.node_cpu)
    rows: list[Row] = []
    try:
        with tempfile.TemporaryDirectory(prefix="projection-check-") as scratch:
            root = Path(args.out or scratch)
            for rate in args.rates:
                folder = root / rate
                folder.mkdir(parents=True, exist_ok=True)
                measure_rate(cluster, args, rate, folder)
                rows += judge_rate(args, rate, folder)
    finally:
        cluster.control("down")
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
