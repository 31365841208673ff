"""The accounting and the projection against a network that is not free: the 2-node SLURM test
cluster, its links shaped with tc (slurm/testcluster.py --link), each node's veth counters as the
ground truth.

For each strategy a run on unshaped links and one on links shaped to RATE, same layout (so that
the shared cores cancel out), and a link profile measured on each by the framework's own link
tool. Two checks:
- bytes: what each node's veth carried per training step (TCP payload: the counted bytes less
  66 bytes of Ethernet, IP and TCP headers per packet), between the epoch 1 and epoch 3
  records, less the evaluation passes' own traffic, agrees within 10% with the accounting (the
  epoch records' wire bytes; on gloo a reduce_scatter runs as an all_reduce, so it sends the
  all_reduce's bytes, see ../shared/notes/communication.md);
- time: the step time that shaping adds (the median steps of epochs 2 and 3, shaped minus
  unshaped) agrees within 25% with what the projection gives for the same step on each profile;
- the split: the collectives' part of the step (its share of the profiled step in the epoch
  record's step_split, each framework's own profiler, applied to the run's median step) grows
  with the shaping as the profile prices the counted calls, within 25%. One profiled step is
  one sample: under load, fsdp2's shaped step once spent 146 ms in FSDP's own ranges (2 to 6
  in the others), its share of the step halved. torch's runs profile SPLIT_STEPS and keep the
  median (`output.split_steps`); TensorFlow profiles one.

Cases: ddp, fsdp2 (full_shard and shard_grad_op) and mwms on one rank per node, and hsdp on 2
nodes of 2 ranks (shard groups within a node, so only the replicas' all-reduce crosses a veth),
its time priced by a profile of 2 tiers (`torch_impl.links --tiers` on the same layout: the
shard groups' collectives on the links within a node, the replicas' across nodes), on links
shaped to HSDP_RATE (see there). 2 nodes in
make test; SUITE_SHAPED_NODES=2,4 adds 4 nodes (sharing this machine's cores), and
SUITE_SHAPED_OUT=FOLDER keeps every figure in FOLDER/shaped.jsonl.
"""

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from common.projection.link_profile import LinkProfile
from common.projection.step_model import communication_s
from common.report.inputs import load_runs
from common.tools.projection_check import MAX_BYTES  # the profiles' largest power of 8
from tests.slurm.jobs import REPO, ROOT_ONLY, slurm_env, submit, wait_for
from tests.slurm.veth_bytes import expected_per_step, measured_per_step, names_of

sys.path.insert(0, str(REPO / "slurm"))
import testcluster_links  # noqa: E402 - the cluster's own module, beside its script

# Step times on shaped links need the cores to themselves: make test-scaling runs them (after
# make test in .ci/run), with the projection across node counts.
pytestmark = [ROOT_ONLY, pytest.mark.scaling]
RATE = "100mbit"
# hsdp's links: its 4 ranks share the 2 cores, and its step took 3 to 8 ms more than the
# profile's price at 100 Mbit/s and 7 to 8 ms more at 25 (a cost of the sharing that does not
# shrink with the link; likely the two replica groups' all-reduces, which share each node's
# veth, starting apart as ranks wait for a core, where the profile starts them together). At
# 100 Mbit/s, added against projected: 38.0/29.8, 39.6/36.1 and 38.6/33.1 ms on an idle [D]
# (+10% to +28%), 45.6/33.0 in CI under load (+38%), against a 25% check; at 25 Mbit/s
# 155.7/147.4 and 153.0/146.4 ms (+6%, +5%) (2026-11-26).
HSDP_RATE = "25mbit"
# 2 nodes in make test; SUITE_SHAPED_NODES=2,4 adds 4 (4 nodes share this machine's 2 cores)
NODES = [int(n) for n in os.environ.get("SUITE_SHAPED_NODES", "2").split(",")]
OUT = os.environ.get("SUITE_SHAPED_OUT")  # a folder for the measurements (docs' figure)
SMALL = [  # 30 steps per epoch (1,920 samples, a global batch of 64)
    *("--set", "data.train_limit=1920", "--set", "data.test_limit=500"),
    *("--set", "train.epochs=3", "--set", "dist.timeout_s=120", "--set", "model.dropout=false"),
]
SPLIT_STEPS = ["--set", "output.split_steps=5"]  # torch: the median of 5 profiled steps
CASES = {
    "ddp": ("torch", ["--set", "torch.strategy=ddp", *SPLIT_STEPS]),
    "fsdp2": ("torch", ["--set", "torch.strategy=fsdp2", *SPLIT_STEPS]),
    "fsdp2-sgo": (
        "torch",
        ["--set", "torch.strategy=fsdp2", "--set", "torch.sharding=shard_grad_op", *SPLIT_STEPS],
    ),
    "mwms": ("tf", []),
}


def _epochs_written(path: Path) -> int:
    try:
        return path.read_text().count('"record": "epoch"')
    except OSError:
        return 0


