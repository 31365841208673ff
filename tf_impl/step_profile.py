"""Where a TensorFlow training step's time goes, from TensorFlow's own profiler: the step is
profiled (`tf.profiler.experimental`) and xprof, in a process of its own (`tf_impl.xspace_ops`),
turns the XSpace into every op's self time: collectives (the Collective* ops, their wait for
the peers included), optimizer (the ops under its name scope), input (the step's gathers),
compute (every other op) and the rest (Python, the function call, the executor). Each run
records the split of its counted step, as torch's does; on several workers, the chief's alone
(`splits_here` says why).

    python -m common.launch --nproc 2 -- python -m tf_impl.step_profile \\
        --config configs/mlp_adam.yaml [--steps 20]
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import tensorflow as tf

from common.core.measure import precision
from common.core.records.entries import StepSplit
from tf_impl.traffic import KINDS as COLLECTIVES

T = TypeVar("T")
INPUT_OPS = ("IteratorGetNext", "IteratorGetNextSync", "OptionalGetValue")
GATHERS = ("GatherV2", "ResourceGather")
READ_TIMEOUT_S = 120
# A collective ends in its done callback on the executor's thread, which may run after the step
# has returned to Python: a profiler stopped at once lost the collective's op (CollectiveReduceV2)
# now and then, and the split read 0 s of collectives (docs/performance.md); stopped under that
# callback, it corrupted the heap (SIGABRT: "double free or corruption", "free(): invalid
# pointer"). The profiler stays on this long after the step (the split's and
# output.profile_steps' traces); wall_s leaves it out.
SETTLE_S = 0.1
SOURCE = "TensorFlow profiler via xprof, CPU (self time of each op)"
PARTS = ("compute", "optimizer", "input", "collectives")
_warned: list[str] = []


def op_times(xspaces: list[Path]) -> list[tuple[str, str, float]]:
    """(op type, op name, self seconds) of every op on the host, read by xprof in a process of
    its own (`tf_impl.xspace_ops`: not beside TensorFlow); RuntimeError when it cannot."""
    command = [sys.executable, "-m", "tf_impl.xspace_ops", *map(str, xspaces)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=READ_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"xprof could not read {xspaces}: {done.stderr.strip()[-300:]}")
    return [(str(kind), str(name), float(self_s)) for kind, name, self_s in json.loads(done.stdout)]


def part_of(kind: str, name: str, scopes: tuple[str, ...]) -> str:
    """The category of an op (its type and name)."""
    if kind in COLLECTIVES:
        return "collectives"
    if name.startswith(tuple(f"{scope}/" for scope in scopes)):
        return "optimizer"
    if kind in INPUT_OPS or (kind in GATHERS and "/" not in name):  # outside the model's scopes
        return "input"
    return "compute"


def split(
    ops: Iterable[tuple[str, str, float]], scopes: tuple[str, ...], wall_s: float
) -> StepSplit:
    """The ops' self times by category, as a StepSplit of `wall_s`."""
    seconds = dict.fromkeys(PARTS, 0.0)
    for kind, name, self_s in ops:
        seconds[part_of(kind, name, scopes)] += self_s
    return StepSplit(
        compute_s=seconds["compute"],
        optimizer_s=seconds["optimizer"],
        framework_s=0.0,  # MWMS replicates the model: no wrapper of its own
        collectives_s=seconds["collectives"],
        input_s=seconds["input"],
        wall_s=wall_s,
        source=SOURCE,
    )


def profiled(work: Callable[[], T], scopes: tuple[str, ...]) -> tuple[T, StepSplit | None]:
    """work()'s result and where its time went; `scopes`: the optimizer's name scopes. The
    XSpace is written into a temporary folder. None for the split, said once, where xprof is
    not installed."""
    if importlib.util.find_spec("xprof") is None:
        if not _warned:
            _warned.append("xprof")
            print(
                "warning: no step split: xprof is not installed (pip install xprof)",
                file=sys.stderr,
            )
        return work(), None
    with tempfile.TemporaryDirectory(prefix="tf-profile-") as scratch:
        folder = Path(scratch)
        tf.profiler.experimental.start(str(folder))
        try:
            start = time.perf_counter()
            result = work()
            wall_s = time.perf_counter() - start
        finally:
            stop_settled()  # the collective's last events, after the step returned
        written = sorted(folder.glob("plugins/profile/*/*.xplane.pb"))  # one profile
        return result, split(op_times(written), scopes, wall_s)


