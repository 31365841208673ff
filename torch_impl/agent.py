"""torchrun for SLURM jobs (`slurm/run_slurm.sh torchrun`): `python -m torch.distributed.run`,
with what a preemptible job needs that torchrun does not do.

    python -m torch_impl.agent [torchrun options] -m torch_impl.train [training options]

- SIGUSR1, SLURM's warning before the time limit, reaches the ranks (torchrun's agent dies of
  it, and its ranks run in sessions of their own).
- When every rank exited 75 (checkpointed, to be requeued) the agent exits 75, so the job
  requeues; when the first rank to fail refused the run (exit 2), the agent exits 2, so that a
  pod's restart rule on exit code 2 (k8s/) fails the job instead of restarting it.
- A failed run without a run_end (its chief was killed) gets one, naming the rank at fault.
- torchrun's log folder (`/tmp/torchelastic_*`), which it never removes, is removed.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import tempfile
from pathlib import Path

from common.core.run import run_end
from common.core.run.stop_signals import PREEMPTED_EXIT
from common.launch.cluster import REFUSED_EXIT, RUN_DIR_VARIABLE


def children(parent: int) -> list[int]:
    """The processes whose parent is `parent` (read from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)"
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[1]) == parent:
            found.append(int(stat.parent.name))
    return found


def _forward(signum: int, frame) -> None:
    for pid in children(os.getpid()):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGUSR1, _forward)
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    args = parse_args(sys.argv[1:] if argv is None else argv)
    made = None
    if args.log_dir is None and args.redirects == "0" and args.tee == "0":
        made = args.log_dir = tempfile.mkdtemp(prefix="torchelastic_")
    try:
        run(args)
    except ChildFailedError as failed:
        codes = {failure.exitcode for failure in failed.failures.values()}
        if codes == {PREEMPTED_EXIT}:
            print(f"[agent] every rank checkpointed on preemption: exit {PREEMPTED_EXIT}")
            return PREEMPTED_EXIT
        rank, first = failed.get_first_failure()
        if first.exitcode == REFUSED_EXIT:  # no run was started: nothing to end
            print(f"[agent] rank {rank} refused the run: exit {REFUSED_EXIT}", file=sys.stderr)
            return REFUSED_EXIT
        how = (
            f"was killed by {first.signal_name()}"
            if first.exitcode < 0
            else f"failed with exit code {first.exitcode}"
        )
        note = os.environ.get(RUN_DIR_VARIABLE, "")
        error = f"rank {rank} {how} (pid {first.pid} on {socket.gethostname()}; seen by torchrun)"
        run_end.main(["--note", note, "--error", error])
        raise
    finally:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
