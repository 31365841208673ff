"""Start the real training programs the way users do, for the multi-process tests."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.records import read_metrics
from tests.schema_check import check_file

# Small and fast, real MNIST: 2,048 training and 1,000 test samples.
SMALL = [
    "data.train_limit=2048",
    "data.test_limit=1000",
    "train.batch_size=64",
    "train.eval_batch_size=500",
    "train.epochs=2",
    "dist.timeout_s=30",
]


# What a warm server imports before it forks a rank of each program (tests/warm_ranks.py): the
# trainer, and what a run imports later: checkpoints, and torch._dynamo, which torch.optim's
# Optimizer and DDP import when they are built (with FSDP, DTensor and sympy: 2.0 s of CPU in
# each fork on [E] if the server has not).
WARM_IMPORTS = {
    "torch_impl.train": [
        "torch_impl.train",
        "torch_impl.checkpoint",
        "torch.distributed.checkpoint",
        "torch.distributed.checkpoint.state_dict",
        "torch._dynamo",
    ],
    "tf_impl.train": ["tf_impl.train", "tf_impl.checkpoint"],
    "torch_impl.memory_check": ["torch_impl.memory_check", "torch._dynamo"],
    "torch_impl.links": ["torch_impl.links"],
    "tf_impl.links": ["tf_impl.links"],
}
WARM_CLIENT = Path(__file__).resolve().parent / "warm_ranks.py"
# Variables a program reads while it runs, not at import: a run given only these may be warm.
# Variables a warm rank honours as a cold one would: read at run time, or applied by the warm
# rank itself (glibc's MALLOC_MMAP_THRESHOLD_, through mallopt, tests/warm_ranks.py).
READ_AT_RUN_TIME = {"SUITE_CACHE_DIR", "MALLOC_MMAP_THRESHOLD_", "SUITE_FORCE_OVERFLOW"}
_servers: dict[str, tuple[subprocess.Popen, str]] = {}


def warm_server(module: str) -> str:
    """The socket of this process's warm server for `module`, started on first use (each
    pytest worker has its own). It imports the program once and forks each rank from there; it
    ends when this process does (its stdin closes)."""
    if module in _servers and _servers[module][0].poll() is None:
        return _servers[module][1]
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="warm-", dir="/tmp")  # a socket's path must stay short
    path = os.path.join(folder, "ranks.sock")
    server = subprocess.Popen(
        [sys.executable, str(WARM_CLIENT), "serve", path, *WARM_IMPORTS[module]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parent.parent,
    )
    ready = server.stdout.readline() if server.stdout else b""
    if ready.strip() != b"ready":
        server.kill()
        pytest.fail(f"the warm server of {module} did not start: {ready!r}")
    _servers[module] = (server, path)

    def stop() -> None:
        if server.stdin:
            server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(folder, ignore_errors=True)

    atexit.register(stop)
    return path


def train_command(
    module: str, nproc: int, overrides: list[str], extra: list[str], warm: bool = False
) -> list[str]:
    """`python -m <module>` with --set overrides, under common.launch (nproc 0: bare).

    `warm`: each rank forked from a server that has imported the program
    (tests/warm_ranks.py), for tests whose subject is not the launch path. The launcher is
    the real one either way; tests of launching, signals, lost or frozen ranks, mounts and
    cgroups start real `python -m` ranks."""
    command = [sys.executable, "-m", module]
    if warm:
        command = [sys.executable, str(WARM_CLIENT), "run", warm_server(module), module]
    for override in overrides:
        command += ["--set", override]
    command += extra
    if nproc == 0:  # no launcher at all: one plain process
        return command
    return [sys.executable, "-m", "common.launch", "--nproc", str(nproc), "--", *command]


def in_private_mount(mount: str, command: list[str], after: str = "", timeout: int = 300):
    """`command` after the shell line `mount`, in a mount namespace of its own (so nothing of
    the machine's is touched), then `after` (e.g. copying a run out of a tmpfs); the command's
    exit status is the result's."""
    script = (
        f"{mount} && {subprocess.list2cmdline(command)}; status=$?; {after or 'true'}; exit $status"
    )
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def runner(module: str, root: Path, warm: bool = False):
    """run(name, nproc, *overrides, extra=(), check=True, small=True, env=None) -> (process, run
    folder); `env` adds variables to this process's environment; `warm`: as `train_command`."""

    def run(name: str, nproc: int, *overrides: str, extra=(), check=True, small=True, env=None):
        settings = [
            *(SMALL if small else []),
            f"output.dir={root}",
            f"output.run_name={name}",
            *overrides,
        ]
        done = subprocess.run(
            # other variables of its own start it cold: a framework reads some at import
            # (TF_ENABLE_ONEDNN_OPTS), which a warm server has done already
            train_command(
                module,
                nproc,
                settings,
                list(extra),
                warm=warm and set(env or {}) <= READ_AT_RUN_TIME,
            ),
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, **(env or {})},
        )
        if check and done.returncode != 0:
            output = f"{done.stdout}\n{done.stderr}"
            pytest.fail(f"training {name} failed ({done.returncode}):\n{output}")
        if check:  # what another tool reading our runs would check
            check_file(Path(root) / name / "metrics.jsonl")
        return done, Path(root) / name

    return run


