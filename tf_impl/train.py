"""Train an MNIST model with TensorFlow: MultiWorkerMirroredStrategy, custom loop, CPU or GPU.

    python -m tf_impl.train --config configs/mlp_adam.yaml [--set tf.communication=ring ...]

Start it with srun or `python -m common.launch --nproc N --`: every process is one worker.
Keras 3's `model.fit` breaks under this strategy (TensorFlow issue 72388, keras issue 20585),
so the loop is written out: `strategy.run` of a compiled step whose loss is
`tf.nn.compute_average_loss(..., global_batch_size=...)`, the same mean as on the torch side."""

from __future__ import annotations

from common.core.run import stop_signals

if __name__ == "__main__":  # --help, and a refusal, in a second: before the framework's import
    stop_signals.defer_preemption()  # a SIGUSR1 from now on waits for the run's handler
    from common.core.config import cli  # after the signal is held: 0.4 s of pydantic on a slow CPU

    cli.answer_help_early("python -m tf_impl.train", __doc__)
    from common.core.train.main import refuse_early  # after the signal is held

    refuse_early("python -m tf_impl.train", __doc__)

import contextlib
import functools
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import config as framework_config
from tensorflow.python.util import _pywrap_util_port

from common.core.config.config import Config
from common.core.measure import precision, replicas
from common.core.measure.clocks import EpochMeanStepClock, HostStepClock
from common.core.measure.traffic import Call
from common.core.records.entries import StepSplit
from common.core.train import main as main_body
from common.core.train.optim import changes_every_step
from common.core.train.trainer import TrainerBase
from common.launch.cluster import ClusterSpec
from common.launch.rendezvous import RendezvousError
from tf_impl import checkpoint, dist, faults, gemm, memory, preemption, step_profile, traffic
from tf_impl.data import TfData, build_dataset
from tf_impl.model import build_model
from tf_impl.optim import build_optimizer
from tf_impl.step import Rate, evaluate, make_eval_step, make_train_step

TRAIN_CLOCK = (
    "the epoch's training steps: batch fetch, forward, backward, gradient all-reduce, optimizer "
    "step; device synchronized at both ends; excludes evaluation, checkpoints and metrics; "
    "epoch 1 includes tf.function tracing and warm-up"
)
# On the CPU a step's loss is read at once (the step is done when it returns); on a GPU it is
# kept on the device until the end of the epoch, so that the host can queue the next step.
HOST_LOSSES = "each step's loss fetched to the host"
POLICY = {"none": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
# What a lost peer looks like from a surviving worker's collective.
PEER_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.CancelledError,
    tf.errors.AbortedError,
    tf.errors.DeadlineExceededError,
    tf.errors.InternalError,
)


T = TypeVar("T")


