"""Where a training step's time goes, from torch's profiler: one rank of any launcher builds the
run's trainer exactly as training does, warms up, profiles `--steps` steps and splits their
time by each event's self time (so nothing counts twice; `torch_impl.traffic.split_seconds`):
collectives, waiting (FSDP's ranges that wait for the collectives they issued, and DDP's
exposed wait), FSDP + DTensor, optimizer, compute (the other aten ops) and the rest (the
step's Python and the autograd engine).

    python -m common.launch --nproc 2 -- python -m torch_impl.step_profile \\
        --config configs/mlp_adam.yaml --set torch.strategy=fsdp2

The chief prints one line per category in ms per step, and one JSON line (`STEP_PROFILE`).
"""

from __future__ import annotations

import time

from torch.profiler import ProfilerActivity, profile

from common.core.config import config_io
from common.core.config.devices import resolve_eval_batch
from common.core.measure import step_profile
from common.launch import environment
from torch_impl import dist, traffic
from torch_impl.parallel import resolve_strategy
from torch_impl.train import TorchTrainer


def split(events, steps: int, wall_s: float) -> dict[str, float]:
    """ms per step by category; "the rest" also takes the wall time no event covers."""
    found = {name: ms * 1000 / steps for name, ms in traffic.split_seconds(events).items()}
    found["the rest"] = max(0.0, wall_s * 1000 / steps - sum(found.values()))
    return found


def main(argv: list[str] | None = None) -> int:
    args = step_profile.arguments("python -m torch_impl.step_profile", __doc__, argv)
    spec = environment.from_environment()
    cfg = config_io.load_config(args.config, args.overrides)
    info = dist.setup_distributed(resolve_strategy(cfg, spec.world_size), spec)
    cfg = resolve_eval_batch(cfg, "torch", info.device_type)
    trainer = TorchTrainer(cfg, info)
    trainer.build()
    batches = iter(trainer.train_batches(0))
    lr = cfg.optim.lr
    for _ in range(5):  # warm-up: buffers, the first all-gathers, the optimizer's state
        trainer.train_step(next(batches), lr)
    dist.synchronize(info)
    walls = []
    traffic.quiet_profiler()
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(args.steps):
            start = time.perf_counter()
            trainer.train_step(next(batches), lr)
            dist.synchronize(info)
            walls.append(time.perf_counter() - start)
    found = split(profiler.events(), args.steps, sum(walls))
    if info.is_chief:
        label = f"torch {trainer.strategy.name} x{info.world_size}, {cfg.model.name}"
        step_profile.report(label, walls, found)
    dist.leave_together(info, cfg.dist.timeout_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
