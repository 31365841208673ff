"""Submit a benchmark matrix to SLURM and write a manifest that compare.py reads.

    python slurm/sweep.py --config configs/mlp_adam.yaml [--frameworks torch,tf]
        [--strategies ddp,fsdp2,mwms] [--tasks 1,2,4,8] [--repeats 1] [--tasks-per-node N]
        [--gpus-per-task 1] [--nodes N] [--exclusive] [--parallel] [--dry-run] [--wait]
        [--sizes 0.1M,10M,100M,1B] [--set k=v ...] [-- extra sbatch options]

Every cell (framework x strategy x tasks x size x repeat) is one `sbatch slurm/run_slurm.sh`
job. The jobs run one after another (`--dependency=afterany`), so that no two cells share cores
or links; --parallel lets SLURM run them together. The manifest,
`<results>/sweeps/<sweep>.json`, lists every cell's job id and folder, so `compare.py
<manifest>` reports every run, finished or failed. --wait follows the jobs until they end.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: common/ is beside slurm/

from common.core.config import strategies  # noqa: E402
from common.models import size_names  # noqa: E402

ENDED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}


def _list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def cells(args) -> list[dict]:
    """The matrix, repeats interleaved round-robin; `size` is "" without --sizes (the
    config's own model)."""
    matrix = []
    for framework in _list(args.frameworks):
        own = strategies.of(framework)
        for strategy, tasks, size, repeat in itertools.product(
            [name for name in _list(args.strategies) if name in own],
            [int(t) for t in _list(args.tasks)],
            _list(args.sizes) or [""],
            range(1, args.repeats + 1),
        ):
            if own[strategy].processes == "one" and tasks != 1:
                continue
            matrix.append(
                {
                    "framework": framework,
                    "strategy": strategy,
                    "tasks": tasks,
                    "size": size,
                    "repeat": repeat,
                }
            )
    # round-robin: every cell once per round, so that drift of the machine over the sweep
    # (load, thermals, other jobs) hits every setup alike and repeats stay comparable
    return sorted(matrix, key=lambda cell: cell["repeat"])


def sbatch_command(args, sweep: str, cell: dict, after: str = "") -> list[str]:
    """The sbatch command of one cell; `after`: the job it waits for (sequential sweeps)."""
    size = f"-{cell['size']}" if cell["size"] else ""
    name = (
        f"{sweep}-{cell['framework']}-{cell['strategy']}-n{cell['tasks']}{size}-r{cell['repeat']}"
    )
    command = [
        "sbatch",
        "--parsable",
        f"--job-name={name}",
        f"--ntasks={cell['tasks']}",
        f"--output={args.results}/sweeps/{sweep}/%x-%j.out",
    ]
    if after:
        command.append(f"--dependency=afterany:{after}")
    if args.exclusive:
        command.append("--exclusive")
    if args.nodes:
        command += [f"--nodes={args.nodes}", f"--ntasks-per-node={cell['tasks'] // args.nodes}"]
    elif args.tasks_per_node:
        command.append(f"--ntasks-per-node={min(args.tasks_per_node, cell['tasks'])}")
    if args.gpus_per_task:
        command.append(f"--gpus-per-task={args.gpus_per_task}")
    command += args.sbatch
    command += ["slurm/run_slurm.sh", cell["framework"], args.config]
    command += ["--set", f"{cell['framework']}.strategy={cell['strategy']}"]
    for override in size_names.size_overrides(cell["size"]) if cell["size"] else []:
        command += ["--set", override]
    for override in args.set:
        command += ["--set", override]
    return command


def job_state(job_id: str) -> str:
    shown = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True)
    for word in shown.stdout.split():
        if word.startswith("JobState="):
            return word.split("=", 1)[1]
    return "UNKNOWN"  # gone from the controller's memory (MinJobAge passed)


