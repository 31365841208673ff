"""Start N ranks of a command on this machine, as torchrun or a SLURM step would.

    python -m common.launch --nproc 2 -- python -m torch_impl.train --config configs/mlp_adam.yaml

Each rank gets torchrun's variables and a TF_CONFIG naming one free localhost port per rank,
so the same launcher starts either framework; output lines carry the rank. When a rank fails
the others are stopped (SIGTERM, then SIGKILL after --grace seconds) and the launcher exits
with the failing rank's code, or with --max-restarts K starts every rank again. SIGINT, SIGTERM
and SIGHUP stop every rank, which write run_end naming the signal; SIGUSR1 (a scheduler's
warning) is passed on, and the ranks checkpoint and leave with exit 75, as the launcher does.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from common.launch import rank_processes
from common.launch.cluster import (
    LAUNCHER_MARK,
    PREEMPTED_EXIT,
    RUN_DIR_VARIABLE,
    STOP_REASON_VARIABLE,
    local_spec,
    unique_stamp,
    write_tf_config,
)
from common.launch.ports import free_ports
from common.launch.watch import Watch, last_run_end

POLL_S = 0.05
KILL_WAIT_S = 5.0  # after SIGKILL and the grace period, for a rank the kernel holds
# Signals that stop a launch: each rank gets SIGTERM and writes run_end (aborted) naming it.
# SIGHUP is what closing the terminal of a foreground launch sends.
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def rank_environments(nproc: int, base_env: dict[str, str]) -> list[dict[str, str]]:
    """The environment of every rank: torchrun's variables plus TF_CONFIG, on free ports."""
    master_port, *tf_ports = free_ports(nproc + 1)
    run_id = base_env.get("SUITE_RUN_ID") or "local-" + unique_stamp()
    spec = local_spec(nproc, master_port=master_port, tf_ports=tuple(tf_ports), launch_id=run_id)
    environments = []
    for rank in range(nproc):
        env = dict(base_env)
        env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            GROUP_RANK="0",
            WORLD_SIZE=str(nproc),
            LOCAL_WORLD_SIZE=str(nproc),
            MASTER_ADDR=spec.master_addr,
            MASTER_PORT=str(master_port),
            SUITE_RUN_ID=run_id,
            PYTHONUNBUFFERED="1",
        )
        env[LAUNCHER_MARK] = "local"
        write_tf_config(replace(spec, rank=rank, local_rank=rank), env)
        environments.append(env)
    return environments