class TfTrainer(TrainerBase):
    """tf_impl's side of `common.core.train.trainer.Trainer`: what only TensorFlow knows."""

    framework = "tf"
    framework_version = str(tf.__version__)
    dist, memory, checkpoint, gemm = dist, memory, checkpoint, gemm  # for TrainerBase
    data: TfData

    def __init__(self, cfg: Config, info: dist.DistInfo):
        super().__init__(cfg, info)
        self.precision = precision.LOW[cfg.tf.mixed_precision]
        self.on_gpu = info.device_type == "gpu"
        clock = EpochMeanStepClock if self.on_gpu else HostStepClock
        losses = "losses kept on the device" if self.on_gpu else HOST_LOSSES
        self.train_clock = f"{TRAIN_CLOCK}; {losses}; {clock.description}"
        # TF32: on by default in TensorFlow; dist.tf32 decides, as on the torch side
        # (tf.config.experimental.enable_tensor_float_32_execution, TF 2.21 API docs).
        tf.config.experimental.enable_tensor_float_32_execution(cfg.dist.tf32)
        self.overflows = faults.forced_overflows(cfg, info.rank)  # a test's fault; None in a run
        self.skips = precision.SkippedSteps()  # this launch's steps, and the optimizer's
        self.applied_before = 0  # the optimizer's updates of earlier launches (a resume)
        self.counting: list[Call] | None = None  # collectives of the work count_calls runs
        self.counted_split: StepSplit | None = None  # where the counted step's time went
        self.step_markers = False  # while tracing (output.profile_steps)

    def numerics(self) -> dict:
        enabled = tf.config.experimental.tensor_float_32_execution_enabled()
        return {
            **self.shared_numerics(loss_scaling=self.cfg.tf.mixed_precision == "fp16"),
            "tf32_settings": {"tensor_float_32_execution": enabled},
            # TF 2.21 exports only the setter (enable_op_determinism); the getter is internal.
            "deterministic_settings": {
                "op_determinism": framework_config.is_op_determinism_enabled()
            },
            "how": f"Keras policy {POLICY[self.cfg.tf.mixed_precision]}",
            # _pywrap_util_port is internal; TF 2.21 exports no getter of the oneDNN switch.
            "cpu_kernels": "oneDNN" if _pywrap_util_port.IsMklEnabled() else "Eigen",
        }

    def build(self) -> None:
        cfg, info = self.cfg, self.info
        # Held here: its iterators must outlive the loop.
        self.data = build_dataset(cfg, info, self.dims)
        keras.mixed_precision.set_global_policy(POLICY[cfg.tf.mixed_precision])
        self.take_memory_baseline()
        with info.distribution.scope():
            self.model = build_model(cfg.net(), cfg.train.seed, cfg.model.activation_checkpointing)
            self.optimizer = build_optimizer(cfg.optim)
            if cfg.tf.mixed_precision == "fp16":
                self.optimizer = faults.loss_scale_optimizer(self.optimizer, self.overflows)
            self.optimizer.build(self.model.trainable_variables)
        source = (self.data.train_images, self.data.train_labels)
        micro, every_step = cfg.train.accumulation_steps, changes_every_step(cfg.optim)
        model, optimizer, jit = self.model, self.optimizer, cfg.tf.jit_compile
        self.compiled_step, self.compiled_steps = make_train_step(
            model, optimizer, info, self.global_batch, jit, source, micro, rates=every_step
        )
        self.rate = Rate(optimizer, every_step)  # set outside the calls, unless every_step
        self.eval_step = make_eval_step(self.model, jit_compile=cfg.tf.jit_compile)

    def train_batches(self, epoch: int, start: int = 0):
        """The data's batches from step `start`; on the tensor pipeline each step's indices,
        gathered inside the compiled call (`train_steps`; docs/performance.md says why)."""
        if self.cfg.data.pipeline == "tensor":
            return iter(self.data.plan.rank_indices(epoch)[start:])
        return self.data.train_batches(epoch, start)

    def train_step(self, batch, lr: float) -> float:
        if self.counting is None:
            return self._train_step(batch, lr)
        # the counted step: where its time goes, from TensorFlow's profiler (on a GPU the
        # kernels run beside the host's profile: none there, as on torch)
        if self.on_gpu or not step_profile.splits_here(self.cfg.net(), self.info.spec):
            return self._train_step(batch, lr)
        scopes = step_profile.scopes_of(self.optimizer)
        loss, self.counted_split = step_profile.profiled(
            lambda: self._train_step(batch, lr), scopes
        )
        return loss

    def _train_step(self, batch, lr: float) -> float:
        self.skips.taken += 1
        gathered = isinstance(batch, np.ndarray)  # indices: gathered inside `train_steps`
        compiled = self.compiled_steps if gathered else self.compiled_step
        rate = self.rate.arguments([lr], stacked=False)
        arguments = (tf.constant(batch), *rate) if gathered else (*batch, *rate)
        with self._marked(1):
            loss = compiled(*arguments)
        if self.counting is not None:  # the graph this call ran
            concrete = compiled.get_concrete_function(*arguments)
            self.counting += traffic.graph_calls(concrete, self.info.world_size)
        return loss if self.on_gpu else float(loss)  # float() waits for the step

    def step_split(self) -> StepSplit | None:
        return self.counted_split

    @contextlib.contextmanager
    def tracing(self, folder: Path) -> Iterator[None]:
        """TensorFlow's profiler over what runs inside; this rank's XSpace written under
        `folder`/tf-rank-R at the end, where TensorBoard's Profile tab finds it."""
        tf.profiler.experimental.start(str(folder / f"tf-rank-{self.info.rank}"))
        self.step_markers = True  # each call marked as a step: the Profile tab's step times
        try:
            yield
        finally:
            self.step_markers = False
            step_profile.stop_settled()

    def _marked(self, steps: int) -> contextlib.AbstractContextManager:
        """A step marker for TensorBoard's Profile tab while tracing, else nothing."""
        if not self.step_markers:
            return contextlib.nullcontext()
        first = self.skips.taken - steps  # this launch's steps before the call
        return tf.profiler.experimental.Trace("train", step_num=first, _r=1)

    def train_steps(self, batches: list, lrs: list[float]) -> list:
        """Several steps in one tf.function call (train.steps_per_call); one call each for the
        loader pipeline's per-replica batches (they cannot be stacked) and for a call shorter
        than K (an epoch's last, whose length changes: a new trace, 1.53 s on 2 workers)."""
        if self.cfg.data.pipeline != "tensor" or len(batches) < self.cfg.train.steps_per_call:
            return super().train_steps(batches, lrs)
        self.skips.taken += len(batches)
        with self._marked(len(batches)):
            rates = self.rate.arguments(lrs, stacked=True)
            losses = self.compiled_steps(tf.constant(np.stack(batches)), *rates)
        return list(tf.unstack(losses)) if self.on_gpu else losses.numpy().tolist()

    def step_clock(self):
        return EpochMeanStepClock() if self.on_gpu else HostStepClock()  # CPU: nothing to wait for

    def loss_scaling(self) -> tuple[float, int] | None:
        if not isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
            return None
        # The inner optimizer counts only the steps it applied.
        self.skips.applied = int(self.optimizer.iterations.numpy()) - self.applied_before
        new = self.skips.new_since_last()
        return float(self.optimizer.dynamic_scale.numpy()), new

    def replica_digest(self) -> float | None:
        total = 0  # integer sums of the bit patterns: exact, in any order
        for variable in self.model.variables:  # weights and running statistics
            if not str(variable.dtype).startswith(("float", "bfloat")):
                continue  # the dropout layers' seed states
            bits = tf.bitcast(tf.cast(variable, tf.float32), tf.int32)
            total += int(tf.reduce_sum(tf.cast(bits, tf.int64)))
        return float(total % replicas.DIGEST_MODULUS)

    def evaluate(self) -> tuple[float, float]:
        result = evaluate(self.eval_step, self.data, self.info)
        if self.counting is not None:
            self.counting += traffic.eval_calls(self.eval_step, self.data, self.info)
        return result

    def count_calls(self, work: Callable[[], T]) -> tuple[T, list[Call]]:
        self.counting = []
        try:
            result = work()
        finally:
            calls, self.counting = self.counting, None
        return result, calls

    def load_checkpoint(self, folder) -> None:
        super().load_checkpoint(folder)
        self.rate.forget()  # the optimizer's rate is the checkpoint's
        self.applied_before = int(self.optimizer.iterations.numpy())  # of earlier launches

    def stop_agreement(self, requested: Callable[[], bool]):
        """Through TensorFlow's PreemptionCheckpointHandler where it acts (several workers, not
        a Google Cloud CPU VM); the suite's vote otherwise (`tf_impl.preemption`)."""
        if self.info.distributed and preemption.supported():
            return preemption.HandlerAgreement(self.info, requested)
        return super().stop_agreement(requested)

    def lost_peer(self, failure: BaseException) -> str | None:
        if not isinstance(failure, PEER_ERRORS):
            return None
        # TensorFlow's message may name the remote task it lost, deep in its text.
        named = {
            int(task) for task in re.findall(r"/job:worker/replica:\d+/task:(\d+)", str(failure))
        }
        named.discard(self.info.rank)
        shown = ", ".join(map(str, sorted(named)))
        return "a collective failed" + (f" (TensorFlow names worker {shown})" if named else "")


