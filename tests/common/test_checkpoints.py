"""Checkpoint folders (common.core.run.checkpoint_folders) and whether a launch may go on with a run
(common.core.run.resume): real files, flipped bytes, configs that differ."""

import json

import pytest

from common.core.config import config_io
from common.core.config.cli import RunOptions
from common.core.run import checkpoint_folders, resume
from common.launch import environment

SPEC = environment.from_environment({})  # one local process, no SLURM job


def job(job_id="5", restarts=0, cluster_name="alpha"):
    """What a task of SLURM job `job_id` sees (start number `restarts`)."""
    env = {
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_STEP_NUM_TASKS": "1",
        "SLURM_STEP_NODELIST": "n1",
        "SLURM_STEP_TASKS_PER_NODE": "1",
        "SLURM_JOB_ID": job_id,
        "SLURM_RESTART_COUNT": str(restarts),
        "SLURM_CLUSTER_NAME": cluster_name,
    }
    return environment.from_environment(env)


def make_checkpoint(run_dir, epoch, payload=b"weights"):
    folder = checkpoint_folders.epoch_dir(run_dir, epoch)
    (folder / "shards").mkdir(parents=True)
    (folder / "shards" / "rank0.bin").write_bytes(payload * 100)
    (folder / "rng.pt").write_bytes(b"rng")
    extras = {"elapsed_s": 1.0, "run_time_s": 2.0, "epoch_records": []}
    checkpoint_folders.write_manifest(folder, epoch=epoch, extras=extras)
    return folder


def test_an_intact_checkpoint_verifies_and_a_flipped_byte_does_not(tmp_path):
    folder = make_checkpoint(tmp_path, 1)
    assert checkpoint_folders.problem(folder) is None
    shard = folder / "shards" / "rank0.bin"
    data = bytearray(shard.read_bytes())
    data[17] ^= 0x01
    shard.write_bytes(bytes(data))
    assert checkpoint_folders.problem(folder) == f"{shard} does not match its checksum in " + str(
        folder / "manifest.json"
    )


def test_missing_extra_and_unreadable_files_are_named(tmp_path):
    folder = make_checkpoint(tmp_path, 1)
    (folder / "rng.pt").unlink()
    assert checkpoint_folders.problem(folder) == f"{folder / 'rng.pt'} is missing"
    folder = make_checkpoint(tmp_path, 2)
    (folder / "stray.bin").write_bytes(b"?")
    assert "stray.bin is not in" in checkpoint_folders.problem(folder)
    folder = make_checkpoint(tmp_path, 3)
    (folder / "manifest.json").write_text("{broken")
    assert checkpoint_folders.problem(folder).startswith(
        f"{folder / 'manifest.json'} cannot be read"
    )


def test_resume_falls_back_to_the_newest_intact_checkpoint(tmp_path):
    make_checkpoint(tmp_path, 1)
    second = make_checkpoint(tmp_path, 2)
    checkpoint_folders.epoch_dir(tmp_path, 3).mkdir()  # cut off before its manifest: not complete
    (second / "rng.pt").write_bytes(b"RNG")
    warnings = []
    chosen = checkpoint_folders.newest_intact(tmp_path, warnings.append)
    assert chosen == checkpoint_folders.epoch_dir(tmp_path, 1)
    assert warnings == [
        f"checkpoint epoch-0002 is corrupt, skipped: {second / 'rng.pt'} does "
        f"not match its checksum in {second / 'manifest.json'}"
    ]


def test_no_intact_checkpoint_left_names_every_file(tmp_path):
    only = make_checkpoint(tmp_path, 1)
    (only / "manifest.json").write_text("[]")
    with pytest.raises(
        checkpoint_folders.CheckpointError, match="no intact checkpoint left: .*epoch-0001"
    ):
        checkpoint_folders.newest_intact(tmp_path, lambda text: None)
    assert checkpoint_folders.newest_intact(tmp_path / "elsewhere", lambda text: None) is None


def test_prune_keeps_the_newest_complete_ones(tmp_path):
    for epoch in (1, 2, 3, 4):
        make_checkpoint(tmp_path, epoch)
    checkpoint_folders.epoch_dir(
        tmp_path, 5
    ).mkdir()  # newer, incomplete: kept (it may be in the works)
    checkpoint_folders.prune(tmp_path, keep=2)
    left = sorted(p.name for p in checkpoint_folders.root(tmp_path).iterdir())
    assert left == ["epoch-0003", "epoch-0004", "epoch-0005"]
    checkpoint_folders.prune(tmp_path, keep=0)
    assert len(list(checkpoint_folders.root(tmp_path).iterdir())) == 3


def identity(*overrides, world=2, strategy="ddp"):
    cfg = config_io.load_config(None, list(overrides))
    config = config_io.to_dict(cfg)
    return resume.identity(framework="torch", strategy=strategy, world_size=world, config=config)


