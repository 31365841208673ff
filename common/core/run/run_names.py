"""The name of a run's folder, which every rank must reach alike."""

from __future__ import annotations

from common.core.config.config import Config
from common.launch.cluster import ClusterSpec, unique_stamp


def run_name(cfg: Config, framework: str, strategy: str, spec: ClusterSpec) -> str:
    """output.run_name, else <framework>-<strategy>-<model>-w<world>-<launch id> (-elastic-
    in place of -w<world>- where an elastic launcher may restart the ranks).

    Every rank must reach the same name; the launch id (SLURM job, launcher run id) is shared by
    all ranks. Without one (a bare torchrun) a unique stamp is drawn, which only the chief's
    counts: `Run.start` broadcasts the chief's name.
    """
    if cfg.output.run_name:
        return cfg.output.run_name
    stamp = spec.launch_id or unique_stamp()
    # a run an elastic launcher may restart at another size keeps one name (and one folder)
    size = "elastic" if spec.max_restarts else f"w{spec.world_size}"
    return f"{framework}-{strategy}-{cfg.model.name}-{size}-{stamp}"
