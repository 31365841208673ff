"""The PyTorch baselines for the benchmark (`python -m common.tools.bench`), in a process of their
own.

    python -m torch_impl.bench --model NAME [--train-limit 6400] [--repeats 3] [--batch 64]
                               [--device auto|cpu|gpu] [--timed 1] [--paired | --plain-only]

`plain loop`: a hand-written loop over the same preloaded tensors as the launched runs, the
model built as they build it and tested after each pass, on the same device with the same
optimizer kernels, so that "vs plain" measures the harness alone. `seed-style loop`: the
tutorials' DataLoader loop. `--paired` also takes the suite's own step in turn with the plain
loop's in this process (`paired_steps`), so that a busy host's slow spells slow both alike.
Prints one JSON line: {"model", "samples_per_s", "step_s", "passes", and with --paired
"paired"}.
"""

from __future__ import annotations

if __name__ == "__main__":  # a bad command line is refused before the framework's import
    from common.tools import measure as _early

    _early.baseline_arguments("python -m torch_impl.bench", __doc__, None)

import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from common.core.config import config_io, devices, strategies
from common.core.measure.clocks import HostStepClock, in_turn
from common.core.run.turns import Turns
from common.data import mnist
from common.launch import environment
from common.launch.cluster import ClusterSpec
from common.report.harness_ratio import PAIRED
from common.tools import measure
from common.tools.measure import cell_settings
from torch_impl import dist
from torch_impl.data import MnistImages
from torch_impl.model import build_model
from torch_impl.optim import build_optimizer, implementation
from torch_impl.precision import settle_vector_math
from torch_impl.train import CudaEventStepClock, TorchTrainer


def _model_and_optimizer(model_name: str, device: torch.device):
    cfg = config_io.load_config(None, [f"model.name={model_name}", "optim.name=adam"])
    model = build_model(cfg.net(), seed=0).to(device)
    single = strategies.get("torch", "single")
    impl = implementation(
        cfg.optim.name, cfg.torch.optimizer_impl, loss_scaling=False, strategy=single
    )
    return model, build_optimizer(cfg.optim, model.parameters(), impl)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def test_accuracy(model: torch.nn.Module, test: tuple[torch.Tensor, torch.Tensor]) -> float:
    """The tutorial's test(): accuracy over the test set in batches of the suite's evaluation
    batch on this device, without gradients."""
    images, labels = test
    batch = devices.EVAL_BATCH[("torch", "gpu" if images.device.type == "cuda" else "cpu")]
    model.eval()
    correct = 0
    with torch.no_grad():
        for first in range(0, len(labels), batch):
            logits = model(images[first : first + batch])
            correct += int((logits.argmax(dim=1) == labels[first : first + batch]).sum())
    model.train()
    return correct / len(labels)


def plain_loop(
    model_name: str,
    images: torch.Tensor,
    labels: torch.Tensor,
    batch: int,
    test: tuple[torch.Tensor, torch.Tensor],
    timed: int = 1,
    turns: Turns | None = None,
) -> tuple[list[float], float]:
    """([samples/s of each timed pass], median step seconds over them) of a bare loop over
    preloaded tensors (the fastest honest baseline): the tutorial's train() then test() each
    epoch, the `timed` passes after the first timed, each of their steps on the launched runs'
    step clock. `turns`: each pass, this loop's first, in turn with a launched run's epochs
    (`common.core.run.turns`)."""
    device = images.device
    model, optimizer = _model_and_optimizer(model_name, device)
    steps = len(labels) // batch
    speeds: list[float] = []
    step_s: list[float] = []
    for done in range(1 + timed):  # the passes after the first are timed
        order = torch.randperm(len(labels), device=device)
        clock = CudaEventStepClock() if device.type == "cuda" else HostStepClock()
        _synchronize(device)
        start = time.perf_counter()
        for step in range(steps):
            clock.step_started()
            index = order[step * batch : (step + 1) * batch]
            optimizer.zero_grad()
            F.cross_entropy(model(images[index]), labels[index]).backward()
            optimizer.step()
            clock.step_done()
        _synchronize(device)
        seconds = time.perf_counter() - start
        test_accuracy(model, test)
        if turns is not None:  # the launched run's epoch, then this loop's next pass
            turns.give()
            turns.wait()
        if done:
            speeds.append(steps * batch / seconds)
            step_s += clock.step_times(seconds)
    return speeds, statistics.median(step_s)