def _run(framework, extra, results: Path, name: str, nodes: int, per_node: int = 1):
    """One job on every node; the veth counters read as each epoch record appears."""
    env = slurm_env(results)
    options = [
        f"--nodes={nodes}",
        f"--ntasks-per-node={per_node}",
        "--cpus-per-task=1",
        f"--job-name={name}",
        f"--output={results}/%x-%j.out",
    ]
    job = submit(options, [framework, "configs/mlp_adam.yaml", *SMALL, *extra], env)
    metrics = results / f"{name}-{job}" / "metrics.jsonl"
    seen: dict[int, dict] = {}
    done = threading.Event()

    def follow() -> None:
        while not done.is_set():
            count = _epochs_written(metrics)
            if count and count not in seen:
                seen[count] = testcluster_links.counters(names_of(nodes))
            time.sleep(0.01)

    watcher = threading.Thread(target=follow, daemon=True)
    watcher.start()
    state = wait_for(job, env, timeout_s=400)
    done.set()
    watcher.join()
    assert state == "COMPLETED", (results / f"{name}-{job}.out").read_text()
    (run,), problems, _ = load_runs([str(metrics)])
    assert not problems, problems
    return run, seen


def _profile(
    framework: str,
    results: Path,
    name: str,
    nodes: int,
    per_node: int = 1,
    tiers: bool = False,
    runs: tuple = (),
) -> LinkProfile:
    """The framework's link profile on `nodes` nodes, also at the sizes of the calls of `runs`
    (`--sizes-of`: each call read off its own point)."""
    env = slurm_env(results)
    out = results / f"{name}.json"
    module = f"{framework}_impl.links"
    tool = f"srun {sys.executable} -m {module} --out {out} --max-bytes {MAX_BYTES[framework]}"
    tool += " --tiers" if tiers else ""
    tool += f" --sizes-of {','.join(run.path for run in runs)}" if runs else ""
    command = [
        f"--nodes={nodes}",
        f"--ntasks-per-node={per_node}",
        "--cpus-per-task=1",
        f"--output={results}/{name}.out",
        "--wrap",
        tool,
    ]
    done = subprocess.run(
        ["sbatch", "--parsable", *command], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert wait_for(done.stdout.strip(), env, timeout_s=300) == "COMPLETED", (
        results / f"{name}.out"
    ).read_text()
    return LinkProfile.model_validate_json(out.read_text())


def _median_step(run) -> float:
    return statistics.median(epoch.step_time_p50_s for epoch in run.epochs[1:])


@pytest.fixture(scope="module")
def measured(cluster, tmp_path_factory):
    """Every case unshaped and shaped (hsdp to HSDP_RATE, the others to RATE), and each
    framework's link profile on each link, measured after the runs, at their calls' sizes."""
    results = tmp_path_factory.mktemp(f"shaped{cluster}")
    found: dict = {"profiles": {}, "runs": {}}
    names = names_of(cluster)
    for link in ("off", RATE, HSDP_RATE):
        testcluster_links.shape(names, link)
        try:
            if link != HSDP_RATE:
                for case, (framework, extra) in CASES.items():
                    name = f"{case}-{link}"
                    found["runs"][case, link] = _run(framework, extra, results, name, cluster)
                for framework in ("torch", "tf"):
                    name = f"links-{framework}-{link}"
                    runs = tuple(
                        found["runs"][case, link][0]
                        for case in CASES
                        if CASES[case][0] == framework
                    )
                    found["profiles"][framework, link] = _profile(
                        framework, results, name, cluster, runs=runs
                    )
            if cluster == 2 and link != RATE:  # shard within a node, replicate across nodes
                hsdp = ["--set", "torch.strategy=hsdp", "--set", "torch.hsdp_shard_size=2"]
                found["runs"]["hsdp", link] = _run("torch", hsdp, results, f"hsdp-{link}", 2, 2)
                label = f"links-torch-tiers-{link}"  # within a node and across, as hsdp's
                runs = (found["runs"]["hsdp", link][0],)
                found["profiles"]["torch-tiers", link] = _profile(
                    "torch", results, label, 2, per_node=2, tiers=True, runs=runs
                )
        finally:
            testcluster_links.shape(names, "off")
    return found


def _keep(nodes: int, what: str, case: str, figures: dict) -> None:
    """Append one measurement to SUITE_SHAPED_OUT/shaped.jsonl (the docs' figure), if asked."""
    if OUT:
        Path(OUT).mkdir(parents=True, exist_ok=True)
        with (Path(OUT) / "shaped.jsonl").open("a") as out:
            out.write(json.dumps({"nodes": nodes, "what": what, "case": case, **figures}) + "\n")


@pytest.mark.parametrize("cluster", NODES, indirect=True)
@pytest.mark.parametrize("case", [*CASES, "hsdp"])
def test_veth_bytes_per_step_agree_with_the_accounting(cluster, measured, case):
    if (case, "off") not in measured["runs"]:
        pytest.skip(f"{case} runs on 2 nodes of 2 ranks only")
    per_node, cross = (2, True) if case == "hsdp" else (1, False)
    for link in ("off", HSDP_RATE if case == "hsdp" else RATE):
        run, seen = measured["runs"][case, link]
        counted = measured_per_step(run, seen, per_node, cross)
        expected = expected_per_step(run, per_node, cross)
        print(
            f"{case} x{cluster} {link}: veth {counted:,.0f} B/step per node, accounting "
            f"{expected:,.0f}"
        )
        _keep(cluster, "bytes", case, {"link": link, "veth": counted, "accounting": expected})
        assert counted == pytest.approx(expected, rel=0.10), (case, link, counted, expected)


@pytest.mark.parametrize("cluster", NODES, indirect=True)
@pytest.mark.parametrize("case", list(CASES))
def test_the_step_time_shaping_adds_agrees_with_the_projection(cluster, measured, case):
    framework = CASES[case][0]
    free, shaped = (measured["runs"][case, link][0] for link in ("off", RATE))
    free_link, slow_link = (measured["profiles"][framework, link] for link in ("off", RATE))
    added = _median_step(shaped) - _median_step(free)
    world = shaped.start.world_size
    projected = communication_s(shaped, slow_link, world) - communication_s(free, free_link, world)
    print(
        f"{case} x{cluster}: shaping added {added * 1e3:.1f} ms per step, projected "
        f"{projected * 1e3:.1f}"
    )
    _keep(cluster, "time", case, {"added_s": added, "projected_s": projected})
    assert added == pytest.approx(projected, rel=0.25), (case, added, projected)


@pytest.mark.parametrize("cluster", NODES, indirect=True)
def test_hsdp_s_added_step_time_agrees_with_the_projection_of_two_tiers(cluster, measured):
    """The shard groups' collectives stay on loopback, so shaping adds only what the replicas'
    all-reduce costs across nodes: the profile's inter_node tier, timed with both nodes' replica
    groups at once (they share each node's veth, as in the run)."""
    if ("hsdp", "off") not in measured["runs"]:
        pytest.skip("hsdp runs on 2 nodes of 2 ranks only")
    free, shaped = (measured["runs"]["hsdp", link][0] for link in ("off", HSDP_RATE))
    free_link, slow_link = (
        measured["profiles"]["torch-tiers", link] for link in ("off", HSDP_RATE)
    )
    assert set(slow_link.tiers) == {"intra_node", "inter_node"}
    assert (slow_link.tiers["inter_node"].ranks, slow_link.tiers["inter_node"].groups) == (2, 2)
    added = _median_step(shaped) - _median_step(free)
    projected = communication_s(shaped, slow_link, 4) - communication_s(free, free_link, 4)
    one_tier = [profile.model_copy(update={"tiers": {}}) for profile in (free_link, slow_link)]
    flat = communication_s(shaped, one_tier[1], 4) - communication_s(free, one_tier[0], 4)
    print(
        f"hsdp x{cluster}x2 at {HSDP_RATE}: shaping added {added * 1e3:.1f} ms per step, "
        f"projected {projected * 1e3:.1f} with tiers, {flat * 1e3:.1f} with the launch's "
        "links alone"
    )
    figures = {"added_s": added, "projected_s": projected, "flat_s": flat, "link": HSDP_RATE}
    _keep(cluster, "time", "hsdp", figures)
    assert added == pytest.approx(projected, rel=0.25), (added, projected)


@pytest.mark.parametrize("cluster", NODES, indirect=True)
@pytest.mark.parametrize("case", list(CASES))
def test_the_collectives_part_grows_as_the_profile_prices_it(cluster, measured, case):
    """The step split's collectives part (torch: c10d's events and the waits on them;
    TensorFlow: the Collective* ops' self time) against the link profile's price of the same
    counted calls: what the profiler calls collectives is what the link costs."""
    framework = CASES[case][0]
    free, shaped = (measured["runs"][case, link][0] for link in ("off", RATE))
    free_link, slow_link = (measured["profiles"][framework, link] for link in ("off", RATE))
    parts = [
        next((epoch.step_split for epoch in run.epochs if epoch.step_split), None)
        for run in (free, shaped)
    ]
    assert None not in parts, f"{case}: no step split recorded"
    spent = [
        part.collectives_s / part.wall_s * _median_step(run)
        for part, run in zip(parts, (free, shaped), strict=True)
    ]
    grown = spent[1] - spent[0]
    world = shaped.start.world_size
    projected = communication_s(shaped, slow_link, world) - communication_s(free, free_link, world)
    print(
        f"{case} x{cluster}: the collectives part grew {grown * 1e3:.1f} ms per step "
        f"({spent[0] * 1e3:.1f} to {spent[1] * 1e3:.1f}), the "
        f"profile prices {projected * 1e3:.1f}"
    )
    _keep(cluster, "split", case, {"grown_s": grown, "projected_s": projected})
    assert grown == pytest.approx(projected, rel=0.25), (case, grown, projected)
