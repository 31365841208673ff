"""The link model: a fit that recovers known costs, and each framework's tool measuring real
ranks into a profile that its schema (docs/link_profile.schema.json, generated) accepts."""

import json
import os
import socket
import subprocess
from pathlib import Path

import jsonschema
import pytest

from common.core.measure.traffic import wire_bytes
from common.projection import call_sizes, link_groups, link_profile, step_model
from common.report.inputs import load_runs
from tests.launching import runner, train_command

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "link_profile.schema.json"


def test_the_published_schema_is_what_the_profile_model_defines():
    assert SCHEMA.read_text() == link_profile.schema_text(), (
        "run: python -m common.projection.link_profile > docs/link_profile.schema.json"
    )


def test_the_fit_recovers_latency_and_bandwidth():
    alpha, beta = 150e-6, 1 / 2e9  # 150 us a call, 2 GB/s
    points = [
        link_profile.Point(payload_bytes=size, wire_bytes=size, seconds=alpha + beta * size)
        for size in link_profile.SIZES
    ]
    fitted_alpha, fitted_beta = link_profile.fit(points)
    assert fitted_alpha == pytest.approx(alpha, rel=1e-6)
    assert fitted_beta == pytest.approx(beta, rel=1e-6)


def test_a_profile_of_other_contents_is_refused_by_name(tmp_path):
    bad = tmp_path / "links.json"
    bad.write_text('{"framework": "torch"}')
    with pytest.raises(ValueError, match="links.json is not one"):
        link_profile.read(bad)


def _measured(module: str, nproc: int, out: Path, *options: str) -> subprocess.CompletedProcess:
    """The link tool on `nproc` ranks forked warm (tests/warm_ranks.py: their subject is the
    measurement, not the launch), writing `out`; it must succeed."""
    command = train_command(module, nproc, [], ["--out", str(out), *options], warm=True)
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.mark.parametrize("module", ["torch_impl.links", "tf_impl.links"])
def test_each_framework_measures_its_own_collectives_into_a_profile(module, tmp_path):
    out = tmp_path / "links.json"
    done = _measured(module, 2, out, "--max-bytes", "32768")
    raw = json.loads(out.read_text())
    jsonschema.validate(raw, json.loads(SCHEMA.read_text()))
    profile = link_profile.read(out)
    assert profile.world_size == 2 and len(profile.hosts) == 2
    assert profile.framework == module.split("_")[0]
    expected = {"all_reduce", "all_gather"} | ({"reduce_scatter"} if "torch" in module else set())
    assert set(profile.kinds) == expected
    for fit in profile.kinds.values():
        assert len(fit.points) == 5 and fit.alpha_s >= 0 and fit.beta_s_per_byte >= 0  # 8 B..32 KiB
        assert all(point.seconds > 0 for point in fit.points)
        # the chief's CPU a call: some (the ranks wait on sockets, not spin), and no more than
        # its 2 cores could give in the call's time (with the barriers' and buffers' share)
        assert all(0 < point.cpu_s < 2 * point.seconds + 1e-3 for point in fit.points)
    assert "CPU a call of 32,768 B:" in done.stdout


def test_a_runs_own_calls_are_measured_and_priced_off_their_own_points(tmp_path):
    """--sizes-of RUN: every kind is also timed at the payload the run's calls hand it, past
    --max-bytes too, and in the order its step issues them, so that the projection of that run
    reads each call off its own point as its step issues it, not between powers of 8; a run
    without collectives is refused by name."""
    run = runner("torch_impl.train", tmp_path, warm=True)
    preset = ["--config", "configs/mlp_adam.yaml", "--quiet"]
    _, folder = run("fsdp2", 2, "torch.strategy=fsdp2", "train.epochs=1", extra=preset)
    _, alone = run("alone", 0, "train.epochs=1", extra=preset)
    _, ddp = run("ddp", 2, "torch.strategy=ddp", "train.epochs=1", extra=preset)
    out = tmp_path / "links.json"
    runs = f"{folder},{ddp}"  # ddp's step: all-reduces and broadcasts, which no tool times
    done = _measured("torch_impl.links", 2, out, "--max-bytes", "512", "--sizes-of", runs)
    assert "reduce_scatter  in a run's step, in its order:" in done.stdout, done.stdout
    profile = link_profile.read(out)
    (recorded,), _, _ = load_runs([str(folder)])
    calls = step_model.calls_at(recorded, 2) or []
    kinds = [each.kind for each in calls]  # one a size: each of the MLP's 3 units
    assert sorted(kinds) == ["all_gather"] * 3 + ["reduce_scatter"] * 3, calls
    priced = 0.0
    for each in calls:  # each timed also as the step issues it, in its order: priced so
        own = {point.payload_bytes: point for point in profile.kinds[each.kind].points}
        size = round(each.payload / 4) * 4
        assert size > 512 and size in own, (each.kind, size, sorted(own))
        assert (own[size].in_step_s or 0) > 0, own[size]
        priced += each.calls * (own[size].in_step_s or 0)
    others = [p for fit in profile.kinds.values() for p in fit.points if p.payload_bytes <= 512]
    others += profile.kinds["all_reduce"].points  # ddp's: a step of one kind the tool times
    assert len(others) > 9 and all(point.in_step_s is None for point in others)
    assert step_model.communication_s(recorded, profile, 2) == pytest.approx(priced, rel=1e-3)
    with pytest.raises(ValueError, match="it recorded no collectives"):
        call_sizes.payloads([str(alone)], 2)


