"""Why each run's step takes what it takes, in parts that add up to the measured step: its
communication at the link profile's costs, and the rest as its profiled step split it (compute,
optimizer, overhead; `common.projection.step_model.step_parts`). Then, for a sharded torch
strategy beside a replicated one at the same worker count, where the difference between their
steps comes from, and what each part becomes at the projected worker counts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from common.core.config import strategies
from common.projection import profiles, step_model
from common.projection.link_profile import LinkProfile
from common.report.runs import RecordedRun, median_of


@dataclass(frozen=True, slots=True)
class Step:
    """A run's median step (seconds) in its parts; `collectives`: calls a training step."""

    name: str
    step_s: float
    communication_s: float
    parts: step_model.StepParts
    collectives: float
    sent_mb: float


def name(run: RecordedRun) -> str:
    return f"{run.start.framework} {run.start.strategy} x{run.start.world_size}"


def held_by_cpu(run: RecordedRun) -> str | None:
    """A caveat for a run its CPU quota held (`step_model.quota_held` at least `HELD`): the
    projection grows its overhead with its calls at N, as measured on quarter-core nodes."""
    held = step_model.quota_held(run)
    if held is None or held < step_model.HELD:
        return None
    cores = run.start.cpu_quota_cores
    quota = f" of {cores:g} cores" if cores else ""
    return (
        f"{name(run)}: held by its CPU: its node's quota{quota} ran out in "
        f"{held:.0%} of its quota's periods (quota_throttled). Its overhead (its step less "
        "its calls, compute and optimizer) is taken as the quota stalling its calls, and "
        "grows with them at N; on a node of more cores it would stay, and the step be faster "
        "(docs/communication.md, section 4)"
    )


