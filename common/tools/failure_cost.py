"""What a lost rank costs each framework and strategy: one rank is SIGKILLed at a fixed step
(`SUITE_KILL_AT`), the launcher starts every rank again (`local`: `python -m common.launch
--max-restarts 1`; `slurm`: `slurm/run_slurm.sh` with SUITE_MAX_RESTARTS=1), and the run goes
on from its last step checkpoint.

    python -m common.tools.failure_cost [--cases torch-ddp,torch-fsdp2,tf-mwms] [--nproc 2]
        [--every 20] [--kill-at 50] [--launcher local|slurm] [--out DIR]

Per case: the step time and each checkpoint's save; the time to notice the loss (kill to the
failed launch's run_end) and to recover (to the first step after the resume), the steps lost;
and the checkpoint's load, also resharded to half the ranks. Times are read as each record
reaches the metrics file.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common.core.records.records import METRICS_FILENAME
from common.report import lost_rank_table, measured_files

CASES = {
    "torch-ddp": ("torch_impl.train", ["torch.strategy=ddp"]),
    "torch-fsdp2": ("torch_impl.train", ["torch.strategy=fsdp2"]),
    "tf-mwms": ("tf_impl.train", []),
}
SETTINGS = [
    "data.train_limit=6400",
    "data.test_limit=1000",
    "train.epochs=2",
    "model.name=cnn",
    "model.dropout=false",
    "optim.name=adam",
    "train.log_every_steps=1",
    "train.keep_checkpoints=0",
    "dist.timeout_s=30",
]
KILLED = re.compile(r"SIGKILL at (\d+\.\d+)")
POLL_S = 0.005


REPO = Path(__file__).resolve().parents[2]
SLURM_CONFIG = "configs/mlp_adam.yaml"  # what SETTINGS leave of it: the suite's defaults


def launch(module: str, nproc: int, settings: list[str], *extra: str) -> list[str]:
    """`module` as `nproc` ranks of the local launcher (`extra`: the launcher's options)."""
    launcher = [sys.executable, "-m", "common.launch", "--nproc", str(nproc), *extra, "--"]
    program = [sys.executable, "-m", module, "--quiet", *[f"--set={s}" for s in settings]]
    return launcher + program


class Launcher:
    """How a case's runs start: `run` gives (the ranks' output, the metrics' arrivals)."""

    def __init__(self, name: str, base: dict[str, str]) -> None:
        self.name, self.base = name, base

    def run(
        self, module: str, nproc: int, settings: list[str], run_dir: Path, **options: Any
    ) -> tuple[str, list[Any]]:
        """`options`: restarts (how many), resume (from run_dir's checkpoint), env (more)."""
        restarts, env = options.get("restarts", 0), {**self.base, **options.get("env", {})}
        named = [*settings, f"output.dir={run_dir.parent}", f"output.run_name={run_dir.name}"]
        if self.name == "local":
            extra = ["--max-restarts", str(restarts)] if restarts else []
            command = launch(module, nproc, named, *extra)
            if options.get("resume"):
                command.append("--resume")
            return watched(command, run_dir / METRICS_FILENAME, env)
        output = run_dir.parent / f"{run_dir.name}.out"
        framework = "torch" if module.startswith("torch") else "tf"
        command = [
            *["sbatch", "--wait", "--quiet", "--nodes=1", f"--ntasks={nproc}"],
            *[f"--job-name={run_dir.name}", f"--output={output}", "slurm/run_slurm.sh"],
            *[framework, SLURM_CONFIG, *[part for s in named for part in ("--set", s)]],
            *(["--resume"] if options.get("resume") else []),  # another job's folder
        ]
        env = {**env, "SUITE_RESULTS": str(run_dir.parent), "SUITE_MAX_RESTARTS": str(restarts)}
        _, arrivals = watched(command, run_dir / METRICS_FILENAME, env)
        return output.read_text(), arrivals


def watched(command: list[str], metrics: Path, env: dict[str, str]) -> tuple[str, list[Any]]:
    """Run `command`; (its output, [(arrival time, record)] of every metrics line)."""
    arrivals: list[tuple[float, dict[str, Any]]] = []
    with tempfile.TemporaryFile("w+") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=env, cwd=REPO
        )
        offset = 0
        while True:
            done = process.poll() is not None
            if metrics.is_file():
                with metrics.open(encoding="utf-8") as stream:
                    stream.seek(offset)
                    for line in iter(stream.readline, ""):
                        if not line.endswith("\n"):
                            break
                        offset += len(line.encode())
                        arrivals.append((time.time(), json.loads(line)))
            if done:
                break
            time.sleep(POLL_S)
        output.seek(0)
        text = output.read()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:6])} ... exit {process.returncode}:\n{text}")
    return text, arrivals


