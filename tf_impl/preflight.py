"""The preflight's TensorFlow probe: one worker of `python -m common.tools.preflight` (see there).

    python -m common.launch --nproc 2 -- python -m tf_impl.preflight [--device auto]

Every worker builds MultiWorkerMirroredStrategy as a training run would (same device and
thread decisions); the chief prints one line `PREFLIGHT {json}`: versions, what every worker
sees, the TF32 setting, the precisions this hardware runs, and all-reduce bandwidth over sizes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import tensorflow as tf

from common.core.config import config_io, strategies
from common.core.run import own_temp
from common.launch import environment
from common.tools import preflight
from tf_impl import dist


def precisions(device_type: str) -> list[str]:
    """bf16 on a CPU with bf16 instructions (else TensorFlow emulates it) and on GPUs from
    compute capability 8.0 (Ampere) on; fp16 on GPUs."""
    if device_type != "gpu":
        return preflight.cpu_precisions()
    gpu = tf.config.get_visible_devices("GPU")[0]
    capability = tf.config.experimental.get_device_details(gpu).get("compute_capability", (0, 0))
    return ["none", "bf16", "fp16"] if tuple(capability) >= (8, 0) else ["none", "fp16"]


def all_reduce_seconds(size_bytes: int, iterations: int, info: dist.DistInfo) -> float:
    """Mean seconds of one float32 sum over the workers of `size_bytes`, after 2 warm-ups;
    each sum takes the last one's result, so they run one after another."""

    @tf.function
    def reduce_once(value):
        def replica_fn(local):
            context = tf.distribute.get_replica_context()
            return context.all_reduce("sum", tf.identity(local)) / float(info.world_size)

        return info.distribution.run(replica_fn, args=(value,))

    value = tf.ones([max(1, size_bytes // 4)], tf.float32)
    for _ in range(2):
        value = info.distribution.experimental_local_results(reduce_once(value))[0]
    float(value[0])
    dist.barrier(info)
    start = time.perf_counter()
    for _ in range(iterations):
        value = info.distribution.experimental_local_results(reduce_once(value))[0]
    float(value[0])  # waits for the last sum
    return (time.perf_counter() - start) / iterations


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tf_impl.preflight", description=__doc__)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    parser.add_argument("--tf32", action="store_true", help="dist.tf32=true")
    args = parser.parse_args(argv)
    own_temp.take()  # AutoGraph's files, which os._exit would leave (common.core.run.own_temp)
    overrides = [f"dist.device={args.device}", f"dist.tf32={str(args.tf32).lower()}"]
    try:
        cfg = config_io.load_config(None, overrides)
        spec = environment.from_environment()
        info = dist.setup_distributed(cfg, spec)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    tf.config.experimental.enable_tensor_float_32_execution(cfg.dist.tf32)
    enabled = tf.config.experimental.tensor_float_32_execution_enabled()
    preflight.report_probe(
        info,
        framework="tf",
        backend=cfg.tf.communication,
        versions=dist.versions(info),
        visible_gpus=len(tf.config.list_physical_devices("GPU")),
        tf32={"tensor_float_32_execution": enabled},
        precisions=precisions(info.device_type),
        strategies=strategies.runnable("tf", info.world_size),
        all_reduce_seconds=lambda size, repetitions: all_reduce_seconds(size, repetitions, info),
        all_reduce_sum=lambda values: dist.all_reduce_sum(values, info),
    )
    dist.leave_together(info, cfg.dist.timeout_s)
    sys.stdout.flush()
    own_temp.give_back()
    os._exit(0)  # as tf_impl.train: the strategy's teardown stalls for tens of seconds


if __name__ == "__main__":
    raise SystemExit(main())