def _pass_on_preemption(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGUSR1 to the launcher (a scheduler's warning before the time limit) goes to every
    rank's main process, as slurm/run_slurm.sh passes it on: they checkpoint at the next step
    boundary (with train.checkpoint_every_steps) or the epoch's end, and leave with
    PREEMPTED_EXIT."""
    print("[launch] SIGUSR1: asking the ranks to checkpoint and stop", flush=True)
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGUSR1)


def _preempted(note: Path) -> str:
    """The launcher's last line for a preempted run: where it checkpointed, from its run_end."""
    end = last_run_end(note) or {}
    epoch, step = (
        end.get("epochs_completed"),
        re.search(r"checkpointed step (\d+)", str(end.get("error"))),
    )
    where = "checkpointed"
    if step:  # inside an epoch
        where = f"checkpointed at step {step[1]}"
    elif isinstance(epoch, int):
        where = f"checkpointed at epoch {epoch}"
    return f"preempted: {where}, resume with --resume (exit {PREEMPTED_EXIT})"


def end_missing_run_end(note: Path, error: str) -> None:
    """Write the run_end the chief could not (`python -m common.core.run.run_end`): a no-op when the
    run has one, or did not start."""
    command = [
        sys.executable,
        "-m",
        "common.core.run.run_end",
        "--note",
        str(note),
        "--error",
        error,
    ]
    subprocess.run(command, check=False, timeout=60)


def run(command: list[str], nproc: int, grace_s: float = 5.0, max_restarts: int = 0) -> int:
    """Run `command` as `nproc` ranks; return 0, or the failing rank's exit code.

    With `max_restarts` K, an attempt that failed starts every rank again, up to K times, with
    the same run id and torchrun's TORCHELASTIC_RESTART_COUNT and TORCHELASTIC_MAX_RESTARTS: a
    training program goes on from its last checkpoint. A refusal (exit 2), a preemption and a
    stop from outside are not restarted: another attempt would meet the same."""
    run_id = "local-" + unique_stamp()
    code = 0
    for attempt in range(max_restarts + 1):
        extra = {"SUITE_RUN_ID": run_id}
        if max_restarts:
            extra["TORCHELASTIC_RESTART_COUNT"] = str(attempt)
            extra["TORCHELASTIC_MAX_RESTARTS"] = str(max_restarts)
        code, stopped = _attempt(command, nproc, grace_s, extra)
        if stopped or code in (0, 2, PREEMPTED_EXIT) or attempt == max_restarts:
            return code
        print(
            f"[launch] restart {attempt + 1} of {max_restarts}: all {nproc} ranks start again "
            "and go on from the run's last checkpoint",
            file=sys.stderr,
            flush=True,
        )
    return code


def _attempt(
    command: list[str], nproc: int, grace_s: float, extra_env: dict[str, str]
) -> tuple[int, bool]:
    """One start of the ranks: (0 or the failing rank's exit code, whether the launcher was
    stopped from outside).

    When a rank fails, the others get `grace_s` to fail on their own (their collectives
    notice the lost peer and they write their run_end with that cause), then SIGTERM, then
    SIGKILL after another `grace_s`. As soon as the launcher sees a rank fail (or stopped), it
    writes which into the file named by SUITE_STOP_REASON, which the ranks read into their
    run_end. A run whose chief could not write its run_end gets one from the launcher."""
    lock = threading.Lock()
    processes: list[subprocess.Popen[bytes]] = []
    relays: list[threading.Thread] = []
    reason_dir = tempfile.TemporaryDirectory(prefix="suite-launch-")
    reason_file = Path(reason_dir.name) / "stop-reason"
    note = Path(reason_dir.name) / "run-dir"
    base_env = {
        **os.environ,
        **extra_env,
        STOP_REASON_VARIABLE: str(reason_file),
        RUN_DIR_VARIABLE: str(note),
    }
    for rank, env in enumerate(rank_environments(nproc, base_env)):
        try:
            process = subprocess.Popen(
                command,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopping it stops its children
                preexec_fn=functools.partial(rank_processes.dies_with, os.getpid()),
            )
        except OSError as error:
            for started in processes:
                rank_processes.signal_group(started, signal.SIGKILL)
            print(f"[launch] cannot start {command[0]!r}: {error}", file=sys.stderr)
            return 127, True
        relay = threading.Thread(
            target=rank_processes.relay, args=(rank, process.stdout, lock), daemon=True
        )
        relay.start()
        processes.append(process)
        relays.append(relay)

    watch = Watch(processes, reason_file, note)
    interrupted: list[int] = []
    preempt: list[int] = []  # SIGUSR1s not yet passed on
    previous = {
        signum: signal.signal(signum, lambda signum, frame: interrupted.append(signum))
        for signum in STOPS
    }
    previous[signal.SIGUSR1] = signal.signal(
        signal.SIGUSR1, lambda signum, frame: preempt.append(signum)
    )
    term_at = kill_at = None
    try:
        # poll every process on every pass (any() would stop at the first one still running)
        while [process.poll() for process in processes].count(None):
            now = time.monotonic()
            if preempt:
                preempt.clear()
                _pass_on_preemption(processes)
            if not interrupted:
                watch.check(now)
            if interrupted and term_at is None:
                reason_file.write_text(
                    f"the launcher was stopped by {signal.Signals(interrupted[0]).name}"
                )
                term_at = now
            failed_at = watch.failed_at
            if failed_at is not None and term_at is None and now > failed_at + grace_s:
                term_at = now
            if term_at is not None and kill_at is None:
                watch.terminating = True
                # The rank's main process only: its helpers (DataLoader workers) keep running
                # while it writes its run_end; SIGKILL to the whole group comes after grace_s.
                for process in processes:
                    if process.poll() is None:
                        process.send_signal(signal.SIGTERM)
                kill_at = now + grace_s
            if kill_at is not None and now > kill_at:
                for process in processes:
                    rank_processes.signal_group(process, signal.SIGKILL)
                if now > kill_at + grace_s + KILL_WAIT_S:
                    rank_processes.leave_unkillable(processes)
                    break
            time.sleep(POLL_S)
        for relay, process in zip(relays, processes, strict=True):
            relay.join(timeout=5 if process.returncode is not None else 0)
        if interrupted:
            end_missing_run_end(
                note, f"the launcher was stopped by {signal.Signals(interrupted[0]).name}"
            )
            print(f"[launch] interrupted; stopped all {nproc} ranks", file=sys.stderr)
            return 128 + interrupted[0], True
        watch.check(time.monotonic())
        if watch.culprit is None and any(p.returncode == PREEMPTED_EXIT for p in processes):
            print(f"[launch] {_preempted(note)}", file=sys.stderr)
            return PREEMPTED_EXIT, False
        if watch.culprit is None or not any(process.returncode for process in processes):
            return 0, False
        end_missing_run_end(note, f"{watch.describe()} (seen by the launcher)")
        print(watch.last_line(), file=sys.stderr)
        return watch.exit_code(), False
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        reason_dir.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m common.launch",
        description="Start N ranks of a command on this machine (torchrun variables + TF_CONFIG).",
    )
    parser.add_argument("--nproc", type=int, required=True, help="number of ranks to start")
    parser.add_argument(
        "--grace",
        type=float,
        default=5.0,
        help="after a rank fails: seconds the others get to fail on their own before SIGTERM, "
        "and again between SIGTERM and SIGKILL",
    )
    parser.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        metavar="K",
        help="start every rank again after a failure, up to K times; the training programs go "
        "on from the run's last checkpoint (as torchrun --max-restarts K)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- command and its arguments")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given: python -m common.launch --nproc N -- COMMAND ...")
    if args.nproc < 1:
        parser.error(f"--nproc must be >= 1, got {args.nproc}")
    if not 0 <= args.grace <= 9:
        parser.error("--grace must be between 0 and 9 seconds (peers must stop within 10 s)")
    if args.max_restarts < 0:
        parser.error(f"--max-restarts must be >= 0, got {args.max_restarts}")
    return run(command, args.nproc, args.grace, args.max_restarts)


if __name__ == "__main__":
    raise SystemExit(main())
