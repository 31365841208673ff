"""Which link profiles price a projection: the one named with --links, or those found among the
results, each validated as it is read; for torch runs on GPUs without a torch profile, torch's
own model of NCCL (`torch_impl.nccl_model`, run in a process of its own)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from common.core.measure import peak
from common.projection import link_profile
from common.report.runs import RecordedRun


def profiles_in(results: list[str]) -> list[Path]:
    """The link profiles (links*.json) in the result folders, sorted."""
    return sorted({p for r in results if Path(r).is_dir() for p in Path(r).glob("links*.json")})


@dataclass(frozen=True)
class Profiles:
    """The link profiles a projection prices with, by framework: each run with its own
    framework's where there is one (torch's collectives are not TensorFlow's), else with the
    one there is, and a caveat that names the tool for the missing one."""

    found: dict[str, tuple[Path, link_profile.LinkProfile]]

    def of(self, run: RecordedRun) -> link_profile.LinkProfile:
        own = self.found.get(run.start.framework)
        return (own or next(iter(self.found.values())))[1]

    def caveats(self, runs: list[RecordedRun]) -> list[str]:
        have = ", ".join(sorted(self.found))
        return [
            f"no {framework} link profile: its runs are priced with {have}'s collectives; "
            f"measure its own (python -m {framework}_impl.links, under a launcher)"
            for framework in sorted({run.start.framework for run in runs} - set(self.found))
        ]

    def named(self) -> str:
        return ", ".join(str(path) for path, _ in self.found.values())


def find_profiles(
    given: Path | None,
    results: list[str],
    runs: Sequence[RecordedRun] = (),
    counts: Sequence[int] = (),
) -> Profiles:
    """The profile named, or the link profiles found in the result folders (the first of each
    framework, sorted by name); every one validated as it is read. Where torch runs on GPUs
    have no torch profile, torch's model of NCCL prices them (`nccl_model`)."""
    if given is not None:
        if not given.is_file():
            raise ValueError(
                f"--links {given}: no such file (make one: python -m torch_impl.links)"
            )
        paths = [given]
    else:
        paths = profiles_in(results)
    found: dict[str, tuple[Path, link_profile.LinkProfile]] = {}
    for path in paths:
        profile = link_profile.read(path)
        found.setdefault(profile.framework, (path, profile))
    on_gpus = [r for r in runs if r.start.framework == "torch" and r.start.device_type == "gpu"]
    if "torch" not in found and on_gpus:
        sizes = {r.start.world_size for r in on_gpus} | set(counts)
        found["torch"] = nccl_model(sorted(size for size in sizes if size >= 2) or [2])
    if not found:
        raise ValueError(
            "--project needs a link profile: give --links PROFILE, or put the links.json that "
            "python -m torch_impl.links (or tf_impl.links) wrote into the results"
        )
    return Profiles(found)


def nccl_model(worlds: list[int]) -> tuple[Path, link_profile.LinkProfile]:
    """torch's NCCL model at `worlds` as a link profile (`python -m torch_impl.nccl_model`, in
    a process of its own: common imports no framework); ValueError when it cannot run."""
    # Beside the suite's cache, one file per set of sizes, rewritten on each call: no folder
    # left behind per compare.py run.
    out = peak.cache_path().parent / f"links-torch-nccl-model-{'-'.join(map(str, worlds))}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "torch_impl.nccl_model",
        "--worlds",
        ",".join(map(str, worlds)),
    ]
    done = subprocess.run(
        [*command, "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ValueError(
            f"no torch link profile for runs on GPUs, and torch's NCCL model did not run: {last}"
        )
    return out, link_profile.read(out)
