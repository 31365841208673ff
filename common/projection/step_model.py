"""What a run would do on more workers, from what it measured and a link profile
(`common.projection.link_profile`): its compute per step, and the collectives it issued per step
(the epoch records' traffic) priced by the profile at the projected world size.

  step at N      = the rest at N + communication at N: their larger (full overlap) to their sum
  the rest at N  = the measured step less its communication, split by the run's step split:
                   compute scales with the per-rank batch (strong scaling), the optimizer with
                   the shards, the overhead stays (grows with the communication on a node its
                   CPU quota held: `HELD`); without a split all of it is compute
  communication  = per collective kind: calls x the algorithm's steps at N x alpha per step
                   + the wire bytes' time at N (`LinkProfile.seconds`)

Every number here is a model's: it ignores contention between ranks of one host, congestion
and overlap beyond the range given. docs/communication.md, section 3, says each rule and why.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from common.core.config import config_io, strategies
from common.core.measure.traffic import wire_bytes
from common.projection.link_profile import LinkProfile
from common.report.runs import RecordedRun, median_of


@dataclass(frozen=True)
class Projected:
    label: str
    world: int
    step_fast_s: float  # full overlap
    step_slow_s: float  # no overlap
    samples_s_low: float
    samples_s_high: float
    efficiency_low: float
    efficiency_high: float
    communication_s: float
    overhead_s: float  # the step's overhead at N (0 without a step split)


@dataclass(frozen=True, slots=True)
class Change:
    """A lever priced from the run that has not got it (`common.projection.lever_speed`)."""

    name: str  # as --set takes it
    gathers: float = 1.0  # a factor on the all-gathers per optimizer step
    compute: float = 1.0  # a factor on the step's compute (the step less its communication)
    micro_batches: int = 0  # train.accumulation_steps with the change; 0: the run's own


@dataclass(frozen=True, slots=True)
class StepParts:
    """A run's measured step less its priced communication, as the projection scales it."""

    compute_s: float  # shrinks with the per-rank batch
    optimizer_s: float  # shrinks with the shards of the optimizer's state
    overhead_s: float  # stays
    split: bool  # False: no step split recorded; all of it taken as compute


HELD = 0.5  # a run whose quota ran out in at least this share of its periods: CPU-bound


def quota_held(run: RecordedRun) -> float | None:
    """The median over the run's timed epochs of the share of its quota's periods its node's
    CPU quota ran out in (quota_throttled); None on a node without a quota."""
    timed = run.epochs[1:] if len(run.epochs) > 1 else run.epochs
    return median_of(e.quota_throttled for e in timed)


def step_parts(run: RecordedRun, step_s: float, own_s: float) -> StepParts:
    """`step_s` less `own_s` of communication, split as the run's profiled step was."""
    rest = max(step_s - own_s, 0.0)
    split = next((e.step_split for e in reversed(run.epochs) if e.step_split), None)
    if split is None:
        return StepParts(rest, 0.0, 0.0, split=False)
    compute = min(split.compute_s, rest)
    optimizer = min(split.optimizer_s, rest - compute)
    return StepParts(compute, optimizer, rest - compute - optimizer, split=True)


def rest_at(run: RecordedRun, parts: StepParts, world: int, weak: bool) -> float:
    """Seconds of a step but its communication at `world` ranks."""
    own = run.start.world_size
    _, shard_now = _dims(run, own)
    _, shard = _dims(run, world)
    compute = parts.compute_s if weak else parts.compute_s * own / world
    return compute + parts.optimizer_s * shard_now / shard + parts.overhead_s


