"""A launched run and its framework's plain loop started together for the bench
(`common.tools.measure`), each epoch of one taken in turn with a pass of the other
(`common.core.run.turns`), so that a slow spell of a shared host falls on both alike."""

from __future__ import annotations

import socket
import subprocess
import tempfile


def in_turn(
    command: list[str], loop: list[str], timeout_s: float
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """(the run's completed process, the loop's) of a one-process training `command` and a
    baselines command `loop` (`<framework>_impl.bench`), each given its end of one socket
    (`--in-turn FD`): the loop takes the first turn. Either one that fails or ends leaves the
    other alone; both are killed at `timeout_s`."""
    loop_end, run_end = socket.socketpair()
    with (
        loop_end,
        run_end,
        tempfile.TemporaryFile("w+") as out,
        tempfile.TemporaryFile("w+") as err,
    ):
        mine, theirs = loop_end.fileno(), run_end.fileno()
        loop = [*loop, "--plain-only", "--repeats", "1", "--in-turn", str(mine)]
        beside = subprocess.Popen(loop, stdout=out, stderr=err, text=True, pass_fds=(mine,))
        try:
            with subprocess.Popen(
                [*command, "--in-turn", str(theirs)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                pass_fds=(theirs,),
            ) as run:
                loop_end.close()  # this process's copies: a partner's exit must close its end
                run_end.close()
                try:
                    said, errors = run.communicate(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    run.kill()
                    raise
            beside.wait(timeout=timeout_s)
        finally:
            if beside.poll() is None:
                beside.kill()
                beside.wait()
        out.seek(0)
        err.seek(0)
        loop_done = subprocess.CompletedProcess(loop, beside.returncode, out.read(), err.read())
    return subprocess.CompletedProcess(run.args, run.returncode, said, errors), loop_done
