"""What a memory lever costs in speed at N, priced from the run that does not fit
(`compare.py --project N --device-memory G`, `common.projection.levers`): the run's own step
and counted collectives (`step_model.project`) with what the lever changes.

- accumulation (k micro-batches): the gradients still cross once per optimizer step, but
  fully_shard's and FSDP1's all-gathers come k times; the compute of k micro-batches comes from
  a measured pair, else it is taken as the whole batch's and the run to make is named. A model
  with batch normalization is not priced (its statistics all-reduce in every micro-batch).
- checkpointing: the recomputed forward's factor from a measured pair (two runs with it and
  without, same framework, model and per-rank batch), never assumed; without one, not priced.
- a change of strategy is not priced from the run: a run made with it is projected instead.
"""

from __future__ import annotations

from collections.abc import Callable

from common.core.measure import precision
from common.models import zoo
from common.models.config import ModelConfig
from common.projection import reasons, step_model
from common.projection.link_profile import LinkProfile
from common.report.runs import RecordedRun

ACCUMULATION = "train.accumulation_steps="
CHECKPOINTING = "model.activation_checkpointing=blocks"
GATHERED = ("fsdp2", "hsdp", "fsdp1")  # all-gather per micro-batch

ProfileOf = Callable[[RecordedRun], LinkProfile]


def model_of(run: RecordedRun) -> ModelConfig:
    """The run's model section, as its config held it."""
    return ModelConfig.model_validate(run.start.config.get("model", {}))


def compute_s(run: RecordedRun, profile: LinkProfile) -> float | None:
    """The run's measured step less its priced communication at its own size (its profiled
    compute where it has a step split, `reasons.measured_step`); None without timed epochs or
    traffic."""
    step = reasons.measured_step(run, profile)
    return step.parts.compute_s if step else None


def _lever(run: RecordedRun) -> tuple[str, int]:
    """(checkpointing, micro-batches) of a run: what the levers change."""
    return model_of(run).activation_checkpointing, run.micro_batches


def measured_factor(
    run: RecordedRun, runs: list[RecordedRun], profile_of: ProfileOf, lever: tuple[str, int]
) -> tuple[float, str] | None:
    """(with / without, the pair's labels) of the first measured pair for `lever` (checkpointing,
    micro-batches) on `run`'s model: two runs of its framework and model at one per-rank batch,
    one strategy and size, one with the lever and one as `run` is; `run`'s strategy first."""
    plain = model_of(run).model_copy(update={"activation_checkpointing": "none"})
    rank_batch = run.start.global_batch_size // run.start.world_size

    def kind(other: RecordedRun) -> tuple[str, int] | None:
        model = model_of(other).model_copy(update={"activation_checkpointing": "none"})
        batch = other.start.global_batch_size // other.start.world_size == rank_batch
        ok = model == plain and batch and other.start.framework == run.start.framework
        return _lever(other) if ok else None

    keyed = sorted(runs, key=lambda other: other.start.strategy != run.start.strategy)
    for with_it in (other for other in keyed if kind(other) == lever):
        for without in (other for other in keyed if kind(other) == _lever(run)):
            if (without.start.strategy, without.start.world_size) != (
                with_it.start.strategy,
                with_it.start.world_size,
            ):
                continue
            slow = compute_s(with_it, profile_of(with_it))
            fast = compute_s(without, profile_of(without))
            if slow and fast:
                return slow / fast, f"{with_it.label} against {without.label}"
    return None


def change_for(
    run: RecordedRun, settings: list[str], runs: list[RecordedRun], profile_of: ProfileOf
) -> tuple[step_model.Change | None, str]:
    """The lever `settings` as a change of `run`'s projection, and where its figures come from;
    (None, why) where it is not priced from the run."""
    if any(setting.startswith("torch.strategy=") for setting in settings):
        return None, "another strategy's collectives: project a run made with it"
    gathers, compute, micro, said = 1.0, 1.0, 0, []
    for setting in settings:
        if setting.startswith(ACCUMULATION):
            if precision.batch_norm(zoo.describe(model_of(run))) != "none":
                return None, (
                    "its batch normalization (each micro-batch's statistics: k changes the "
                    "maths) all-reduces in every micro-batch, and the records count those "
                    "all-reduces with the gradients'"
                )
            k = micro = int(setting.removeprefix(ACCUMULATION))
            gathers = k / run.micro_batches if run.start.strategy in GATHERED else 1.0
            pair = measured_factor(run, runs, profile_of, (_lever(run)[0], k))
            if pair is None:
                said.append(
                    f"{k} micro-batches, their compute taken as the whole batch's (no measured "
                    f"pair: run {run.label} with --set {setting} too)"
                )
            else:
                compute *= pair[0]
                said.append(f"{k} micro-batches, {pair[0]:.2f}x the compute ({pair[1]})")
        elif setting == CHECKPOINTING:
            pair = measured_factor(run, runs, profile_of, ("blocks", _lever(run)[1]))
            if pair is None:
                return None, (
                    f"no measured pair: run {run.label} with --set {CHECKPOINTING} too, for "
                    "the recomputed forward"
                )
            compute *= pair[0]
            said.append(f"the recomputed forward {pair[0]:.2f}x the compute ({pair[1]})")
    return step_model.Change(" ".join(settings), gathers, compute, micro), "; ".join(said)


def priced(
    run: RecordedRun,
    settings: list[str],
    world: int,
    scaling: str | None,
    runs: list[RecordedRun],
    profile_of: ProfileOf,
) -> tuple[tuple[float, float] | None, str]:
    """(samples/s no overlap .. full, at `world`) of `run` with the lever, and where the figures
    come from; (None, why) where it is not priced."""
    change, said = change_for(run, settings, runs, profile_of)
    if change is None:
        return None, said
    rows, caveats = step_model.project(run, profile_of(run), [world], scaling, change)
    if not rows:
        return None, (caveats or [f"{run.label} is not projected to {world} workers"])[-1]
    return (rows[0].samples_s_low, rows[0].samples_s_high), said
