"""Every strategy of every framework, each described once: the registry that config validation,
the frameworks' wrappers and precision, the tools and the metrics schema ask.

A strategy says how it divides the ranks (`ParallelDims`: data-parallel replicas x shards; every
rank is a data-parallel rank, there is no tensor or pipeline dimension), how it holds the
parameters, how it applies a mixed precision, which options of its framework's section it
reads, and what it refuses. A framework builds it with one function of its own, looked up by
name (`torch_impl.parallel.APPLY`); a test keeps the two lists equal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from common.core.config import expected_traffic
from common.core.config.expected_traffic import Expected, Unit

# Strategy options each framework's section may carry. A strategy that does not read one leaves
# it at the section's own default (`framework_sections`, where every default is declared).
OPTIONS: Mapping[str, tuple[str, ...]] = {
    "torch": ("sharding", "wrap", "auto_wrap_min_params", "cpu_offload", "hsdp_shard_size"),
    "tf": (),
}
# Tuning knobs that a strategy not reading them leaves alone, so that one sweep can set them
# for all of its strategies; any other option set where it means nothing is refused.
TUNING = ("wrap", "auto_wrap_min_params", "hsdp_shard_size")


@dataclass(frozen=True, slots=True)
class ParallelDims:
    """How the ranks divide the work: `replicate` groups each holding the whole model, each
    split into `shard` ranks that hold a part of it (torchtitan's dp_replicate x dp_shard).
    There is no tensor or pipeline dimension, so every rank is a data-parallel rank: rank r
    trains on slice r of the global batch."""

    replicate: int
    shard: int

    @property
    def dp_size(self) -> int:
        """Ranks the global batch is split over: all of them (replicate x shard)."""
        return self.replicate * self.shard


@dataclass(frozen=True, kw_only=True)
class Strategy:
    name: str
    framework: str
    summary: str
    """One line for help texts and the README."""
    parameters: Literal["plain", "flat", "dtensor", "mirrored"]
    """How the wrapper holds the parameters: ordinary tensors (single, DDP), FSDP1's flat
    parameters, DTensor shards (fully_shard), TensorFlow mirrored variables."""
    precision_by: Literal["autocast", "wrapper", "policy"]
    """Who casts the compute to bf16/fp16: torch.autocast around the forward, the wrapper's
    mixed-precision policy, or Keras' global policy."""
    gradient_sync: str
    """What numerics records of the gradients' way between ranks."""
    reads: tuple[str, ...] = ()
    """The framework section's options (OPTIONS) this strategy uses; any other one left at
    its default."""
    compiles: bool = True
    """torch.compile / tf.jit_compile offered with it."""
    processes: Literal["one", "any"] = "any"
    """single runs one process, the others any number."""
    dims: Callable[[int, int, Any], ParallelDims] = field(
        default=lambda world, local_world, cfg: ParallelDims(replicate=world, shard=1)
    )
    """(world size, ranks per node, config) -> the mesh."""
    reshards: bool = True
    """A checkpoint it saved loads at another world size: torch's Distributed Checkpoint
    reshards at load, TensorFlow's mirrored variables are whole on every worker."""
    loads_from: tuple[str, ...] = ()
    """Other strategies whose checkpoints it loads: DCP saves both as the same whole
    parameters and optimizer states, under the same names."""
    refuse: Callable[[Any], str | None] = field(default=lambda cfg: None)
    """A value this strategy cannot take (the reason, naming the fix), None when all is well."""
    traffic: Callable[[list[Unit], int, int, Any], list[Expected]] = expected_traffic.replicated
    """(the wrapper's units, replicas, shards, config) -> the collectives it is expected to
    issue per optimizer step (`common.core.config.expected_traffic`)."""

    @property
    def shards(self) -> bool:
        """Ranks hold parts of the parameters (their replicas' digests say nothing)."""
        return self.parameters in ("flat", "dtensor")


def _fsdp_dims(world: int, local_world: int, cfg: Any) -> ParallelDims:
    return ParallelDims(replicate=1, shard=world)


def _hsdp_dims(world: int, local_world: int, cfg: Any) -> ParallelDims:
    shard = cfg.torch.hsdp_shard_size or local_world
    if shard < 1 or world % shard:
        raise ValueError(
            f"torch.strategy=hsdp: {world} ranks do not split into shard groups of "
            f"{shard} (torch.hsdp_shard_size, 0 = ranks per node); choose a divisor of {world}"
        )
    return ParallelDims(replicate=world // shard, shard=shard)


def _no_shard_in_dtensor(cfg: Any) -> str | None:
    if cfg.torch.sharding == "no_shard":
        return (
            f"torch.sharding=no_shard does not exist in fully_shard ({cfg.torch.strategy}); "
            "use torch.strategy=ddp"
        )
    return None


FSDP_OPTIONS = ("sharding", "wrap", "auto_wrap_min_params", "cpu_offload")
REDUCE_SCATTER = "parameters all-gathered per unit, gradients reduce-scattered in fp32"
STRATEGIES: tuple[Strategy, ...] = (
    Strategy(
        name="single",
        framework="torch",
        summary="one process, no wrapper: the baseline",
        parameters="plain",
        precision_by="autocast",
        gradient_sync="none (one process)",
        processes="one",
        reshards=False,
        traffic=expected_traffic.nothing,
    ),
    Strategy(
        name="ddp",
        framework="torch",
        summary="DistributedDataParallel: every rank holds the whole model",
        parameters="plain",
        precision_by="autocast",
        gradient_sync="all-reduced (mean) in fp32 over all ranks, bucketed",
        loads_from=("fsdp2",),
    ),
    Strategy(
        name="fsdp2",
        framework="torch",
        summary="fully_shard per unit, then the root: parameters sharded over all ranks",
        parameters="dtensor",
        precision_by="wrapper",
        gradient_sync=REDUCE_SCATTER + " over all ranks",
        reads=FSDP_OPTIONS,
        dims=_fsdp_dims,
        loads_from=("ddp",),
        refuse=_no_shard_in_dtensor,
        traffic=expected_traffic.fully_sharded,
    ),
    Strategy(
        name="fsdp1",
        framework="torch",
        summary="FullyShardedDataParallel: the same units as fsdp2, flat parameters",
        parameters="flat",
        precision_by="wrapper",
        gradient_sync=REDUCE_SCATTER + " over all ranks",
        reads=FSDP_OPTIONS,
        compiles=False,
        dims=_fsdp_dims,
        traffic=expected_traffic.flat_sharded,
    ),
    Strategy(
        name="hsdp",
        framework="torch",
        summary="fully_shard on a 2-D mesh: shard within groups of torch.hsdp_shard_size ranks "
        "(default: a node), replicate across them",
        parameters="dtensor",
        precision_by="wrapper",
        gradient_sync=REDUCE_SCATTER + " within a shard group, then all-reduced (mean) across "
        "the replicas",
        reads=(*FSDP_OPTIONS, "hsdp_shard_size"),
        dims=_hsdp_dims,
        refuse=_no_shard_in_dtensor,
        traffic=expected_traffic.hybrid,
    ),
    Strategy(
        name="mwms",
        framework="tf",
        summary="MultiWorkerMirroredStrategy: one worker per process, mirrored variables",
        parameters="mirrored",
        precision_by="policy",
        gradient_sync="summed over all workers in fp32 (collective all-reduce)",
        traffic=expected_traffic.packed,
    ),
)
AUTO = "auto"
"""torch.strategy=auto: single for one process, ddp for more."""


def of(framework: str) -> dict[str, Strategy]:
    """The strategies of one framework, by name, in registry order."""
    return {s.name: s for s in STRATEGIES if s.framework == framework}


def names() -> tuple[str, ...]:
    """Every strategy name a run_start record may carry."""
    return tuple(dict.fromkeys(s.name for s in STRATEGIES))


def get(framework: str, name: str) -> Strategy:
    """The strategy `name` of `framework`; ValueError naming the allowed ones."""
    found = of(framework)
    if name not in found:
        raise ValueError(
            f"{framework}.strategy={name!r} is not a strategy of {framework}; allowed: "
            + ", ".join(found)
        )
    return found[name]


def resolve(framework: str, name: str, world_size: int) -> str:
    """`auto` made concrete: the framework's one-process strategy for one process, else its
    first multi-process one; other names unchanged."""
    if name != AUTO:
        return name
    found = list(of(framework).values())
    ones = [s for s in found if s.processes == "one"]
    if world_size == 1 and ones:
        return ones[0].name
    return next(s.name for s in found if s.processes == "any")


def runnable(framework: str, world_size: int) -> list[str]:
    """The strategies of `framework` worth running on `world_size` ranks: on one rank its
    one-process strategies (all, if it has none), on more the others."""
    found = list(of(framework).values())
    ones = [s.name for s in found if s.processes == "one"]
    if world_size == 1 and ones:
        return ones
    return [s.name for s in found if s.processes == "any"]


def takes(strategy: Strategy, override: str) -> bool:
    """Whether a `--set section.key=value` override means anything to `strategy`: False for an
    option of its framework that other strategies read and it does not (a bench or sweep over
    several strategies passes such an option only to those that read it)."""
    section, _, key = override.partition("=")[0].strip().partition(".")
    options = OPTIONS.get(strategy.framework, ())
    return not (section == strategy.framework and key in options and key not in strategy.reads)


def refusals(strategy: Strategy, cfg: Any, world_size: int | None = None) -> list[str]:
    """Why `cfg` cannot run with `strategy` (on `world_size` ranks, when known); empty when it
    can. Each reason names the fix."""
    section = getattr(cfg, strategy.framework)
    found = []
    for option in OPTIONS[strategy.framework]:
        value, unused = getattr(section, option), type(section).model_fields[option].default
        if option not in strategy.reads and option not in TUNING and value != unused:
            users = [s.name for s in of(strategy.framework).values() if option in s.reads]
            found.append(
                f"{strategy.framework}.{option}={value} is an option of {', '.join(users)}; "
                f"with {strategy.framework}.strategy={strategy.name} leave it at {unused}"
            )
    if getattr(section, "compile", False) and not strategy.compiles:
        able = [s.name for s in of(strategy.framework).values() if s.compiles]
        found.append(
            f"{strategy.framework}.compile=true is offered for {', '.join(able)}, not "
            f"{strategy.name} (not tested here)"
        )
    if world_size is not None and strategy.processes == "one" and world_size != 1:
        others = [s.name for s in of(strategy.framework).values() if s.processes == "any"]
        found.append(
            f"{strategy.framework}.strategy={strategy.name} runs one process, but {world_size} "
            f"were launched; use {', '.join(others)}, or launch one process"
        )
    reason = strategy.refuse(cfg)
    return found + ([reason] if reason else [])
