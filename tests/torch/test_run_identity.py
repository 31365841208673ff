"""One run is one folder is one identity, on real torch launches: nothing appended, merged or
resumed silently, and every exit says why. The ranks of the folder, checkpoint and resume tests
are forked warm (tests/warm_ranks.py: their subject is the run folder, not the launch); the
killed-rank tests and the refusals before the folder start cold, as users start them."""

import shutil
import subprocess
import sys

import pytest
import torch

from tests.launching import SMALL, kill_second_rank_mid_training, train_command
from tests.records import read_metrics

FOUR = [
    "torch.strategy=ddp",
    "train.epochs=4",
    "train.checkpoint_every_epochs=1",
    "output.save_model=true",
]


def records(run_dir):
    return read_metrics(run_dir / "metrics.jsonl")


def weights(run_dir):
    return torch.load(run_dir / "model.pt")


def test_a_used_run_folder_is_refused_without_resume(run_torch):
    _, run_dir = run_torch("s", 2, "torch.strategy=ddp", "train.epochs=1")
    before = (run_dir / "metrics.jsonl").read_bytes()
    done, _ = run_torch("s", 2, "torch.strategy=ddp", "optim.lr=0.01", check=False)
    assert done.returncode == 2
    assert f"{run_dir} already exists and holds another run" in done.stdout
    assert "--resume / --auto-resume" in done.stdout
    assert (run_dir / "metrics.jsonl").read_bytes() == before


def test_launches_started_together_never_share_a_folder(tmp_path):
    settings = [*SMALL, "torch.strategy=single", "train.epochs=1", f"output.dir={tmp_path}"]
    named = [*settings, "output.run_name=same"]
    commands = [
        train_command("torch_impl.train", 0, [*settings, f"train.seed={seed}"], [], warm=True)
        for seed in (1, 2)
    ] + [train_command("torch_impl.train", 0, named, [], warm=True)] * 2
    started = [
        subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for c in commands
    ]
    codes = [process.wait(timeout=300) for process in started]
    assert codes[:2] == [0, 0] and sorted(codes[2:]) == [0, 2]
    folders = sorted(p for p in tmp_path.iterdir() if p.name != "same")
    assert len(folders) == 2  # two automatic names, each one run
    for folder in [*folders, tmp_path / "same"]:
        kinds = [r["record"] for r in records(folder)]
        assert kinds.count("run_start") == 1 and kinds.count("epoch") == 1


@pytest.fixture(scope="module")
def stopped_after_two(tmp_path_factory):
    """A 4-epoch DDP run checkpointed every epoch and stopped after epoch 2, kept pristine;
    each test gets a copy. Plus the same run uninterrupted."""
    root = tmp_path_factory.mktemp("identity")
    for name, extra in (("whole", []), ("parts", ["--stop-after-epoch", "2"])):
        settings = [*SMALL, *FOUR, f"output.dir={root}", f"output.run_name={name}"]
        done = subprocess.run(
            train_command("torch_impl.train", 2, settings, extra, warm=True),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout
    return root


def resume_copy(stopped_after_two, tmp_path, *overrides, nproc=2, strategy="ddp", damage=None):
    """Copy the stopped run, let `damage(run_dir)` break it, resume it with --resume."""
    shutil.copytree(stopped_after_two / "parts", tmp_path / "parts")
    if damage:
        damage(tmp_path / "parts")
    settings = [
        *SMALL,
        *FOUR,
        f"output.dir={tmp_path}",
        "output.run_name=parts",
        *overrides,
        f"torch.strategy={strategy}",
    ]
    done = subprocess.run(
        train_command("torch_impl.train", nproc, settings, ["--resume"], warm=True),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done, tmp_path / "parts"


def test_only_the_newest_checkpoints_are_kept(stopped_after_two):
    kept = sorted(p.name for p in (stopped_after_two / "whole" / "checkpoints").iterdir())
    assert kept == ["epoch-0003", "epoch-0004"]  # train.keep_checkpoints defaults to 2


def flip_a_bit(run_dir):
    shard = next((run_dir / "checkpoints/epoch-0002").glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))


def test_a_corrupt_checkpoint_falls_back_to_the_previous_one(stopped_after_two, tmp_path):
    done, run_dir = resume_copy(stopped_after_two, tmp_path, damage=flip_a_bit)
    assert done.returncode == 0, done.stdout
    name = next((stopped_after_two / "parts/checkpoints/epoch-0002").glob("*.distcp")).name
    shard = run_dir / "checkpoints/epoch-0002" / name
    assert f"checkpoint epoch-0002 is corrupt, skipped: {shard} does not match" in done.stdout
    resumed = [r for r in records(run_dir) if r["record"] == "resume"]
    assert [r["epoch"] for r in resumed] == [1]
    whole, parts = weights(stopped_after_two / "whole"), weights(run_dir)
    assert all(torch.equal(whole[name], parts[name]) for name in whole)


def break_manifests(run_dir):
    for manifest in (run_dir / "checkpoints").glob("*/manifest.json"):
        manifest.write_text("{not json")


def test_no_intact_checkpoint_stops_and_names_the_file(stopped_after_two, tmp_path):
    done, run_dir = resume_copy(stopped_after_two, tmp_path, damage=break_manifests)
    assert done.returncode == 1
    assert "no intact checkpoint left" in done.stdout
    assert f"{run_dir / 'checkpoints/epoch-0002/manifest.json'} cannot be read" in done.stdout


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            {"strategy": "single", "nproc": 0},
            [
                "strategy: 'ddp' in the checkpoint, 'single' now",
                "world_size: 2 in the checkpoint, 1 now",
            ],
        ),
        ({"overrides": ["optim.lr=0.01"]}, ["optim.lr: 0.001 in the checkpoint, 0.01 now"]),
        ({"overrides": ["train.batch_size=32"]}, ["train.batch_size: 64 in the checkpoint, 32"]),
    ],
    ids=["world-and-strategy", "lr", "batch"],
)
def test_a_resume_of_another_config_or_world_is_refused(
    stopped_after_two, tmp_path, change, expected
):
    before = (stopped_after_two / "parts" / "metrics.jsonl").read_bytes()
    done, run_dir = resume_copy(
        stopped_after_two,
        tmp_path,
        *change.get("overrides", []),
        nproc=change.get("nproc", 2),
        strategy=change.get("strategy", "ddp"),
    )
    assert done.returncode == 2, done.stdout
    for text in expected:
        assert text in done.stdout + done.stderr
    assert (run_dir / "metrics.jsonl").read_bytes() == before  # nothing written