def test_a_resume_may_change_only_the_listed_keys():
    saved = identity("optim.lr=0.001")
    allowed = identity("optim.lr=0.001", "train.epochs=9", "dist.timeout_s=5", "output.dir=x")
    assert resume.conflicts(saved, allowed) == []
    found = resume.conflicts(
        saved, identity("optim.lr=0.01", "train.seed=3", world=1, strategy="single")
    )
    # single loads no other strategy's checkpoint and runs one process: both said, with why
    assert [line.split(" (")[0] for line in found] == [
        "strategy: 'ddp' in the checkpoint, 'single' now",
        "world_size: 2 in the checkpoint, 1 now",
        "optim.lr: 0.001 in the checkpoint, 0.01 now",
        "train.seed: 0 in the checkpoint, 3 now",
    ]
    assert "torch.strategy=single runs one process" in found[1]
    onecycle = identity("optim.schedule=onecycle")
    longer = identity("optim.schedule=onecycle", "train.epochs=4")
    assert "onecycle schedule spans all epochs" in resume.conflicts(onecycle, longer)[0]


def claim(run_dir, options, spec, warn):
    """resume.prepare_folder, its lock let go at once (as at the end of a launch)."""
    name, held = resume.prepare_folder(run_dir, options, spec, warn)
    held.release()
    return name


def test_a_folder_held_by_a_live_launch_is_refused_naming_it(tmp_path):
    run_dir = tmp_path / "results" / "s"
    _, held = resume.prepare_folder(run_dir, RunOptions(), SPEC, print)
    with pytest.raises(resume.RunRefused, match="is in use by a launch that is still running"):
        resume.prepare_folder(run_dir, RunOptions(resume=True), SPEC, print)
    held.release()
    warnings = []
    claim(run_dir, RunOptions(resume=True), SPEC, warnings.append)
    assert warnings == []  # released cleanly: nothing to take over


def test_a_new_run_never_takes_an_existing_folder(tmp_path):
    run_dir = tmp_path / "results" / "s"
    claim(run_dir, RunOptions(), SPEC, print)
    assert run_dir.is_dir()
    with pytest.raises(resume.RunRefused, match="already exists and holds another run") as caught:
        claim(run_dir, RunOptions(), SPEC, print)
    assert str(run_dir) in str(caught.value) and "--resume / --auto-resume" in str(caught.value)
    claim(run_dir, RunOptions(auto_resume=True), SPEC, print)  # going on with it: fine
    with pytest.raises(resume.RunRefused, match="there is no run folder"):
        claim(tmp_path / "never", RunOptions(resume=True), SPEC, print)


def test_a_checkpoint_of_another_run_is_refused_and_what_may_change_is_said(tmp_path):
    folder = make_checkpoint(tmp_path, 1)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.update(identity("optim.lr=0.001"))
    (folder / "manifest.json").write_text(json.dumps(manifest))
    checkpoint_folders.write_manifest(folder, epoch=1, extras=manifest)  # checksums stay right
    chosen = resume.choose_checkpoint(
        tmp_path, RunOptions(resume=True), identity("optim.lr=0.001"), print
    )
    assert chosen == {"folder": "epoch-0001"}
    with pytest.raises(resume.RunRefused, match="optim.lr: 0.001 in the checkpoint, 0.05 now"):
        resume.choose_checkpoint(
            tmp_path, RunOptions(auto_resume=True), identity("optim.lr=0.05"), print
        )


def test_a_job_goes_on_only_with_the_folder_its_own_earlier_start_made(tmp_path):
    run_dir, warnings = tmp_path / "t-5", []
    auto = RunOptions(auto_resume=True)
    assert claim(run_dir, auto, job(), warnings.append) == "t-5"  # first start
    make_checkpoint(run_dir, 2)
    assert claim(run_dir, auto, job(restarts=1), warnings.append) == "t-5"
    assert warnings == []
    # job 5 again after the cluster's state was wiped (a first start), or job 5 of another
    # cluster on the same file system: a fresh folder, and the old run is left alone
    for other in (job(), job(restarts=1, cluster_name="beta")):
        name = claim(run_dir, auto, other, warnings.append)
        assert name.startswith("t-5-") and (tmp_path / name).is_dir()
        assert f"{run_dir} holds another run than this job's" in warnings[-1]
        assert f"starts afresh in {tmp_path / name}" in warnings[-1]
    shown = sorted(p.name for p in run_dir.iterdir() if p.name != ".lock")  # the folder's lock
    assert shown == ["checkpoints", "launch.json"]
    # a folder from before launch.json existed is not known to be this job's either
    (run_dir / "launch.json").unlink()
    assert claim(run_dir, auto, job(restarts=1), warnings.append) != "t-5"
    # an explicit --resume (run_slurm.sh adds --auto-resume) goes on with the folder it names
    both, before = RunOptions(resume=True, auto_resume=True), len(warnings)
    assert claim(run_dir, both, job(cluster_name="beta"), warnings.append) == "t-5"
    assert len(warnings) == before