def cut_back(run_dir: Path, checkpoint: str, to: Path) -> Path:
    """A copy of `run_dir` as its launch would have left it had it died right after
    `checkpoint`: no later checkpoint, its records up to that step, no run_end."""
    shutil.copytree(run_dir, to)
    manifest = json.loads((to / "checkpoints" / checkpoint / "manifest.json").read_text())
    for folder in (to / "checkpoints").iterdir():
        if folder.name > checkpoint:
            shutil.rmtree(folder)
    kept = []
    for line in (to / METRICS_FILENAME).read_text().splitlines(keepends=True):
        record = json.loads(line)
        later = record["record"] == "step" and record["step"] > manifest["global_step"]
        if later or record["record"] == "run_end":
            break
        kept.append(line)
    (to / METRICS_FILENAME).write_text("".join(kept))
    return to


def measure(
    case: str, nproc: int, every: int, kill_at: int, root: Path, launcher: Launcher
) -> dict[str, Any]:
    module, strategy = CASES[case]
    cadence = [*SETTINGS, *strategy, f"train.checkpoint_every_steps={every}"]
    saved = root / f"{case}-saved"
    _, arrivals = launcher.run(module, nproc, cadence, saved)
    epochs = [record for _, record in arrivals if record["record"] == "epoch"]
    manifests = sorted((saved / "checkpoints").glob("*/manifest.json"))
    saves = [json.loads(path.read_text())["save_s"] for path in manifests]
    killed = root / f"{case}-killed"
    kill = {"SUITE_KILL_AT": f"1:{kill_at}"}
    text, arrivals = launcher.run(module, nproc, cadence, killed, restarts=1, env=kill)
    killed_at = float(KILLED.findall(text)[0])
    kinds = [record["record"] for _, record in arrivals]
    failed_end = arrivals[kinds.index("run_end")]
    resume_index = kinds.index("resume")
    resumed = arrivals[resume_index][1]
    first_step = next(t for t, r in arrivals[resume_index:] if r["record"] == "step")
    half = max(1, nproc // 2)
    checkpoint = manifests[len(manifests) // 2].parent.name  # one inside the run
    resized = cut_back(saved, checkpoint, root / f"{case}-resized")
    _, arrivals = launcher.run(module, half, cadence, resized, resume=True)
    reloaded = next(r for _, r in arrivals if r["record"] == "resume")
    step_s = statistics.median(e["step_time_p50_s"] for e in epochs[1:] or epochs)
    return {
        "case": case,
        "launcher": launcher.name,
        "ranks": nproc,
        "step_s": step_s,
        "save_s": statistics.median(saves),
        "save_per_step_s": statistics.median(saves) / every,
        "notice_s": failed_end[0] - killed_at,
        "recover_s": first_step - failed_end[0],
        "steps_lost": kill_at - (resumed.get("step") or 0),
        "load_s": resumed.get("load_s"),
        "resharded_load_s": reloaded.get("load_s"),
        "resharded_to": half,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m common.tools.failure_cost", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--cases", default=",".join(CASES), help="of " + ", ".join(CASES))
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--every", type=int, default=20, help="checkpoint every N steps")
    parser.add_argument("--kill-at", type=int, default=50, help="rank 1 dies after this step")
    parser.add_argument("--launcher", default="local", choices=["local", "slurm"])
    parser.add_argument("--out", help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args(argv)
    cases = args.cases.split(",")
    unknown = [case for case in cases if case not in CASES]
    if unknown:
        parser.error(f"--cases: unknown {', '.join(unknown)}; choose from {', '.join(CASES)}")
    if args.nproc < 2:
        parser.error("--nproc must be >= 2: one rank is killed and the others must notice")
    if not 1 <= args.every < args.kill_at < 200:
        parser.error("need 1 <= --every < --kill-at < 200 (the run has 200 steps)")
    if args.launcher == "slurm" and not shutil.which("sbatch"):
        parser.error("--launcher slurm: no sbatch here; run it where SLURM's commands are")
    launcher = Launcher(args.launcher, {**os.environ})
    with tempfile.TemporaryDirectory(prefix="failure-cost-") as scratch:
        root = Path(args.out or scratch)
        root.mkdir(parents=True, exist_ok=True)
        rows = []
        for case in cases:
            print(f"[failure-cost] {case}: {args.nproc} ranks ...", file=sys.stderr, flush=True)
            rows.append(measure(case, args.nproc, args.every, args.kill_at, root, launcher))
    print(lost_rank_table.markdown(rows))
    if args.out:  # for compare.py, beside the runs
        written = Path(args.out) / f"failure_cost-{args.launcher}.json"
        command = ["python", "-m", "common.tools.failure_cost", *(argv or sys.argv[1:])]
        measured_files.write(written, rows, command)
        print(f"[failure-cost] wrote {written} (compare.py shows it)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