def two_ranks_mid_training(module: str, root: Path, *extra: str, timeout_s: float = 20):
    """Start 2 ranks of `module` bare (the launcher would stop the survivor itself) on a whole
    MNIST epoch with a step record per step and dist.timeout_s=`timeout_s`, and return
    (the two processes, the metrics file) once 20 step records are written."""
    import os
    import time

    from common.core.records import metrics
    from common.launch.local import rank_environments

    settings = [
        *SMALL,
        "data.train_limit=60000",
        "train.epochs=1",
        "train.log_every_steps=1",
        f"dist.timeout_s={timeout_s}",
        f"output.dir={root}",
        "output.run_name=killed",
        *extra,
    ]
    metrics_file = root / "killed" / metrics.METRICS_FILENAME
    command = train_command(module, 0, settings, [])
    environments = rank_environments(2, dict(os.environ))
    ranks = [
        subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for env in environments
    ]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until training is under way
        if metrics_file.is_file() and metrics_file.read_text().count('"step"') >= 20:
            return ranks, metrics_file
        time.sleep(0.2)
    pytest.fail("training never started: " + ranks[0].communicate(timeout=5)[0])


def kill_second_rank_mid_training(module: str, root: Path, *extra: str, timeout_s: float = 20):
    """SIGKILL rank 1 of `two_ranks_mid_training`; return (rank 0's output, its exit code,
    seconds it took to exit after the kill, the last record of the metrics)."""
    import signal
    import time

    ranks, metrics_file = two_ranks_mid_training(module, root, *extra, timeout_s=timeout_s)
    ranks[1].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    output, _ = ranks[0].communicate(timeout=90)
    waited = time.monotonic() - killed_at
    return output, ranks[0].returncode, waited, read_metrics(metrics_file)[-1]


def cancel_while_a_peer_hangs(module: str, root: Path):
    """Freeze rank 1 (SIGSTOP: rank 0 then waits in a collective for it), then SIGTERM rank 0,
    as scancel would; return (rank 0's exit code, seconds it took to exit after the SIGTERM,
    the last record of the metrics). The collective's own timeout is 120 s."""
    import signal
    import time

    ranks, metrics_file = two_ranks_mid_training(module, root, timeout_s=120)
    ranks[1].send_signal(signal.SIGSTOP)
    time.sleep(1.0)  # rank 0 reaches the next collective and blocks in it
    ranks[0].send_signal(signal.SIGTERM)
    cancelled_at = time.monotonic()
    ranks[0].communicate(timeout=90)
    waited = time.monotonic() - cancelled_at
    ranks[1].kill()
    ranks[1].communicate(timeout=30)
    return ranks[0].returncode, waited, read_metrics(metrics_file)[-1]


def per_call_against_one(run, nproc: int) -> tuple[list[dict], list[dict], dict]:
    """The same run at train.steps_per_call=1 and 5 (32 steps an epoch: calls of 5 leave one of
    2; a step record every 4): each one's step and epoch figures, and the second's run_start."""
    schedule = ["train.log_every_steps=4", "optim.name=sgd", "optim.lr=0.05"]
    schedule.append("optim.schedule=onecycle")
    _, one = run(f"one{nproc}", nproc, *schedule)
    _, five = run(f"five{nproc}", nproc, *schedule, "train.steps_per_call=5")
    kept = ("epoch", "step", "loss", "lr", "train_loss", "val_loss", "val_accuracy")

    def figures(folder: Path) -> list[dict]:
        return [
            {key: record[key] for key in kept if key in record}
            for record in read_metrics(folder / "metrics.jsonl")
            if record["record"] in ("epoch", "step")
        ]

    return figures(one), figures(five), read_metrics(five / "metrics.jsonl")[0]