def write_manifest(path: Path, manifest: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    partial.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="slurm/sweep.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", required=True)
    parser.add_argument("--frameworks", default="torch,tf")
    parser.add_argument(
        "--strategies",
        default="ddp,fsdp2,mwms",
        help="strategies of any framework (common.core.config.strategies); each framework runs "
        "those it has",
    )
    parser.add_argument("--tasks", default="1,2,4,8", help="task (rank) counts")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--sizes",
        default="",
        help="model sizes (common.tools.sizes: presets such as 10M, 1B; widths 4096x4096; w<N>); "
        "pair with --set data.name=synthetic to leave the input pipeline out",
    )
    parser.add_argument("--tasks-per-node", type=int, default=0)
    parser.add_argument("--gpus-per-task", type=int, default=0)
    parser.add_argument("--nodes", type=int, default=0, help="nodes per cell (tasks split evenly)")
    parser.add_argument("--exclusive", action="store_true", help="whole nodes for every job")
    parser.add_argument("--parallel", action="store_true", help="let the jobs run at the same time")
    parser.add_argument("--results", default="results")
    parser.add_argument("--name", default="", help="sweep name (default: sweep-<time>)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--wait", action="store_true", help="wait for every job to end")
    parser.add_argument("sbatch", nargs="*", help="extra sbatch options, after --")
    args = parser.parse_args(argv)
    if not (REPO_ROOT / args.config).is_file() and not Path(args.config).is_file():
        parser.error(f"config {args.config} not found")
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    try:
        [size_names.size_overrides(size) for size in _list(args.sizes)]
    except ValueError as error:
        parser.error(str(error))
    args.results = str(Path(args.results).resolve())
    sweep = args.name or time.strftime("sweep-%Y%m%d-%H%M%S")
    matrix = cells(args)
    if args.nodes:
        uneven = sorted({c["tasks"] for c in matrix if c["tasks"] % args.nodes})
        if uneven:
            parser.error(f"--nodes {args.nodes} does not divide task counts {uneven}")
    if args.dry_run:
        for index, cell in enumerate(matrix):
            after = "" if args.parallel or index == 0 else "<the job before>"
            print(shlex.join(sbatch_command(args, sweep, cell, after)))
        print(f"# {len(matrix)} jobs", file=sys.stderr)
        return 0
    manifest_path = Path(args.results) / "sweeps" / f"{sweep}.json"
    manifest = {"sweep": sweep, "config": args.config, "overrides": args.set, "runs": []}
    (Path(args.results) / "sweeps" / sweep).mkdir(parents=True, exist_ok=True)
    previous = ""
    for cell in matrix:
        command = sbatch_command(args, sweep, cell, "" if args.parallel else previous)
        env = {**os.environ, "SUITE_RESULTS": args.results}  # where run_slurm.sh writes
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, env=env)
        entry = {**cell, "command": shlex.join(command)}
        if done.returncode != 0:
            entry.update(job_id=None, state="SUBMIT_FAILED", error=done.stderr.strip())
            print(f"{command[3]}: submission failed: {done.stderr.strip()}", file=sys.stderr)
        else:
            job_id = done.stdout.strip().split(";")[0]
            name = command[2].split("=", 1)[1]
            result_dir = f"{args.results}/{name}-{job_id}"
            entry.update(job_id=job_id, state="SUBMITTED", result_dir=result_dir)
            previous = job_id
            print(f"submitted {name} as job {job_id}")
        manifest["runs"].append(entry)
        write_manifest(manifest_path, manifest)
    while args.wait:
        for entry in manifest["runs"]:
            if entry["job_id"] and entry["state"] not in ENDED:
                entry["state"] = job_state(entry["job_id"])
        write_manifest(manifest_path, manifest)
        if all(e["state"] in ENDED or not e["job_id"] for e in manifest["runs"]):
            break
        time.sleep(1.0)
    print(f"manifest: {manifest_path}")
    failed = [e for e in manifest["runs"] if e["state"] not in ("COMPLETED", "SUBMITTED")]
    unsubmitted = [e for e in manifest["runs"] if not e["job_id"]]
    return 1 if unsubmitted or (args.wait and failed) else 0


if __name__ == "__main__":
    raise SystemExit(main())