def prepare(cfg: Config, spec: ClusterSpec) -> Config:
    """What TensorFlow cannot run, refused before the strategy starts."""
    if cfg.tf.jit_compile and spec.world_size > 1 and precision.batch_norm(cfg.net()) != "none":
        raise ValueError(
            f"tf.jit_compile=true: {cfg.model.name}'s batch normalization all-reduces its "
            f"statistics over the {spec.world_size} workers inside the forward pass, and "
            "MultiWorkerMirroredStrategy's collectives cannot run inside an XLA cluster; use "
            "tf.jit_compile=false, or one worker"
        )
    profiled = cfg.output.profile_steps
    if profiled and not step_profile.safe_to_profile(cfg.net(), spec.world_size):
        raise ValueError(
            f"output.profile_steps={profiled}: {step_profile.UNSAFE}; trace "
            f"{cfg.model.name} on torch, or with one worker, or trace the MLP or the CNN"
        )
    if cfg.output.split_steps > 1:  # each a profiler session: more have crashed TensorFlow
        raise ValueError(
            f"output.split_steps={cfg.output.split_steps}: TensorFlow profiles one step for the "
            "split (docs/performance.md); use output.split_steps=1, or run torch"
        )
    return cfg


SIDE = main_body.Side(
    framework="tf",
    prepare=prepare,
    setup=dist.setup_distributed,
    trainer=TfTrainer,
    # The peers did not come: the rendezvous, or TensorFlow's coordination service, gave up.
    startup_errors=(RendezvousError, RuntimeError, tf.errors.OpError),
    own_temp_folder=True,  # AutoGraph's files: an atexit handler removes them, os._exit skips it
)


# The program: `main(argv)` is the shared body with this side's parts (no frame of its own,
# so that a reader reaches train_step in 5 frames: main, loop.execute, train_epochs,
# train_epoch, train_step).
main = functools.partial(main_body.main, SIDE, "python -m tf_impl.train", __doc__)


if __name__ == "__main__":
    main()