def test_groups_of_the_first_ranks_are_measured_into_the_profile(tmp_path):
    """4 ranks, --groups 2: a fit of every kind over ranks 0-1 beside the launch's own, and the
    latency per step printed at both sizes."""
    out = tmp_path / "links.json"
    done = _measured("torch_impl.links", 4, out, "--max-bytes", "4096", "--groups", "2")
    jsonschema.validate(json.loads(out.read_text()), json.loads(SCHEMA.read_text()))
    profile = link_profile.read(out)
    assert profile.world_size == 4 and list(profile.groups) == [2]
    assert set(profile.groups[2]) == set(profile.kinds) == set(link_profile.KIND_NAMES)
    for kind, fit in profile.groups[2].items():
        assert len(fit.points) == 4 and all(point.seconds > 0 for point in fit.points)
        assert fit.points[-1].wire_bytes == wire_bytes(kind, 4096, 2)  # the group's, not 4's
    per_step = [line for line in done.stdout.splitlines() if "alpha a latency step" in line]
    assert len(per_step) == 3 and all("at 2 ranks" in x and "at 4 ranks" in x for x in per_step)


CASES = {  # case: (module, options), each refused before any measurement
    "max-bytes": ("torch_impl.links", ["--max-bytes", "0"]),
    "out-under-a-file": ("torch_impl.links", []),
    "group-of-the-world": ("torch_impl.links", ["--groups", "2"]),
    "groups-on-tf": ("tf_impl.links", ["--groups", "2"]),
    "tiers-on-one-node": ("torch_impl.links", ["--tiers"]),
    "tiers-on-tf": ("tf_impl.links", ["--tiers"]),
    "sizes-of-nothing": ("tf_impl.links", ["--sizes-of", "no-such-run"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_link_tool_refuses_what_cannot_work_before_it_measures(case, tmp_path):
    """--max-bytes below two sizes wrote a profile that was accepted; --out under a file failed
    with a traceback after the whole measurement. Both are refused first, exit 2, one line; so
    are a group as large as the launch, groups where the framework has none, and tiers on one
    node (refused once the ranks have met, since only then are their hosts known). The others
    but --out (the chief's alone) are refused on every rank before the framework's import
    (TensorFlow's takes about 4 s of CPU a rank): PYTHONPROFILEIMPORTTIME has every process
    list the modules it imported."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    out = blocker / "links.json" if case == "out-under-a-file" else tmp_path / "links.json"
    module, extra = CASES[case]
    command = train_command(module, 2, [], ["--out", str(out), *extra])
    listed = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=listed)
    assert done.returncode == 2, done.stdout + done.stderr
    output = done.stdout + done.stderr  # the launcher passes each rank's lines on
    imported = {line.split("|")[-1].strip() for line in output.splitlines() if "|" in line}
    assert "numpy" in imported  # the lists are there
    # the tiers need the ranks' hosts; --out is the chief's, and its peer goes on to the import
    if case not in ("tiers-on-one-node", "out-under-a-file"):
        assert not {"torch", "tensorflow", "keras"} & imported, case
    output = "\n".join(line for line in output.splitlines() if "import time:" not in line)
    errors = [line for line in output.splitlines() if "error:" in line]
    assert errors and "Traceback" not in output, output
    said = {
        "max-bytes": "--max-bytes 0",
        "out-under-a-file": f"--out {out}",
        "group-of-the-world": "--groups 2: a group has 2 ranks or more and fewer than the",
        "groups-on-tf": "--groups 2: tf's collectives run over every worker only",
        "tiers-on-one-node": f"--tiers: the ranks per node are {socket.gethostname()}: 2; the",
        "tiers-on-tf": "--tiers: tf's collectives run over every worker only",
        "sizes-of-nothing": "--sizes-of: ",
    }[case]
    assert said in errors[0], errors
    assert case != "sizes-of-nothing" or "no-such-run: file is missing" in errors[0], errors
    assert not out.exists()


def test_the_tiers_are_each_nodes_ranks_and_each_local_rank_across_the_nodes():
    """--tiers groups ranks by the host each reported, in whatever order the launcher numbered
    them; the preflight asks for tiers only on nodes of the same number of ranks, 2 or more."""
    from torch_impl.links import SIDE

    assert link_groups.tier_partitions(["a", "a", "b", "b", "c", "c"], SIDE) == {
        "intra_node": [[0, 1], [2, 3], [4, 5]],
        "inter_node": [[0, 2, 4], [1, 3, 5]],
    }
    assert link_groups.tier_partitions(["a", "b", "a", "b"], SIDE) == {
        "intra_node": [[0, 2], [1, 3]],
        "inter_node": [[0, 1], [2, 3]],
    }
    assert link_groups.tiers_fit(["a", "a", "b", "b"])
    for hosts in (["a", "b"], ["a", "a"], ["a", "a", "b"], ["a", "a", "b", "b", "b", "b"]):
        assert not link_groups.tiers_fit(hosts), hosts
    with pytest.raises(ValueError, match="the ranks per node are a: 2, b: 1; the tiers take"):
        link_groups.tier_partitions(["a", "a", "b"], SIDE)
