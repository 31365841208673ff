"""Bring up MultiWorkerMirroredStrategy from the `common` cluster description.

TF_CONFIG is set (by `common.launch.cluster.write_tf_config`, its one writer) before TensorFlow does
anything else, or, under torchrun, which does not tell the peers' hosts, once the ranks' meeting
has told them (`common.launch.rendezvous`), before the strategy reads it. Every rank is one worker
with one device (a GPU picked by local rank, or the CPU). Start-up is bounded twice: the ranks
first meet in `common.launch.rendezvous` (retried, names a missing worker), and TensorFlow's
coordination service then gets dist.startup_timeout_s to register everyone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context

from common.core.config import devices
from common.core.config.config import Config
from common.launch import cluster, rendezvous

COMMUNICATION = {
    "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
    "ring": tf.distribute.experimental.CommunicationImplementation.RING,
    "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
}


@dataclass(frozen=True)
class DistInfo(cluster.RankView):
    spec: cluster.ClusterSpec
    distribution: tf.distribute.Strategy
    """TensorFlow's distribution strategy object (MultiWorkerMirroredStrategy); the suite's own
    word `strategy` names a registry entry (`common.core.config.strategies`)."""
    device: str  # TensorFlow's name of the worker's one device: "GPU:0" or "CPU:0"
    device_type: str  # "cpu" or "gpu"
    device_name: str  # "cpu" or the GPU's name
    threads: dict = field(default_factory=dict)  # {"intra_op": n, "inter_op": m}
    compiled: dict = field(default_factory=dict, compare=False)  # tf.functions made once

    @property
    def distributed(self) -> bool:
        return self.spec.world_size > 1


def pick_device(cfg: Config, spec: cluster.ClusterSpec) -> tuple[str, str]:
    """Make one device visible to this worker (`common.core.config.devices.place` decides which;
    ValueError
    when it cannot work): the GPU of its local rank, or none."""
    gpus = tf.config.list_physical_devices("GPU")
    placed = devices.place(
        framework="tf", requested=cfg.dist.device, visible_gpus=len(gpus), spec=spec
    )
    if cfg.tf.communication == "nccl" and placed.device_type == "cpu":
        raise ValueError("tf.communication=nccl needs GPUs; use tf.communication=ring on CPUs")
    if placed.device_type == "cpu":
        tf.config.set_visible_devices([], "GPU")
        return "cpu", "cpu"
    gpu = gpus[placed.gpu_index]
    tf.config.set_visible_devices([gpu], "GPU")
    tf.config.experimental.set_memory_growth(gpu, True)  # peak memory = memory used
    details = tf.config.experimental.get_device_details(gpu)
    return "gpu", details.get("device_name", gpu.name)


def set_threads(spec: cluster.ClusterSpec) -> dict[str, int]:
    """Intra- and inter-op threads by `common.core.config.devices`' rule (the same as torch's
    side)."""
    intra = devices.threads_per_rank(spec, devices.available_cores())
    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(devices.inter_op_threads(intra))
    return {
        "intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
    }


def _configure_coordination(cfg: Config, spec: cluster.ClusterSpec) -> None:
    """TensorFlow's own start-up deadline: all workers register within dist.startup_timeout_s
    (with a barrier), instead of the default of waiting forever."""
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2

    ctx = context.context()
    ctx.configure_coordination_service(
        service_type="standalone",
        service_leader="/job:worker/replica:0/task:0",
        cluster_register_timeout_in_ms=int(cfg.dist.startup_timeout_s * 1000),
        coordinated_jobs=[
            coordination_config_pb2.CoordinatedJob(name="worker", num_tasks=spec.world_size)
        ],
    )
    ctx.coordination_service.cluster_register_with_barrier = True


def setup_distributed(cfg: Config, spec: cluster.ClusterSpec) -> DistInfo:
    """Set TF_CONFIG, take this worker's device and its share of the cores, meet the peers,
    build the strategy."""
    cfg.train.global_batch_size(spec.world_size)  # fails early on a batch that does not split
    if spec.hosts or spec.world_size == 1:  # else (torchrun) the peers' meeting tells them
        cluster.write_tf_config(spec, os.environ)
    if cfg.dist.deterministic:  # before any op; the seeds are set where the model is built
        tf.config.experimental.enable_op_determinism()
    device_type, device_name = pick_device(cfg, spec)
    threads = set_threads(spec)
    if spec.world_size > 1:
        hidden = not spec.hosts  # torchrun: the meeting tells them
        spec = rendezvous.wait_for_peers(spec, cfg.dist.startup_timeout_s, cfg.dist.startup_retries)
        if hidden:
            cluster.write_tf_config(spec, os.environ)  # read by the strategy, built below
        _configure_coordination(cfg, spec)
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=COMMUNICATION[cfg.tf.communication],
        timeout_seconds=cfg.dist.timeout_s,
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    device = "GPU:0" if device_type == "gpu" else "CPU:0"  # the one device left visible
    return DistInfo(spec, strategy, device, device_type, device_name, threads)


def versions(info: DistInfo) -> dict[str, str]:
    """TensorFlow's libraries that shape a run on this worker's device (CUDA, cuDNN on a GPU)."""
    found = {"tensorflow": tf.__version__, "keras": keras.__version__}
    if info.device_type == "gpu":
        build = tf.sysconfig.get_build_info()
        found["cuda"] = str(build.get("cuda_version", ""))
        found["cudnn"] = str(build.get("cudnn_version", ""))
    return found


def leave_together(info: DistInfo, timeout_s: float) -> None:
    """Return once every worker has finished its last collective. A worker whose last
    all-reduce has returned may still be serving buffers that a peer pulls (RecvBuf), so
    leaving at once broke the peer's reduce ("Socket closed"). So the workers meet once more
    over plain TCP (`common.launch.rendezvous`), which they reach only after all their own work."""
    if info.distributed:
        rendezvous.wait_for_peers(info.spec, timeout_s, attempts=1)


def _all_reduce_fn(info: DistInfo):
    """A compiled cross-worker sum, made once per strategy."""
    if "all_reduce" not in info.compiled:

        @tf.function(reduce_retracing=True)  # one trace for every shape
        def reduce(values):
            def replica_sum(local):
                # identity: a function input has no device, and the reduce needs one
                return tf.distribute.get_replica_context().all_reduce("sum", tf.identity(local))

            return info.distribution.run(replica_sum, args=(values,))

        info.compiled["all_reduce"] = reduce
    return info.compiled["all_reduce"]


def all_reduce_sum(values: np.ndarray, info: DistInfo) -> np.ndarray:
    """Sum a float64 array over the workers; every worker gets the sum."""
    local = tf.constant(np.asarray(values, dtype=np.float64))
    if not info.distributed:
        return local.numpy()
    reduced = _all_reduce_fn(info)(local)
    return info.distribution.experimental_local_results(reduced)[0].numpy()


def barrier(info: DistInfo) -> None:
    """A collective every worker must reach (a sum of ones), checked."""
    if info.distributed:
        arrived = all_reduce_sum(np.ones(1), info)[0]
        if int(arrived) != info.world_size:
            raise RuntimeError(f"barrier: {int(arrived)} of {info.world_size} workers arrived")


def synchronize(info: DistInfo) -> None:
    """Wait for queued device work, so that a clock reading means what it says. On the CPU
    every op has finished when it returns (synchronous execution, TensorFlow's default); on
    a GPU ops run asynchronously and `tf.test.experimental.sync_devices` (TF >= 2.13) waits."""
    if info.device_type == "gpu":
        tf.test.experimental.sync_devices()