def calls_cpu(
    runs: list[RecordedRun], profile_of: Callable[[RecordedRun], LinkProfile], counts: list[int]
) -> list[str]:
    """Each run's collectives' CPU a step, here and at the largest of `counts`, priced from
    its profile's CPU a call (`profiles.cpu_of`), and the share of its node's cores (its CPU
    quota, else one core) that the node's ranks fill with it over the projected step; nothing
    where the profile kept no CPU a call."""
    said = []
    for run in runs:
        profile = profile_of(run)
        cpu = profiles.cpu_of(profile)
        world, at = run.start.world_size, max(counts, default=0)
        here = step_model.communication_s(run, cpu, world) if cpu else None
        there = step_model.communication_s(run, cpu, at) if cpu else None
        rows, _ = step_model.project(run, profile, [at])
        if here is None or there is None or not rows:
            continue
        per_node = max(1, world // max(1, len(set(run.start.hosts))))
        cores = run.start.cpu_quota_cores
        share = per_node * there / rows[0].step_fast_s / (cores or 1)
        timed = run.epochs[1:] if len(run.epochs) > 1 else run.epochs
        measured = median_of(e.cpu_time_s / e.steps for e in timed if e.cpu_time_s and e.steps)
        whole = f"; the run measured {ms(measured)} in all" if measured is not None else ""
        node = f"of {cores:g} cores" if cores else "(one core)"
        said.append(
            f"{name(run)}: its collectives take {ms(here)} of CPU a step (the link profile's "
            f"CPU a call{whole}), {ms(there)} at {at}: with {per_node} rank"
            f"{'s' if per_node > 1 else ''} a node {node}, {share:.0%} of the node over the "
            f"projected step of {rows[0].step_fast_s * 1e3:.1f} ms. Near 100%, the node's CPU, "
            "not its link, times the step, and work between the calls makes them cost more "
            "than priced (docs/communication.md, section 4)"
        )
    return said


def measured_step(run: RecordedRun, profile: LinkProfile) -> Step | None:
    """The run's step in parts; None without traffic records or timed epochs."""
    traffic = next((e.traffic for e in reversed(run.epochs) if e.traffic), None)
    timed = run.epochs[1:] if len(run.epochs) > 1 else run.epochs
    comm = step_model.communication_s(run, profile, run.start.world_size)
    if not traffic or not timed or comm is None:
        return None
    train = [entry for entry in traffic if entry.phase == "train"]
    speed = sorted(e.samples_per_s for e in timed)[len(timed) // 2]
    step = run.start.global_batch_size / speed
    return Step(
        name=name(run),
        step_s=step,
        communication_s=min(comm, step),
        parts=step_model.step_parts(run, step, comm),
        collectives=sum(entry.calls for entry in train),
        sent_mb=sum(entry.wire_bytes for entry in train) / 1e6,
    )


def ms(seconds: float) -> str:
    return f"{1000 * seconds:.3g} ms"


def shares(runs: list[RecordedRun], profile_of: Callable[[RecordedRun], LinkProfile]) -> list[str]:
    """One sentence a run: its collectives and bytes, what the profile says they cost, and the
    rest of its measured step by its split."""
    said = []
    for run in runs:
        step = measured_step(run, profile_of(run))
        if step is None:
            continue
        plural = "s" if step.collectives != 1 else ""
        sentence = (
            f"{step.name} sends {step.sent_mb:.3g} MB per rank per step in "
            f"{step.collectives:g} collective{plural}; at this profile's costs that is "
            f"{ms(step.communication_s)} of its {ms(step.step_s)} step "
            f"({step.communication_s / step.step_s:.0%})"
        )
        parts = step.parts
        if parts.split:
            sharded = strategies.get(run.start.framework, run.start.strategy).shards
            state = "shrinks with the shards of its state" if sharded else "a whole replica's"
            sentence += (
                f"; the rest, as its profiled step split it: compute {ms(parts.compute_s)} "
                f"(shrinks with the per-rank batch), optimizer {ms(parts.optimizer_s)} "
                f"({state}), overhead {ms(parts.overhead_s)} (the wrapper's hooks and copies, "
                "waits beyond the collectives' price, Python: the same at any N)"
            )
        said.append(sentence)
    return said


def sharded_against_replicated(
    runs: list[RecordedRun],
    profile_of: Callable[[RecordedRun], LinkProfile],
    counts: list[int],
) -> list[str]:
    """For each sharded torch run beside a replicated one of the same worker count, both with
    a step split: the difference between their steps in parts that add up to it, and both
    steps at each projected worker count."""
    said = []
    for sharded in runs:
        for replicated in runs:
            if not _comparable(sharded, replicated):
                continue
            one = measured_step(sharded, profile_of(sharded))
            two = measured_step(replicated, profile_of(replicated))
            if one is None or two is None or not (one.parts.split and two.parts.split):
                continue
            gaps = [
                ("communication", one.communication_s - two.communication_s),
                ("overhead", one.parts.overhead_s - two.parts.overhead_s),
                ("compute", one.parts.compute_s - two.parts.compute_s),
                ("optimizer", one.parts.optimizer_s - two.parts.optimizer_s),
            ]
            parts = ", ".join(f"{what} {1000 * gap:+.3g} ms" for what, gap in gaps)
            sentence = (
                f"{one.name} takes {ms(one.step_s)} a step, {one.step_s / two.step_s:.2g}x "
                f"{two.name}'s {ms(two.step_s)}; the {ms(one.step_s - two.step_s)} between "
                f"them: {parts} ({one.collectives:g} collectives a step against "
                f"{two.collectives:g})"
            )
            later = []
            for world in counts:
                if world <= sharded.start.world_size:
                    continue
                found = [
                    step_model.project(run, profile_of(run), [world])[0]
                    for run in (sharded, replicated)
                ]
                if found[0] and found[1]:
                    at, against = found[0][0].step_slow_s, found[1][0].step_slow_s
                    later.append(f"at {world} workers {ms(at)} against {ms(against)}")
            if later:
                sentence += "; projected without overlap: " + "; ".join(later)
            said.append(sentence)
    return said


def _comparable(sharded: RecordedRun, replicated: RecordedRun) -> bool:
    one, two = sharded.start, replicated.start
    if one.framework != "torch" or two.framework != "torch" or one.world_size != two.world_size:
        return False
    if one.world_size < 2 or one.model_params != two.model_params:
        return False
    kinds = [strategies.get("torch", start.strategy) for start in (one, two)]
    return kinds[0].shards and not kinds[1].shards and two.strategy != "single"
