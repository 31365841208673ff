"""Where a command's CPU time goes, process by process: every process on the host, read from
/proc every 0.25 s while the command runs, each counted as last seen (ended ones included).

    python tests/cpu_census.py [--top 15] [--keep FILE] -- make test

It prints the CPU seconds by kind (ranks started cold by program, ranks forked warm from
tests/warm_ranks.py, pytest and its workers, other programs by module) and by test file: each
process belongs to the test of the PYTEST_CURRENT_TEST it was started with (SLURM jobs inherit
it through sbatch), a warm fork to its client's. A process briefer than the interval may be
missed; the sampling costs about 2% of a core. It exits as the command does.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

INTERVAL_S = 0.25
TICKS = os.sysconf("SC_CLK_TCK")
TEST_VARIABLE = b"PYTEST_CURRENT_TEST="


def _test_of(pid: str) -> str:
    try:
        variables = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return ""
    for item in variables:
        if item.startswith(TEST_VARIABLE):
            return item[len(TEST_VARIABLE) :].decode(errors="replace").rsplit(" ", 1)[0]
    return ""


def sample(seen: dict[tuple[int, int], dict], skip: int, before: bool = False) -> None:
    """Every process's CPU seconds now, into `seen` (keyed by pid and start time); `before`:
    what the processes running before the command have used so far is not counted."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == skip:
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        key = (int(pid), int(fields[19]))
        found = seen.get(key)
        if found is None:
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            found = seen[key] = {
                "pid": int(pid),
                "ppid": int(fields[1]),
                "argv": [part for part in argv.split("\0") if part],
                "start": int(fields[19]),
                "test": _test_of(pid),
                "base_s": 0.0,
            }
        found["cpu_s"] = (int(fields[11]) + int(fields[12])) / TICKS - found["base_s"]
        if before:
            found["base_s"], found["cpu_s"] = found["cpu_s"], 0.0


def kind(process: dict, warm: set[int]) -> str:
    argv = process["argv"]
    if process["pid"] in warm:
        module = argv[4] if len(argv) > 4 else "?"
        return f"forked warm: {module}" if process["ppid"] in warm else f"warm server: {module}"
    if "-m" in argv[:-1]:
        module = argv[argv.index("-m") + 1]
        return f"started cold: {module}" if module.endswith(".train") else f"-m {module}"
    if "-c" in argv:
        return "python -c (pytest workers, helpers)"
    return Path(argv[1] if len(argv) > 1 and argv[1].endswith(".py") else argv[0]).name


def census(seen: dict[tuple[int, int], dict]) -> tuple[dict, dict, dict]:
    """CPU seconds by kind, processes by kind, CPU seconds by test file."""
    processes = [p for p in seen.values() if p["argv"] and p.get("cpu_s")]
    warm = {
        p["pid"]
        for p in processes
        if len(p["argv"]) > 2 and p["argv"][1].endswith("warm_ranks.py") and p["argv"][2] == "serve"
    }
    clients = [p for p in processes if len(p["argv"]) > 3 and p["argv"][2:3] == ["run"]]
    seconds: dict[str, float] = collections.Counter()
    counts: dict[str, int] = collections.Counter()
    by_file: dict[str, float] = collections.Counter()
    for process in processes:
        label = kind(process, warm)
        seconds[label] += process["cpu_s"]
        counts[label] += 1
        test = process["test"]
        if process["pid"] in warm and process["ppid"] in warm:  # a fork: its client's test
            (server,) = [p for p in processes if p["pid"] == process["ppid"]][:1] or [None]
            socket = server["argv"][3] if server else None
            mine = [c for c in clients if c["argv"][3] == socket]
            earlier = [c for c in mine if c["start"] <= process["start"]]
            test = max(earlier, key=lambda c: c["start"])["test"] if earlier else ""
        by_file[test.split("::")[0] or "(no test)"] += process["cpu_s"]
    return seconds, counts, by_file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tests/cpu_census.py", description=__doc__)
    parser.add_argument("--top", type=int, default=15, help="test files to list (15)")
    parser.add_argument("--keep", type=Path, help="write every process seen, as JSON lines")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to follow after --, e.g. -- make test")
    seen: dict[tuple[int, int], dict] = {}
    done = threading.Event()

    def follow() -> None:
        while not done.wait(INTERVAL_S):
            sample(seen, os.getpid())

    sample(seen, os.getpid(), before=True)
    watcher = threading.Thread(target=follow, daemon=True)
    watcher.start()
    code = subprocess.call(command)
    done.set()
    watcher.join()
    sample(seen, os.getpid())
    if args.keep:
        args.keep.write_text("".join(json.dumps(p) + "\n" for p in seen.values()))
    seconds, counts, by_file = census(seen)
    total = sum(seconds.values())
    print(f"\nCPU seconds of every process while `{' '.join(command)}` ran: {total:,.0f}")
    print(f"{'CPU s':>9} {'count':>5} {'each':>6}  kind")
    for label, spent in sorted(seconds.items(), key=lambda item: -item[1]):
        if spent >= 0.5:
            print(f"{spent:9.1f} {counts[label]:5d} {spent / counts[label]:6.2f}  {label}")
    print(f"{'CPU s':>9}  test file")
    for path, spent in sorted(by_file.items(), key=lambda item: -item[1])[: args.top]:
        print(f"{spent:9.1f}  {path}")
    return code


if __name__ == "__main__":
    sys.exit(main())
