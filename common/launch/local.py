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
import ctypes
import functools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import IO

from common.launch.cluster import (
    LAUNCHER_MARK,
    RUN_DIR_VARIABLE,
    STOP_REASON_VARIABLE,
    free_ports,
    local_spec,
    unique_stamp,
    write_tf_config,
)

POLL_S = 0.05
PR_SET_PDEATHSIG = 1  # linux/prctl.h
_LIBC = ctypes.CDLL(None, use_errno=True)
STOPPED_S = 1.0  # a rank stopped this long is taken to have stopped answering


def _dies_with(launcher: int) -> None:
    """In a rank between fork and exec: the kernel kills it with SIGKILL when the launcher dies,
    whatever kills the launcher (a timeout's SIGKILL cannot be handled to stop the ranks)."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != launcher:  # the launcher died before prctl: nobody would kill this rank
        os._exit(1)


def rank_environments(nproc: int, base_env: dict[str, str]) -> list[dict[str, str]]:
    """The environment of every rank: torchrun's variables plus TF_CONFIG, on free ports."""
    master_port, *tf_ports = free_ports(nproc + 1)
    run_id = "local-" + unique_stamp()
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


def _relay(rank: int, stream: IO[bytes], lock: threading.Lock) -> None:
    for line in iter(stream.readline, b""):
        with lock:
            sys.stdout.buffer.write(f"[rank {rank}] ".encode() + line)
            sys.stdout.flush()
    stream.close()


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def is_stopped(pid: int) -> bool:
    """Whether process `pid` is stopped (SIGSTOP, SIGTSTP; state T in /proc/PID/stat)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


def what_happened(rank: int, process: subprocess.Popen[bytes], stopped: bool = False) -> str:
    """One rank's failure as the launcher saw it, naming its pid."""
    where = f"pid {process.pid} on {socket.gethostname()}"
    if stopped:
        return f"rank {rank} stopped answering: its process is stopped (SIGSTOP; {where})"
    code = process.returncode or 0
    if code < 0:
        return f"rank {rank} was killed by {signal.Signals(-code).name} ({where})"
    return f"rank {rank} failed with exit code {code} ({where})"


def _first_failure(processes: list[subprocess.Popen[bytes]]) -> tuple[int, int] | None:
    """(rank, returncode) of the rank that failed, among those found dead in one pass. A rank
    killed by a signal is the cause rather than a peer that then failed in a collective."""
    failed = [(rank, p.returncode) for rank, p in enumerate(processes) if p.returncode]
    return min(failed, key=lambda found: (found[1] >= 0, found[0]), default=None)


class Watch:
    """Which rank is at fault, as the launcher sees its children: the first found killed by a
    signal or failed, or, before either, one found stopped for STOPPED_S (its peers will fail
    in a collective later, and only have noticed it). Its description goes into the reason
    file at once, so that the ranks that notice can name it in their run_end."""

    def __init__(self, processes: list[subprocess.Popen[bytes]], reason_file: Path) -> None:
        self.processes, self.reason_file = processes, reason_file
        self.culprit: int | None = None
        self.culprit_stopped = False
        self.failed_at: float | None = None
        self.stopped_since: dict[int, float] = {}
        self.noticed: dict[int, int] = {}  # ranks that failed on their own after it: exit code
        self.terminating = False  # SIGTERM sent: a rank that ends now was stopped, not failed

    def check(self, now: float) -> None:
        found = _first_failure(self.processes)
        for rank, process in enumerate(self.processes):
            if process.returncode is None and is_stopped(process.pid):
                self.stopped_since.setdefault(rank, now)
            else:
                self.stopped_since.pop(rank, None)
        stopped = [r for r, since in self.stopped_since.items() if now - since > STOPPED_S]
        if self.culprit_stopped and not found and self.culprit not in self.stopped_since:
            self.culprit, self.culprit_stopped = None, False  # it was continued in time
            self.reason_file.unlink(missing_ok=True)
        if self.culprit is None and (stopped or found):
            self.culprit = stopped[0] if stopped else found[0] if found else None
            self.culprit_stopped = bool(stopped)
            self.reason_file.write_text(self.describe(), encoding="utf-8")
        if found and self.failed_at is None:
            self.failed_at = now
        if self.culprit is None or self.terminating:
            return
        for rank, process in enumerate(self.processes):
            if rank != self.culprit and process.returncode and rank not in self.noticed:
                self.noticed[rank] = process.returncode

    def describe(self) -> str:
        assert self.culprit is not None
        process = self.processes[self.culprit]
        return what_happened(self.culprit, process, self.culprit_stopped)

    def exit_code(self) -> int:
        assert self.culprit is not None
        code = self.processes[self.culprit].returncode
        if self.culprit_stopped or code is None:
            code = next(iter(self.noticed.values()), 1)
        return _exit_code(code)

    def last_line(self) -> str:
        noticed = ", ".join(str(rank) for rank in sorted(self.noticed))
        seen = (
            f"; rank{'s' if len(self.noticed) > 1 else ''} {noticed} only noticed it"
            if noticed
            else ""
        )
        return f"[launch] {self.describe()}{seen}; stopped the other ranks; exit {self.exit_code()}"


def end_missing_run_end(note: Path, error: str) -> None:
    """Write the run_end the chief could not (`python -m common.core.ends`): a no-op when the
    run has one, or did not start."""
    command = [sys.executable, "-m", "common.core.ends", "--note", str(note), "--error", error]
    subprocess.run(command, check=False, timeout=60)


def run(command: list[str], nproc: int, grace_s: float = 5.0) -> int:
    """Run `command` as `nproc` ranks; return 0, or the failing rank's exit code.

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
    base_env = {**os.environ, STOP_REASON_VARIABLE: str(reason_file), RUN_DIR_VARIABLE: str(note)}
    for rank, env in enumerate(rank_environments(nproc, base_env)):
        try:
            process = subprocess.Popen(
                command,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopping it stops its children
                preexec_fn=functools.partial(_dies_with, os.getpid()),
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

    watch = Watch(processes, reason_file)
    interrupted: list[int] = []
    previous = {
        signum: signal.signal(signum, lambda signum, frame: interrupted.append(signum))
        for signum in (signal.SIGINT, signal.SIGTERM)
    }
    term_at = kill_at = None
    try:
        # poll every process on every pass (any() would stop at the first one still running)
        while [process.poll() for process in processes].count(None):
            now = time.monotonic()
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
                    _signal_group(process, signal.SIGKILL)
            time.sleep(POLL_S)
        for relay in relays:
            relay.join(timeout=5)
        if interrupted:
            end_missing_run_end(
                note, f"the launcher was stopped by {signal.Signals(interrupted[0]).name}"
            )
            print(f"[launch] interrupted; stopped all {nproc} ranks", file=sys.stderr)
            return 128 + interrupted[0]
        watch.check(time.monotonic())
        if watch.culprit is None or not any(process.returncode for process in processes):
            return 0
        end_missing_run_end(note, f"{watch.describe()} (seen by the launcher)")
        print(watch.last_line(), file=sys.stderr)
        return watch.exit_code()
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
