"""A third, framework-free trainer for the epoch driver's tests: a numpy softmax regression that
fills the same contract as torch_impl's and tf_impl's (`common.core.train.trainer.Trainer`)."""

import json
import os
import signal

import numpy as np

from common.core.config import config_io, strategies
from common.core.config.cli import RunOptions
from common.core.config.strategies import ParallelDims
from common.core.measure import clocks, precision
from common.core.measure.memory import MemoryUse
from common.core.train import loop, mid_epoch
from common.launch import environment
from tests.records import read_metrics
from tests.schema_check import check_file


class NumpyTrainer:
    framework, framework_version, precision = "numpy", np.__version__, "fp64"
    strategy = strategies.get("torch", "single")  # a registry entry of one rank, no wrapper
    train_clock = "numpy steps"
    device_type = device_name = "cpu"
    steps_per_epoch, global_batch = 4, 16
    dims = ParallelDims(replicate=1, shard=1)

    def __init__(self, fail_at_step=None, preempt_at_step=None, failure=None):
        self.spec = environment.from_environment({})
        self.fail_at_step, self.preempt_at_step = fail_at_step, preempt_at_step
        self.failure = failure or ValueError("a step broke")
        self.steps_taken = 0
        self.calls = []  # the length of each train_steps call

    def versions(self):
        return {}

    def numerics(self):
        return precision.numerics(
            precision="none", tf32=False, loss_scaling=False, device_type="cpu"
        )

    def loss_scaling(self):
        return None

    def threads(self):
        return {"intra_op": 1, "inter_op": 1}

    def step_clock(self):
        return clocks.HostStepClock()

    def replica_digest(self):
        return float(self.w.sum())

    def all_reduce_sum(self, values):
        return np.array(values, dtype=np.float64)  # one rank: the sum is the value

    def stop_agreement(self, requested):
        return mid_epoch.Vote(self.all_reduce_sum, requested)

    def barrier(self):
        pass

    def synchronize(self):
        pass

    def build(self):
        data = np.random.default_rng(0)
        self.x = data.normal(size=(64, 4))
        self.y = (self.x[:, 0] + 0.5 * self.x[:, 1] > 0).astype(int)
        self.w = np.zeros((4, 2))
        self.noise = np.random.default_rng(1)  # stands for dropout: its state is checkpointed

    def train_batches(self, epoch, start=0):
        order = np.random.default_rng(100 + epoch).permutation(64)
        for step in range(start, self.steps_per_epoch):
            yield order[step * 16 : (step + 1) * 16]

    def _loss_and_gradient(self, index):
        logits = self.x[index] @ self.w
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        loss = -np.log(p[np.arange(len(index)), self.y[index]]).mean()
        p[np.arange(len(index)), self.y[index]] -= 1
        return loss, self.x[index].T @ p / len(index)

    def train_step(self, batch, lr):
        self.steps_taken += 1
        if self.steps_taken == self.fail_at_step:
            raise self.failure
        if self.steps_taken == self.preempt_at_step:
            os.kill(os.getpid(), signal.SIGUSR1)  # SLURM's warning, to this very process
        loss, gradient = self._loss_and_gradient(batch)
        self.w -= lr * 100 * gradient * self.noise.uniform(0.5, 1.5)
        return loss

    def train_steps(self, batches, lrs):
        self.calls.append(len(batches))
        return [self.train_step(batch, lr) for batch, lr in zip(batches, lrs, strict=True)]

    def evaluate(self):
        loss, _ = self._loss_and_gradient(np.arange(64))
        return float(loss), float(((self.x @ self.w).argmax(axis=1) == self.y).mean())

    def reset_peak_memory(self):
        pass

    def peak_flops(self, fresh=False):
        return 1e9

    def memory_use(self):
        held = self.w.nbytes
        return MemoryUse(
            peak_bytes=0,
            peak_counts="nothing",
            baseline_bytes=0,
            param_bytes=held,
            grad_bytes=held,
            optim_bytes=0,
        )

    def save_checkpoint(self, folder):
        np.save(folder / "w.npy", self.w)
        (folder / "noise.json").write_text(json.dumps(self.noise.bit_generator.state))

    def load_checkpoint(self, folder):
        self.w = np.load(folder / "w.npy")
        self.noise.bit_generator.state = json.loads((folder / "noise.json").read_text())

    def export_model(self, run_dir):
        np.save(run_dir / "model.npy", self.w)
        return run_dir / "model.npy"

    def leave_together(self):
        pass

    def describe_failure(self, failure):
        return f"rank 0: {type(failure).__name__}: {failure}"

    def lost_peer(self, failure):
        return None


def driven(tmp_path, name, trainer=None, options=None, *overrides):
    """(status, exit code, records) of a run of 3 epochs of this trainer through the epoch
    driver; its metrics also checked against the published JSON Schema."""
    cfg = config_io.load_config(
        None,
        [
            f"output.dir={tmp_path}",
            f"output.run_name={name}",
            "train.epochs=3",
            "train.log_every_steps=3",
            "output.save_model=true",
            "optim.lr=0.05",
            *overrides,
        ],
    )
    status, code = loop.execute(cfg, options or RunOptions(), trainer or NumpyTrainer())
    check_file(tmp_path / name / "metrics.jsonl")
    return status, code, read_metrics(tmp_path / name / "metrics.jsonl")
