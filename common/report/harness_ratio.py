"""Each framework's harness against its own plain loop, as `python -m common.tools.bench --out
DIR/bench.json` measured it: compare.py finds the file among its results, as it finds link
profiles, and the verdict of each group sets both frameworks' ratios beside the framework
comparison. A framework comparison is one of frameworks only where both harnesses run at their
plain loops' speed; where the ratios differ, that much of the difference is the suite's.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.report import measured_files

if TYPE_CHECKING:
    from common.report.rows import RunGroup

PATTERN = "bench*.json"
# what a row holds where the bench wrote it (older files lack some)
OPTIONAL = (
    "step_p50_s",
    "paired",
    "vs_plain_by_round",
    "steps_per_epoch",
    "beyond_steps_s",
    "per_epoch_s",
    "loop_samples_per_s",
    "loop_step_p50_s",
)
NAMES = {"torch": "torch", "tf": "TensorFlow"}
# a launched cell of one rank: "<framework> <strategy>[ x1] / <pipeline>", no compile or --vary
ONE_RANK = re.compile(r"^(torch|tf) (\w+)(?: x1)? / (\w+)$")
# the baselines' row of the suite's step taken in turn with the plain loop's, in one process
# (torch_impl.bench and tf_impl.bench, --paired)
PAIRED = "suite's step, paired"
# the bench's --floor: the plain loop measured once more in each round, after the launches
AGAIN = "plain loop, again"


@dataclass(frozen=True)
class Bench:
    """One file: its rows (model, variant, ranks, samples_per_s, spread, repeats, step_p50_s
    where the bench timed steps, paired where it took the suite's step in turn with the plain
    loop's, vs_plain_by_round where it wrote each round's ratio, loop_samples_per_s and
    loop_step_p50_s where a plain loop took its passes in turn with the row's epochs), where
    and when they were measured, and the command."""

    path: Path
    rows: list[dict[str, Any]]  # also steps_per_epoch, beyond_steps_s and per_epoch_s where written
    host: str
    measured: str
    command: list[str]

    def speed(self, model: str, variant: str) -> float | None:
        return self._figure(model, variant, "samples_per_s")

    def step(self, model: str, variant: str) -> float | None:
        """The row's median step in seconds, where measured."""
        return self._figure(model, variant, "step_p50_s")

    def loop(self, model: str, variant: str) -> tuple[float | None, float | None]:
        """(samples/s, median step) of the plain loop the row is set against: the one that took
        its passes in turn with the row's epochs, where one did, else its framework's row."""
        speed = self._figure(model, variant, "loop_samples_per_s")
        if speed is not None:
            return speed, self._figure(model, variant, "loop_step_p50_s")
        plain = f"{variant.split()[0]} plain loop"
        return self.speed(model, plain), self.step(model, plain)

    def paired(self, model: str, framework: str) -> float | None:
        """The framework's plain step over the suite's, the two taken in turn in one process."""
        return self._figure(model, f"{framework} {PAIRED}", "paired")

    def by_round(self, model: str, variant: str) -> float | None:
        """The median of the row's ratios to its plain loop round by round, where written."""
        found = [
            r["vs_plain_by_round"]
            for r in self.rows
            if (r["model"], r["variant"]) == (model, variant)
        ]
        return statistics.median(found[0]) if found and found[0] else None

    def per_epoch(self, model: str, variant: str) -> float | None:
        """The seconds the row's epoch pays beyond its steps over its plain loop's, where
        written (None also where it is 0.0: nothing to say)."""
        return self._figure(model, variant, "per_epoch_s")

    def steps_per_epoch(self, model: str, variant: str) -> int | None:
        found = self._figure(model, variant, "steps_per_epoch")
        return int(found) if found else None

    def _figure(self, model: str, variant: str, key: str) -> float | None:
        found = [r[key] for r in self.rows if r["model"] == model and r["variant"] == variant]
        return float(found[0]) if found and found[0] else None


def read(path: Path) -> Bench:
    """The file's rows; ValueError naming the file when it is not the bench's."""
    try:
        data = json.loads(path.read_text())
        keys = ("model", "variant", "ranks", "samples_per_s", "spread", "repeats")
        rows = [
            {
                **{key: row[key] for key in keys},
                **{key: row.get(key) for key in OPTIONAL},
            }
            for row in data["rows"]
        ]
        return Bench(path, rows, str(data["host"]), str(data["measured"]), list(data["command"]))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"{path}: not a bench file of python -m common.tools.bench --out ({error})"
        ) from None


def gathered(results: list[str]) -> tuple[list[Bench], list[str]]:
    """The bench files in the result folders (sorted), and a problem per unreadable one."""
    benches, problems = [], []
    for path in measured_files.found(results, PATTERN):
        try:
            benches.append(read(path))
        except ValueError as error:
            problems.append(str(error))
    return benches, problems


def ratios(
    bench: Bench, model: str, pipeline: str
) -> dict[str, tuple[str, float, float, float | None, float | None]]:
    """{framework: (its one-rank cell on `pipeline`, samples/s, that / its plain loop, the plain
    loop's median step / the cell's or None, the median of the rounds' ratios or None)} for the
    frameworks whose cell and plain loop were both measured on `model` over 2 repeats or more
    (one repeat has no median). A cell of several ranks is not set against a one-process loop."""
    found = {}
    for row in bench.rows:
        match = ONE_RANK.match(row["variant"])
        if row["model"] != model or row["ranks"] != 1 or row["repeats"] < 2:
            continue
        if not match or match[3] != pipeline:
            continue
        plain, plain_step = bench.loop(model, row["variant"])
        if plain and match[1] not in found:
            step = row["step_p50_s"]
            per_step = plain_step / step if plain_step and step else None
            speed = row["samples_per_s"]
            by_round = bench.by_round(model, row["variant"])
            found[match[1]] = (row["variant"], speed, speed / plain, per_step, by_round)
    return found


