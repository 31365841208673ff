"""The projection checked across worker counts (`make test-scaling`): each strategy runs on 2 and
on 4 nodes of the SLURM test cluster, every link shaped to RATE (tc, slurm/testcluster.py
--link); the 2-node run is projected to 4 nodes with the 2-node link profile, as compare.py
--project 4 would, and the projection is compared with the measured 4-node run.

- Where the projected step is mostly communication (a shaped link), the measured samples/s
  must fall within 25% of the projected range (no overlap to full overlap).
- Where it is mostly compute, the 4 nodes share this machine's cores (4 ranks on 2 cores: each
  rank's compute does not shrink as the projection assumes), so the error is printed and kept,
  not checked.

SUITE_SHAPED_OUT=FOLDER keeps every figure in FOLDER/across.jsonl (the docs' figure).
"""

import json
import os
import statistics
from pathlib import Path

import pytest

from common.projection.step_model import communication_s, project
from tests.slurm.jobs import ROOT_ONLY
from tests.slurm.test_shaped_links import CASES, _profile, _run, testcluster_links
from tests.slurm.veth_bytes import names_of

pytestmark = [ROOT_ONLY, pytest.mark.scaling]
OUT = os.environ.get("SUITE_SHAPED_OUT")
CHECKED = ["ddp", "fsdp2", "mwms"]
TOLERANCE = 0.25
COMMUNICATION_BOUND = 0.5  # the share of the projected step above which the check applies
# A quarter of test_shaped_links' 100 Mbit/s: the 4 nodes share this machine's 2 cores, and what
# that sharing adds to each collective (a rank waits for a core) does not shrink with the link;
# at 100 Mbit/s it took mwms 19% under the projection on an idle host and 32% under CI's load.
RATE = "25mbit"


def _shaped_runs(cluster: int, tmp_path_factory, profiles: bool) -> dict:
    results = tmp_path_factory.mktemp(f"across{cluster}")
    names = names_of(cluster)
    found: dict = {"runs": {}, "profiles": {}}
    testcluster_links.shape(names, RATE)
    try:
        for case in CHECKED:
            framework, extra = CASES[case]
            run, _ = _run(framework, extra, results, f"{case}-x{cluster}", cluster)
            found["runs"][case] = run
        if profiles:  # after the runs: also at the sizes of their calls
            for framework in ("torch", "tf"):
                label = f"links-{framework}"
                runs = tuple(found["runs"][case] for case in CHECKED if CASES[case][0] == framework)
                found["profiles"][framework] = _profile(
                    framework, results, label, cluster, runs=runs
                )
    finally:
        testcluster_links.shape(names, "off")
    return found


MEASURED: dict[int, dict] = {}  # nodes -> what _shaped_runs found, 2 nodes first


@pytest.mark.parametrize("cluster", [2], indirect=True)
def test_the_two_node_runs_and_profiles_are_measured_on_shaped_links(cluster, tmp_path_factory):
    MEASURED[2] = _shaped_runs(cluster, tmp_path_factory, profiles=True)
    for framework, profile in MEASURED[2]["profiles"].items():
        assert profile.world_size == 2, framework


def _samples_s(run) -> float:
    return statistics.median(epoch.samples_per_s for epoch in run.epochs[1:])


@pytest.mark.parametrize("cluster", [4], indirect=True)
def test_two_node_runs_projected_to_four_nodes_land_near_the_measured_ones(
    cluster, tmp_path_factory
):
    assert 2 in MEASURED, "the 2-node runs did not run first (run this module whole)"
    MEASURED[4] = _shaped_runs(cluster, tmp_path_factory, profiles=False)
    failures = []
    for case in CHECKED:
        two, four = MEASURED[2]["runs"][case], MEASURED[4]["runs"][case]
        profile = MEASURED[2]["profiles"][CASES[case][0]]
        found, caveats = project(two, profile, [4])
        assert len(found) == 1, caveats
        projected = found[0]
        measured = _samples_s(four)
        share = projected.communication_s / projected.step_slow_s
        low, high = projected.samples_s_low, projected.samples_s_high
        error = measured / low - 1  # against the projection without overlap
        within = low * (1 - TOLERANCE) <= measured <= high * (1 + TOLERANCE)
        checked = share >= COMMUNICATION_BOUND
        figures = {
            "case": case,
            "measured_2": _samples_s(two),
            "measured_4": measured,
            "projected_4_low": low,
            "projected_4_high": high,
            "communication_share": share,
            "error": error,
            "checked": checked,
            "measured_communication_4": communication_s(four, profile, 4),
        }
        print(
            f"{case}: 2 nodes {figures['measured_2']:.0f} samples/s; at 4 projected "
            f"{low:.0f}-{high:.0f}, measured {measured:.0f} ({error:+.0%} against no overlap); "
            f"communication {share:.0%} of the projected step"
            + ("" if checked else " (compute-bound here: not checked)")
        )
        if OUT:
            Path(OUT).mkdir(parents=True, exist_ok=True)
            with (Path(OUT) / "across.jsonl").open("a") as out:
                out.write(json.dumps(figures) + "\n")
        if checked and not within:
            failures.append(figures)
    assert not failures, failures
