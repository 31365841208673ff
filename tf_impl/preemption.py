"""A stop inside an epoch, agreed through TensorFlow's own `PreemptionCheckpointHandler`.

The worker a SIGUSR1 reached writes the step to stop at into MWMS's coordination service and a
thread on every worker waits for that key, so no step runs a collective for it (the suite's
`Vote` runs an all-reduce after every call: +60% on a small step, against +4% for the handler;
docs/runs.md). The handler saves through `save_fn`, the suite's own checkpoint of that
boundary, one call after the boundary where the signal is seen, and leaves through `exit_fn`.
It reads the suite's SIGUSR1 flag through `termination_watcher_fn`, polled once a second. On a
Google Cloud CPU VM the handler does nothing, so there the vote stays.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable

import tensorflow as tf
from tensorflow.python.distribute.failure_handling import failure_handling_util

from tf_impl.dist import DistInfo

UNSUPPORTED = (
    failure_handling_util.PlatformDevice.GCE_CPU,
    failure_handling_util.PlatformDevice.GCE_TPU,
)


class _Agreed(Exception):  # noqa: N818 (the handler's way out once every worker has saved)
    pass


def supported() -> bool:
    """Whether the handler acts on this platform (not a Google Cloud CPU or TPU VM)."""
    return failure_handling_util.detect_platform() not in UNSUPPORTED


class HandlerAgreement:
    """`contract.StopAgreement` through the handler, made once per launch."""

    how = "TensorFlow's PreemptionCheckpointHandler"

    def __init__(self, info: DistInfo, requested: Callable[[], bool]) -> None:
        self._checkpoint: Callable[[], None] = lambda: None
        config = tf.distribute.experimental.TerminationConfig(
            termination_watcher_fn=requested, exit_fn=self._leave, save_fn=self._save
        )
        # It restores from its manager's folder when made; `save_fn` replaces its saves, so the
        # folder stays empty and is removed at once.
        scratch = tempfile.mkdtemp(prefix="tf-preemption-")
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(), scratch, max_to_keep=1)
        try:
            self.handler = tf.distribute.experimental.PreemptionCheckpointHandler(
                info.distribution.cluster_resolver, manager, termination_config=config
            )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _save(self) -> None:
        self._checkpoint()

    def _leave(self) -> None:
        raise _Agreed

    def at_boundary(self, checkpoint: Callable[[], None]) -> bool:
        self._checkpoint = checkpoint
        try:
            self.handler.save_checkpoint_if_preempted()
        except _Agreed:
            return True
        return False
