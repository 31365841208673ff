"""Ranks started from a warm interpreter, for tests whose subject is not the launch path.

A rank's start is mostly imports: about 2 CPU-seconds for torch's trainer on a 2-core host,
against 0.2 s for an interpreter. `make test` starts hundreds of ranks, so a server that has
imported the framework once forks each rank from there, as torch's own test suite reuses warm
processes. The tests that are about launching (the launchers, signals, lost and frozen ranks,
SLURM, torchrun, Kubeflow's variables) keep starting real `python -m` processes.

    python tests/warm_ranks.py serve SOCKET torch_impl.train   # imports, then forks on request
    python tests/warm_ranks.py run SOCKET MODULE ARGS...        # one rank: `python -m MODULE ARGS`

The client (`run`) stands where `python -m MODULE` stood: it hands the rank its standard
streams, environment, working folder and blocked signals, passes on every signal a launcher
sends (SIGTERM, SIGINT, SIGHUP, SIGUSR1), and exits as the rank did (its code, or killed by its
signal). A rank whose client is gone (killed with SIGKILL) is killed by the server; a rank
dies with the server. The server computes nothing before it forks, so no thread pool of the
framework exists in it (a forked OpenMP pool would hang the child).

The client imports only the standard library: it starts in 0.05 s.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import struct
import sys

PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
HEADER = struct.Struct("!I")
PR_SET_PDEATHSIG = 1
M_MMAP_THRESHOLD = -3  # mallopt(3)


def _send(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [HEADER.pack(len(data)) + data], fds)
    else:
        sock.sendall(HEADER.pack(len(data)) + data)


def _receive(sock: socket.socket, with_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One message (None when the peer is gone) and the descriptors that came with it."""
    fds: list[int] = []
    if with_fds:
        head, fds, _, _ = socket.recv_fds(sock, HEADER.size, with_fds)
    else:
        head = sock.recv(HEADER.size)
    while head and len(head) < HEADER.size:
        more = sock.recv(HEADER.size - len(head))
        if not more:
            return None, fds
        head += more
    if len(head) < HEADER.size:
        return None, fds
    (size,) = HEADER.unpack(head)
    body = b""
    while len(body) < size:
        more = sock.recv(size - len(body))
        if not more:
            return None, fds
        body += more
    return json.loads(body), fds


# ------------------------------------------------------------------------------------ client


def run(path: str, argv: list[str]) -> int:
    """Start `python -m argv[0] argv[1:]` in the warm server at `path`; exit as it exits."""
    blocked = sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "blocked": blocked}
    _send(sock, request, [0, 1, 2])
    started, _ = _receive(sock)
    if started is None:
        print(f"warm_ranks: the server at {path} went away", file=sys.stderr)
        return 1
    pid = started["pid"]

    def pass_on(number: int, _frame: object) -> None:
        try:
            os.kill(pid, number)
        except ProcessLookupError:
            pass

    for number in PASSED_ON:
        signal.signal(number, pass_on)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, PASSED_ON)  # held ones now reach the rank
    ended, _ = _receive(sock)  # a signal handled meanwhile does not end the wait (PEP 475)
    if ended is None:
        print(f"warm_ranks: the server at {path} went away", file=sys.stderr)
        return 1
    if ended["signal"]:  # die the way the rank died, so that a launcher reads the same
        number = ended["signal"]
        if number not in (signal.SIGKILL, signal.SIGSTOP):  # those two take no handler
            signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
        os.kill(os.getpid(), number)
    return int(ended["code"])


# ------------------------------------------------------------------------------------ server


def _rank(request: dict, fds: list[int], keep: set[int]) -> None:
    """In the forked child: become `python -m MODULE ARGS` as the client would have run it."""
    import atexit
    import ctypes
    import runpy
    import traceback

    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    for fd in keep:
        os.close(fd)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    for number in (*PASSED_ON, signal.SIGCHLD):
        signal.signal(number, signal.SIG_DFL)
    os.environ.clear()
    os.environ.update(request["env"])
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:  # what glibc reads at a process's start
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, int(os.environ["MALLOC_MMAP_THRESHOLD_"]))
    os.chdir(request["cwd"])
    sys.path[0] = request["cwd"]  # as `python -m` puts the working folder first
    signal.pthread_sigmask(signal.SIG_SETMASK, request["blocked"])
    module, *args = request["argv"]
    sys.argv = [module, *args]
    code: int = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def serve(path: str, preload: list[str]) -> None:
    """Import `preload`, listen at `path`, and fork a rank for each client until stdin closes
    (the test session that started the server is gone) or SIGTERM."""
    import gc
    import importlib

    # the checkout this file stands in, not tests/ (a shared .venv's editable install may point
    # at another checkout); each rank then puts its working folder first, as `python -m` does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for module in preload:
        importlib.import_module(module)
    gc.collect()
    gc.freeze()  # the collector leaves the imports' objects alone: fewer pages copied per rank
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(sys.stdin, selectors.EVENT_READ, "stdin")
    ranks: dict[int, socket.socket] = {}  # pid -> its client
    print("ready", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            for key, _ in selector.select(timeout=0.02):
                if key.data == "stdin":
                    if not sys.stdin.buffer.read1(1024):
                        return
                elif key.data == "accept":
                    client, _ = listener.accept()
                    request, fds = _receive(client, with_fds=3)
                    if request is None or len(fds) != 3:
                        client.close()
                        continue
                    sys.stdout.flush()
                    sys.stderr.flush()
                    pid = os.fork()
                    if pid == 0:
                        keep = {listener.fileno(), *(c.fileno() for c in ranks.values())}
                        _rank(request, fds, keep | {client.fileno()})
                    for fd in fds:
                        os.close(fd)
                    _send(client, {"pid": pid})
                    ranks[pid] = client
                    selector.register(client, selectors.EVENT_READ, pid)
                else:  # a client spoke or left: it is gone, so is its rank
                    pid = key.data
                    selector.unregister(key.fileobj)
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            _reap(ranks, selector)
    finally:
        for pid in ranks:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        listener.close()
        if os.path.exists(path):
            os.unlink(path)


def _reap(ranks: dict[int, socket.socket], selector: selectors.BaseSelector) -> None:
    """Tell each ended rank's client how it ended."""
    while ranks:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        client = ranks.pop(pid, None)
        if client is None:
            continue
        if os.WIFSIGNALED(status):
            ended = {"code": 128 + os.WTERMSIG(status), "signal": os.WTERMSIG(status)}
        else:
            ended = {"code": os.WEXITSTATUS(status), "signal": 0}
        try:
            selector.unregister(client)
        except (KeyError, ValueError):
            pass
        try:
            _send(client, ended)
        except OSError:
            pass
        client.close()


if __name__ == "__main__":
    verb, where, *rest = sys.argv[1:]
    if verb == "serve":
        serve(where, rest)
    elif verb == "run":
        raise SystemExit(run(where, rest))
    else:
        raise SystemExit(f"warm_ranks: serve or run, not {verb!r}")
