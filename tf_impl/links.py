"""Measure the links of a launch with TensorFlow's own collectives (MultiWorkerMirroredStrategy's
RING or NCCL, as training uses them) and write a link profile (`common.projection.link_profile`).
One worker of any launcher:

    python -m common.launch --nproc 2 -- python -m tf_impl.links --out results/links.json

MultiWorkerMirroredStrategy offers no reduce-scatter; the profile says so.
"""

from __future__ import annotations

from common.projection import link_bench

if __name__ == "__main__":  # --help, and a refusal, in a second: before the framework's import
    link_bench.refuse_early("python -m tf_impl.links", __doc__, "tf", sub_groups=False)

import time

import tensorflow as tf

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

                return info.distribution.run(collective, args=(values,))

            compiled[kind] = run
        return compiled[kind]

    def seconds(kind: str, payload: int, repeats: int) -> float:
        values = tf.ones(max(2, payload // 4), tf.float32)
        run = call(kind)
        dist.barrier(info)
        start = time.perf_counter()
        for _ in range(repeats):
            info.distribution.experimental_local_results(run(values))[0].numpy()
        return (time.perf_counter() - start) / repeats

    return seconds


def _transport(info: dist.DistInfo, cfg) -> str:
    chosen = cfg.tf.communication
    return "ring" if chosen == "auto" and info.device_type == "cpu" else chosen


SIDE = link_bench.Side(
    framework="tf",
    kinds=("all_reduce", "all_gather"),
    setup=dist.setup_distributed,
    timer=timer,
    transport=_transport,
    all_reduce_sum=dist.all_reduce_sum,
    leave=dist.leave_together,
    not_measured={"reduce_scatter": "MultiWorkerMirroredStrategy offers none"},
)


def main(argv: list[str] | None = None) -> int:
    return link_bench.main(SIDE, "python -m tf_impl.links", __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())
