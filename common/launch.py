"""Start N ranks of a command on this machine, as torchrun or a SLURM step would.

    python -m common.launch --nproc 2 -- python -m torch_impl.train --config configs/mlp_adam.yaml

Each rank gets torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) and a TF_CONFIG naming one free localhost port per rank, so the same
launcher starts either framework. Output lines are prefixed with the rank. When a rank fails,
the others are stopped (SIGTERM, then SIGKILL after --grace seconds) and the launcher exits
with the failing rank's exit code (128 + signal number for a rank killed by a signal).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace

from common.cluster import LAUNCHER_MARK, free_ports, local_spec, write_tf_config

POLL_S = 0.05


def rank_environments(nproc: int, base_env: dict[str, str]) -> list[dict[str, str]]:
    """The environment of every rank: torchrun's variables plus TF_CONFIG, on free ports."""
    master_port, *tf_ports = free_ports(nproc + 1)
    run_id = "local-" + time.strftime("%Y%m%d-%H%M%S")
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


def _relay(rank: int, stream, lock: threading.Lock) -> None:
    for line in iter(stream.readline, b""):
        with lock:
            sys.stdout.buffer.write(f"[rank {rank}] ".encode() + line)
            sys.stdout.flush()
    stream.close()


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def run(command: list[str], nproc: int, grace_s: float = 5.0) -> int:
    """Run `command` as `nproc` ranks; return 0, or the first failing rank's exit code."""
    lock = threading.Lock()
    processes, relays = [], []
    for rank, env in enumerate(rank_environments(nproc, dict(os.environ))):
        try:
            process = subprocess.Popen(
                command,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopping it stops its children
            )
        except OSError as error:
            for started in processes:
                _signal_group(started, signal.SIGKILL)
            print(f"[launch] cannot start {command[0]!r}: {error}", file=sys.stderr)
            return 127
        relay = threading.Thread(target=_relay, args=(rank, process.stdout, lock), daemon=True)
        relay.start()
        processes.append(process)
        relays.append(relay)

    failure: tuple[int, int] | None = None
    interrupted: list[int] = []
    previous = {
        signum: signal.signal(signum, lambda signum, frame: interrupted.append(signum))
        for signum in (signal.SIGINT, signal.SIGTERM)
    }
    kill_at = None
    try:
        # poll every process on every pass (any() would stop at the first one still running)
        while [process.poll() for process in processes].count(None):
            if failure is None and not interrupted:
                for rank, process in enumerate(processes):
                    if process.returncode not in (None, 0):
                        failure = (rank, process.returncode)
                        break
            if (failure or interrupted) and kill_at is None:
                for process in processes:
                    if process.poll() is None:
                        _signal_group(process, signal.SIGTERM)
                kill_at = time.monotonic() + grace_s
            if kill_at is not None and time.monotonic() > kill_at:
                for process in processes:
                    _signal_group(process, signal.SIGKILL)
            time.sleep(POLL_S)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    for relay in relays:
        relay.join(timeout=5)
    if failure is None:
        failure = next(
            ((rank, p.returncode) for rank, p in enumerate(processes) if p.returncode != 0),
            None,
        )
    if interrupted:
        print(f"[launch] interrupted; stopped all {nproc} ranks", file=sys.stderr)
        return 128 + interrupted[0]
    if failure is not None:
        rank, returncode = failure
        print(
            f"[launch] rank {rank} failed with exit code {_exit_code(returncode)}; "
            f"stopped the other ranks",
            file=sys.stderr,
        )
        return _exit_code(returncode)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m common.launch",
        description="Start N ranks of a command on this machine (torchrun variables + TF_CONFIG).",
    )
    parser.add_argument("--nproc", type=int, required=True, help="number of ranks to start")
    parser.add_argument(
        "--grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL"
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
    return run(command, args.nproc, args.grace)


if __name__ == "__main__":
    raise SystemExit(main())