def stop_settled() -> None:
    """Stop TensorFlow's profiler once the last collective's events are in (`SETTLE_S`)."""
    time.sleep(SETTLE_S)
    tf.profiler.experimental.stop()


UNSAFE = (
    "TensorFlow's profiler corrupted the heap ('free(): invalid pointer') over steps whose "
    "forward all-reduces across the workers, as ResNet-8's global batch norm does "
    "(docs/performance.md)"
)


def safe_to_profile(net: Any, world_size: int) -> bool:
    """Whether TensorFlow's profiler may run over this run's step (`UNSAFE` says when not)."""
    return world_size == 1 or precision.batch_norm(net) == "none"


# Where a step's collectives cross workers, TensorFlow's profiler corrupts the heap of a worker
# other than the first, now and then, as it stops: its HostTracer merges an activity begun on one
# thread and ended on another (CollectiveExecutor::CompleteParams, whose end runs in a callback
# once the group's leader, task 0, answers) into an event it has already freed
# (tsl::profiler::SplitEventTracker::FindStartAndMerge under TraceMeRecorder::Consume, from a
# core dump; with libstdc++ the std::vector of per-thread std::deque of events copies them as it
# grows, the deque's move not being noexcept; docs/performance.md has the runs). The split is the
# chief's (its records are the run's): only the chief profiles the counted step.
def splits_here(net: Any, spec: Any) -> bool:
    """Whether this worker profiles the counted step for the split: the chief, where
    `safe_to_profile`."""
    return bool(spec.is_chief) and safe_to_profile(net, spec.world_size)


def scopes_of(optimizer: Any) -> tuple[str, ...]:
    """The name scopes of the optimizer's ops: its own, and its inner one's under fp16's
    LossScaleOptimizer."""
    inner = getattr(optimizer, "inner_optimizer", None)
    return tuple(o.name for o in (optimizer, inner) if o is not None)


def main(argv: list[str] | None = None) -> int:
    from common.core.config import config_io
    from common.core.config.devices import resolve_eval_batch
    from common.core.measure import step_profile as shown
    from common.launch import environment
    from tf_impl import dist
    from tf_impl.train import TfTrainer

    args = shown.arguments("python -m tf_impl.step_profile", __doc__, argv)
    spec = environment.from_environment()
    cfg = config_io.load_config(args.config, args.overrides)
    info = dist.setup_distributed(cfg, spec)
    cfg = resolve_eval_batch(cfg, "tf", info.device_type)
    trainer = TfTrainer(cfg, info)
    trainer.build()
    batches = iter(trainer.train_batches(0))
    for _ in range(5):  # traces and warm-up
        trainer.train_step(next(batches), cfg.optim.lr)
    taken = [next(batches) for _ in range(args.steps)]
    walls: list[float] = []

    def steps() -> None:
        for batch in taken:
            start = time.perf_counter()
            trainer.train_step(batch, cfg.optim.lr)  # a float: the step has finished
            walls.append(time.perf_counter() - start)

    if not spec.is_chief:  # the chief's profile only (`splits_here`); the others keep pace
        steps()
    elif (found := profiled(steps, scopes_of(trainer.optimizer))[1]) is not None:
        ms = {part: 1000 * getattr(found, f"{part}_s") / args.steps for part in PARTS}
        ms["the rest"] = max(0.0, 1000 * sum(walls) / args.steps - sum(ms.values()))
        label = f"tf {trainer.strategy.name} x{info.world_size}, {cfg.model.name}"
        shown.report(label, walls, ms)
    dist.leave_together(info, cfg.dist.timeout_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
