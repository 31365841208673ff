"""Measure the links of a launch with TensorFlow's own collectives (MultiWorkerMirroredStrategy's
RING or NCCL, as training uses them) and write a link profile (`common.core.measure.links`).
One worker of any launcher:

    python -m common.launch --nproc 2 -- python -m tf_impl.links --out results/links.json

MultiWorkerMirroredStrategy offers no reduce-scatter; the profile says so.
"""

from __future__ import annotations

import argparse
import sys
import time

import tensorflow as tf

from common.core.config import config_io
from common.core.measure import collectives, links
from common.launch import environment
from tf_impl import dist


def timer(info: dist.DistInfo):
    """timer(kind, payload bytes, repeats) -> mean seconds of one float32 call over the workers."""
    compiled = {}

    def call(kind: str):
        if kind not in compiled:

            @tf.function
            def run(values):
                def collective(local):
                    context = tf.distribute.get_replica_context()
                    if kind == "all_gather":
                        return context.all_gather(tf.identity(local), axis=0)
                    return context.all_reduce("sum", tf.identity(local))

                return info.strategy.run(collective, args=(values,))

            compiled[kind] = run
        return compiled[kind]

    def seconds(kind: str, payload: int, repeats: int) -> float:
        values = tf.ones(max(2, payload // 4), tf.float32)
        run = call(kind)
        dist.barrier(info)
        start = time.perf_counter()
        for _ in range(repeats):
            info.strategy.experimental_local_results(run(values))[0].numpy()
        return (time.perf_counter() - start) / repeats

    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tf_impl.links", description=__doc__)
    parser.add_argument("--out", required=True, help="the profile's JSON file (the chief's)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    parser.add_argument("--max-bytes", type=int, default=links.SIZES[-1])
    args = parser.parse_args(argv)
    try:
        spec = environment.from_environment()
        if spec.world_size < 2:
            raise ValueError("a link takes 2 workers or more: start this under a launcher")
        cfg = config_io.load_config(None, [f"dist.device={args.device}"])
        info = dist.setup_distributed(cfg, spec)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    kinds = links.measure(
        timer(info), ("all_reduce", "all_gather"), info.world_size, args.max_bytes
    )
    hosts = collectives.gather_texts(
        spec.node,
        rank=info.rank,
        world_size=info.world_size,
        all_reduce_sum=lambda values: dist.all_reduce_sum(values, info),
    )
    if info.is_chief:
        transport = cfg.tf.communication if cfg.tf.communication != "auto" else "ring"
        profile = links.LinkProfile(
            time=links.stamp(),
            framework="tf",
            transport=transport if info.device_type == "cpu" else cfg.tf.communication,
            device_type=info.device_type,
            world_size=info.world_size,
            hosts=hosts,
            launcher=spec.launcher,
            launch_id=spec.launch_id,
            kinds=kinds,
            not_measured={"reduce_scatter": "MultiWorkerMirroredStrategy offers none"},
        )
        print(f"link profile: {links.write(profile, args.out)}")
    dist.leave_together(info, cfg.dist.timeout_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