def test_a_resumed_run_reads_as_one_run_with_its_whole_time(stopped_after_two, tmp_path):
    done, run_dir = resume_copy(stopped_after_two, tmp_path, "train.epochs=4")
    assert done.returncode == 0, done.stdout
    first_end, end = [r for r in records(run_dir) if r["record"] == "run_end"]
    assert end["status"] == "success" and end["epochs_completed"] == 4
    assert end["total_time_s"] > first_end["total_time_s"]


def test_checks_that_need_no_process_group_run_before_the_folder(tmp_path):
    corrupt = tmp_path / "mnist"
    from common.data import mnist

    shutil.copytree(mnist.resolve_dir(), corrupt)
    labels = corrupt / "t10k-labels-idx1-ubyte"
    labels.write_bytes(labels.read_bytes()[:-1] + b"\x07")
    cases = [
        (2, ["torch.strategy=ddp", "train.batch_size=65"], "does not split evenly over 2 ranks"),
        (0, ["torch.strategy=single", "data.train_limit=32"], "fewer than one global batch"),
        (0, ["torch.strategy=single", f"data.dir={corrupt}"], "t10k-labels-idx1-ubyte"),
        (0, ["torch.strategy=single", "optim.lr=.inf"], "expected a finite number"),
    ]
    for nproc, overrides, message in cases:
        settings = [*SMALL, f"output.dir={tmp_path / 'out'}", "output.run_name=r", *overrides]
        done = subprocess.run(
            train_command("torch_impl.train", nproc, settings, []),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, (overrides, done.stdout, done.stderr)
        assert message in done.stdout + done.stderr, overrides
        assert not (tmp_path / "out").exists(), overrides


def test_a_killed_peer_with_loader_workers_still_gets_its_run_end(tmp_path):
    output, code, _, end = kill_second_rank_mid_training(
        "torch_impl.train", tmp_path, "data.pipeline=loader"
    )
    assert code == 1, output
    assert end["record"] == "run_end" and end["status"] == "failed"
    assert "rank 0" in end["error"]


def test_the_launcher_names_the_killed_rank_and_the_survivor_says_why(tmp_path):
    script = tmp_path / "kill_rank1.py"
    script.write_text(
        "import os, signal, threading, sys\n"
        "from torch_impl import train\n"
        "if os.environ['RANK'] == '1':\n"
        "    threading.Timer(6.0, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()\n"
        "sys.exit(train.main(sys.argv[1:]))\n"
    )
    settings = [
        *SMALL,
        "data.train_limit=60000",
        "train.epochs=5",
        "torch.strategy=ddp",
        f"output.dir={tmp_path}",
        "output.run_name=k",
    ]
    command = [
        sys.executable,
        "-m",
        "common.launch",
        "--nproc",
        "2",
        "--",
        sys.executable,
        str(script),
    ] + [arg for s in settings for arg in ("--set", s)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 137, done.stdout + done.stderr
    assert "[launch] rank 1 was killed by SIGKILL (pid " in done.stderr
    assert "rank 0 only noticed it" in done.stderr or "stopped the other ranks" in done.stderr
    end = records(tmp_path / "k")[-1]
    assert end["record"] == "run_end" and end["status"] == "failed", end
    assert end["error"].startswith("rank 1 was killed by SIGKILL (pid "), end["error"]