def paired_steps(
    model_name: str, limit: int, batch: int, device: str, spec: ClusterSpec
) -> tuple[float, float]:
    """(the plain loop's median step, the suite's), in seconds, the two taken in turn over the
    same batches in this process, the order swapped at every step, so that a slow spell of a
    shared host slows both alike: the suite's is `TorchTrainer.train_step` as `torch single /
    tensor` launches it. Two epochs; the first warms both up and is not timed."""
    overrides = cell_settings(model_name, "tensor", limit, batch)
    overrides += ["torch.strategy=single", f"dist.device={device}"]
    cfg = config_io.load_config(None, overrides)
    trainer = TorchTrainer(cfg, dist.setup_distributed(cfg, spec))
    trainer.build()
    model, optimizer = _model_and_optimizer(model_name, trainer.info.device)

    def plain(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(batch[0]), batch[1]).backward()
        optimizer.step()

    def suite(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        trainer.train_step(batch, cfg.optim.lr)

    return in_turn(plain, suite, trainer.train_batches, trainer.step_clock)


def seed_style_loop(
    model_name: str,
    digits: mnist.Mnist,
    limit: int,
    batch: int,
    test: tuple[torch.Tensor, torch.Tensor],
) -> float:
    """samples/s of the tutorials' loop: per-sample transform in a DataLoader, shuffle=True,
    each batch copied to the device; test() after each epoch."""
    device = test[0].device
    model, optimizer = _model_and_optimizer(model_name, device)
    dataset = MnistImages(
        digits.train_images[:limit], digits.train_labels[:limit], seed=0, dp_rank=0
    )
    loader = DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=1, drop_last=True)
    for _ in range(2):  # the second epoch is timed; it still starts its loader worker
        start = time.perf_counter()
        seen = 0
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad()
            F.cross_entropy(model(images), labels).backward()
            optimizer.step()
            seen += len(labels)
        _synchronize(device)
        seconds = time.perf_counter() - start
        test_accuracy(model, test)
    return seen / seconds


def main(argv: list[str] | None = None) -> int:
    parser, args = measure.baseline_arguments("python -m torch_impl.bench", __doc__, argv)
    spec = environment.from_environment({})
    torch.set_num_threads(devices.threads_per_rank(spec, devices.available_cores()))
    settle_vector_math()
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    try:
        placed = devices.place(
            framework="torch", requested=args.device, visible_gpus=visible, spec=spec
        )
    except ValueError as error:
        parser.error(str(error))
    device = torch.device("cuda", 0) if placed.device_type == "gpu" else torch.device("cpu")
    digits = mnist.load_mnist()
    limit = args.train_limit
    images = torch.from_numpy(mnist.normalize(digits.train_images[:limit])).unsqueeze(1)
    images = images.to(device)
    labels = torch.from_numpy(digits.train_labels[:limit]).to(device)
    # The test set in memory, as the launched runs hold it, evaluated after each epoch as a
    # tutorial's loop and the launched runs evaluate: the first steps after it run on cold
    # caches in both. Normalizing it also frees large temporaries, after which glibc raises its
    # mmap threshold, so the CNN's activations stop being mapped afresh (and page faulted in)
    # at every step (docs/performance.md, "Each harness against its framework's plain loop").
    test_images = torch.from_numpy(mnist.normalize(digits.test_images)).unsqueeze(1)
    test = (test_images.to(device), torch.from_numpy(digits.test_labels).to(device))
    turns = Turns(args.in_turn)  # the launched run beside this loop (the bench's), if any
    plain = [
        plain_loop(args.model, images, labels, args.batch, test, args.timed, turns)
        for _ in range(args.repeats)
    ]
    passes = [speed for speeds, _ in plain for speed in speeds]
    speeds = {"plain loop": statistics.median(passes)}
    if not args.plain_only:
        seed = [
            seed_style_loop(args.model, digits, limit, args.batch, test)
            for _ in range(args.repeats)
        ]
        speeds["seed-style loop"] = statistics.median(seed)
    step_s = {"plain loop": statistics.median(step for _, step in plain)}
    said = {
        "model": args.model,
        "samples_per_s": speeds,
        "step_s": step_s,
        "passes": {"plain loop": passes},
    }
    if args.paired:
        plain_s, suite_s = paired_steps(args.model, limit, args.batch, args.device, spec)
        speeds[PAIRED], step_s[PAIRED] = args.batch / suite_s, suite_s
        said["paired"] = {PAIRED: plain_s / suite_s}
    print(json.dumps(said))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