def _dims(run: RecordedRun, world: int) -> tuple[int, int]:
    """(replicas, shards) of the run's strategy at `world` ranks, its ranks per node kept."""
    start = run.start
    cfg = config_io.from_dict(start.config)
    local = max(1, start.world_size // max(1, len(set(start.hosts))))
    strategy = strategies.get(start.framework, start.strategy)
    dims = strategy.dims(world, min(local, world), cfg)
    return dims.replicate, dims.shard


@dataclass(frozen=True, slots=True)
class CallsAt:
    """One collective kind of a run's training step as it would be issued at a world size."""

    kind: str
    calls: float  # per step
    payload: float  # bytes each rank hands one call (its shard, for an all_gather)
    group: int  # ranks in the call's group
    sharded: bool  # over the shard group (all_gather, reduce_scatter), not the replicas
    at: tuple[int, ...] = ()  # where in the step each call came (CallSize.at), where recorded


def calls_at(run: RecordedRun, world: int, gathers: float = 1.0) -> list[CallsAt] | None:
    """The collectives one training step of `run` issues at `world` ranks, one per kind and
    payload, its all-gathers `gathers` times as many; None without traffic records."""
    traffic = next((epoch.traffic for epoch in reversed(run.epochs) if epoch.traffic), None)
    if traffic is None:
        return None
    _, shard_now = _dims(run, run.start.world_size)
    replicas, shard = _dims(run, world)
    hybrid = shard > 1 and replicas > 1  # shards within a node, replicas across nodes
    found = []
    for entry in (entry for entry in traffic if entry.phase == "train"):
        sharded = entry.kind in ("all_gather", "reduce_scatter")
        group = shard if sharded else replicas if hybrid else world
        sizes = [(each.calls, each.payload_bytes, each.at) for each in entry.sizes or []]
        mean = (entry.calls, entry.payload_bytes / entry.calls if entry.calls else 0.0, None)
        for calls, payload, at in sizes or [mean]:  # each size apart; before sizes: the mean
            if entry.kind == "all_gather":  # each rank's shard of a unit, `gathers` x as often
                calls, payload = calls * gathers, payload * shard_now / shard
            found.append(CallsAt(entry.kind, calls, payload, group, sharded, tuple(at or ())))
    return found


def sequence_at(run: RecordedRun, world: int) -> list[CallsAt]:
    """The run's step at `world` ranks call by call, in the order it issued them (one call
    each); empty where a size did not record where its calls came (`CallSize.at`)."""
    found = calls_at(run, world) or []
    if not found or any(len(each.at) != round(each.calls) for each in found):
        return []
    order = sorted((i, replace(each, calls=1.0, at=(i,))) for each in found for i in each.at)
    return [each for _, each in order]


def communication_s(
    run: RecordedRun, profile: LinkProfile, world: int, gathers: float = 1.0
) -> float | None:
    """Seconds one training step of `run` spends in collectives at `world` ranks, its
    all-gathers `gathers` times as many; None without traffic records."""
    found = calls_at(run, world, gathers)
    if found is None:
        return None
    replicas, shard = _dims(run, world)
    hybrid = shard > 1 and replicas > 1
    within = (profile.tier("intra_node") if hybrid else None) or profile
    across = (profile.tier("inter_node") if hybrid else None) or profile
    total = 0.0
    for each in found:
        wire = each.calls * wire_bytes(each.kind, each.payload, each.group)
        cost = (within if each.sharded else across).seconds(each.kind, each.calls, wire, each.group)
        total += cost or 0.0
    return total


def one_tier(run: RecordedRun, profile: LinkProfile) -> bool:
    """True for a run whose groups keep to tiers (hsdp) priced by a profile without them."""
    replicas, shard = _dims(run, run.start.world_size)
    return shard > 1 and replicas > 1 and not profile.tiers


def project(
    run: RecordedRun,
    profile: LinkProfile,
    worlds: list[int],
    scaling: str | None = None,
    change: Change | None = None,
) -> tuple[list[Projected], list[str]]:
    """The run at each world size of `worlds` (not below its own), and the caveats. `scaling`:
    strong (the global batch kept, shared by more ranks) or weak (each rank's batch kept);
    None: as the run itself was (train.batch_mode). Under strong scaling a world larger than
    the global batch would leave ranks without a sample: it is not projected, and the caveat
    names the largest world that keeps one per rank. `change`: the run as it would be with a
    lever it has not got, its all-gathers and compute scaled as the change says."""
    start, caveats = run.start, []
    label = run.row_label + (f" with {change.name}" if change else "")
    timed = run.epochs[1:] if len(run.epochs) > 1 else run.epochs
    speeds = sorted(epoch.samples_per_s for epoch in timed)
    own = communication_s(run, profile, start.world_size)
    if not speeds or own is None:
        return [], [
            f"{label}: no traffic recorded (one process, or written before it): not projected"
        ]
    samples_s = speeds[len(speeds) // 2]
    batch = start.global_batch_size
    step_s = batch / samples_s
    parts = step_parts(run, step_s, own)
    if change is not None:
        parts = replace(parts, compute_s=parts.compute_s * change.compute)
    if not parts.split:
        caveats.append(
            f"{label}: no step split recorded (a GPU run, or older records): its "
            "step less its communication is taken as compute that shrinks with the per-rank "
            "batch, so any fixed overhead is projected to shrink too"
        )
    if one_tier(run, profile):
        caveats.append(
            f"{label}: its shard groups' collectives (within a node) and its replicas' (across "
            "nodes) are priced alike, on the launch's links: measure the profile with --tiers "
            "on several nodes of several ranks each (torch_impl.links)"
        )
    ran_weak = start.config.get("train", {}).get("batch_mode") == "per_rank"
    weak = ran_weak if scaling is None else scaling == "weak"
    rank_batch = batch // start.world_size
    micro = (change.micro_batches if change else 0) or run.micro_batches
    # one worker, no communication, the whole state: a weak projection keeps one rank's batch
    _, shard_now = _dims(run, start.world_size)
    single_s = (
        parts.compute_s * (1 if weak else start.world_size)
        + parts.optimizer_s * shard_now
        + parts.overhead_s
    )
    found = []
    for world in worlds:
        if world < start.world_size:
            caveats.append(
                f"{label}: not projected to {world} workers, below its own {start.world_size}"
            )
            continue
        if not weak and world > batch:
            caveats.append(
                f"{label}: not projected to {world} workers: its global batch of {batch} leaves "
                f"fewer than one sample per rank there (strong scaling); {batch} workers at most, "
                f"or --scaling weak to keep {rank_batch} per rank"
            )
            continue
        at_n = rank_batch if weak else batch // world
        if at_n % micro:
            caveats.append(
                f"{label}: not projected to {world} workers: its per-rank batch of {at_n} there "
                f"does not split into train.accumulation_steps={micro} micro-batches"
            )
            continue
        comm = communication_s(run, profile, world, change.gathers if change else 1.0) or 0.0
        # on a node its CPU quota held, the overhead is the quota stalling the calls: it grows
        # as they do (docs/communication.md, section 4); elsewhere it stays
        stalls = comm / own if own and (quota_held(run) or 0.0) >= HELD else 1.0
        compute = rest_at(run, parts, world, weak) + parts.overhead_s * (stalls - 1)
        # Only the forward and backward's compute can run beside the collectives; the
        # optimizer (after the gradients) and the overhead (hooks, waits, Python) cannot.
        beside = parts.compute_s if weak else parts.compute_s * start.world_size / world
        fast, slow = compute - beside + max(beside, comm), compute + comm
        global_batch = batch * world / start.world_size if weak else batch
        found.append(
            Projected(
                label=label,
                world=world,
                step_fast_s=fast,
                step_slow_s=slow,
                samples_s_low=global_batch / slow,
                samples_s_high=global_batch / fast,
                efficiency_low=(single_s / slow if weak else single_s / (world * slow)),
                efficiency_high=(single_s / fast if weak else single_s / (world * fast)),
                communication_s=comm,
                overhead_s=parts.overhead_s * stalls,
            )
        )
    return found, caveats


def host_caveat(runs: list[RecordedRun], profile: LinkProfile) -> str | None:
    """A caveat when the profile was measured on other hosts than the runs ran on."""
    ran = {host for run in runs for host in run.start.hosts}
    if ran and not ran <= set(profile.hosts):
        return (
            f"the link profile was measured on {', '.join(sorted(set(profile.hosts)))}, the runs "
            f"ran on {', '.join(sorted(ran))}: their links may cost otherwise"
        )
    return None