def at_length(bench: Bench, model: str, variant: str, steps: int) -> float | None:
    """The row's speed over its plain loop's at epochs of `steps` steps: both at their median
    step, each epoch paying once what it pays beyond its steps (the bench's epochs may be
    shorter than a user's, and a cost per epoch weighs less in a longer one). None without the
    figures."""
    framework = variant.split()[0]
    plain = f"{framework} plain loop"
    step, plain_step = bench.step(model, variant), bench.loop(model, variant)[1]
    extra = bench.per_epoch(model, variant)
    plain_rest = bench._figure(model, plain, "beyond_steps_s")
    if not step or not plain_step or extra is None or plain_rest is None:
        return None
    return (steps * plain_step + plain_rest) / (steps * step + plain_rest + extra)


def _epochs(bench: Bench, model: str, variant: str, steps: int | None) -> str:
    """What the row's epoch pays once beyond the plain loop's, and what that makes of the ratio
    at the compared runs' own epochs of `steps` steps."""
    extra, own = bench.per_epoch(model, variant), bench.steps_per_epoch(model, variant)
    if extra is None or not own:
        return ""
    said = f"; {extra * 1e3:+.1f} ms an epoch beyond its steps, against the plain loop's, on "
    said += f"the bench's {own}-step epochs"
    ratio = at_length(bench, model, variant, steps) if steps and steps != own else None
    if ratio is not None:
        said += f": {ratio:.2f}x at these runs' {steps}-step epochs"
    return said


def _steps(per_step: float | None, by_round: float | None, paired: float | None) -> str:
    """What the bench said besides the medians' ratio: round by round, step by step across the
    launches, and taken in turn."""
    said = [f"{by_round:.2f}x round by round"] if by_round else []
    said += [f"{per_step:.2f}x step by step"] if per_step else []
    said += [f"{paired:.2f}x with the steps taken in turn in one process"] if paired else []
    return f" ({'; '.join(said)})" if said else ""


def _floor(bench: Bench, model: str, framework: str) -> str:
    """What the plain loop measured again in the same rounds (--floor) said of itself: the ratio
    that this host's noise alone gives."""
    again, plain = (
        bench.speed(model, f"{framework} {AGAIN}"),
        bench.speed(model, f"{framework} plain loop"),
    )
    if not again or not plain:
        return ""
    by_round = bench.by_round(model, f"{framework} {AGAIN}")
    rounds = f", {by_round:.2f}x round by round" if by_round else ""
    return (
        f", and its plain loop, measured again after the launches, at {again / plain:.2f}x "
        f"itself{rounds}: what this host's noise alone gives"
    )


def sentences(
    benches: list[Bench], model: str, pipeline: str, steps: int | None = None
) -> list[str]:
    """What each bench says of `model` on `pipeline`: both harness ratios, and the plain
    loops' own comparison; `steps`: the compared runs' steps an epoch, at which a cost per
    epoch is weighed."""
    said = []
    for bench in benches:
        found = ratios(bench, model, pipeline)
        if not found:
            continue
        repeats = max(row["repeats"] for row in bench.rows)
        parts = [
            f"{variant} runs at {ratio:.2f}x {NAMES[framework]}'s plain loop"
            + _steps(per_step, by_round, bench.paired(model, framework))
            + _epochs(bench, model, variant, steps)
            + _floor(bench, model, framework)
            for framework, (variant, _, ratio, per_step, by_round) in sorted(
                found.items(), reverse=True
            )
        ]
        where = f"{bench.path.name}: {bench.host}, {bench.measured}, medians of {repeats}"
        line = f"The bench ({where}) measured each harness on the {model}: " + "; ".join(parts)
        plains = {fw: bench.speed(model, f"{fw} plain loop") for fw in ("torch", "tf")}
        if found.keys() == {"torch", "tf"} and plains["torch"] and plains["tf"]:
            between = plains["torch"] / plains["tf"]
            suites = found["torch"][1] / found["tf"][1]
            line += (
                f". Between the plain loops torch is {between:.2f}x TensorFlow, between these "
                f"cells {suites:.2f}x: the rest, {suites / between:.2f}x, is the harnesses', not "
                "the frameworks'"
            )
            lengths = [
                at_length(bench, model, found[fw][0], steps) if steps else None
                for fw in ("torch", "tf")
            ]
            own = bench.steps_per_epoch(model, found["torch"][0])
            if lengths[0] and lengths[1] and steps != own:
                line += (
                    f"; at these runs' {steps}-step epochs, with each cost per epoch weighed "
                    f"there, {lengths[0] / lengths[1]:.2f}x"
                )
        said.append(line + ".")
    return said


def attach(groups: list[RunGroup], results: list[str]) -> list[str]:
    """Each group's `harness` sentences from the bench files among `results` (for its model and
    data pipeline); a problem per unreadable file."""
    benches, problems = gathered(results)
    for group in groups:
        config = group.runs[0].start.config
        pipeline = config.get("data", {}).get("pipeline", "tensor")
        epochs = [epoch.steps for run in group.runs for epoch in run.epochs]
        steps = statistics.median_low(epochs) if epochs else None
        group.harness = sentences(benches, group.runs[0].start.model, pipeline, steps)
    return problems
