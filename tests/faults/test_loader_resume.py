"""Stop + resume inside an epoch is bitwise for both data pipelines on both frameworks, with
dropout on (the training's random numbers): the loader's helpers never draw from the
training's generator, so torch's DataLoader workers, started per epoch and seeded from (seed,
epoch, rank, worker), give the same numbers with any worker count and wherever the run was
stopped."""

import json

import pytest

from tests.launching import runner

SETTINGS = [
    "data.train_limit=1280",
    "data.test_limit=500",
    "train.epochs=3",
    "train.checkpoint_every_epochs=1",
    "model.dropout=true",
]


def curve(run_dir) -> list[tuple[float, float, float]]:
    """Every epoch's losses and accuracy, as the file holds them (the last of each epoch)."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    epochs = {}
    for line in lines:
        record = json.loads(line)
        if record["record"] == "epoch":
            epochs[record["epoch"]] = (
                record["train_loss"],
                record["val_loss"],
                record["val_accuracy"],
            )
    return [epochs[number] for number in sorted(epochs)]


def uninterrupted(module: str, pipeline: str, root) -> tuple:
    """The uninterrupted run of 2 loader workers, measuring the GEMM peak into an empty cache of
    its own: (its folder, the cache's environment)."""
    cache = {"SUITE_CACHE_DIR": str(root / "cache")}
    settings = [*SETTINGS, f"data.pipeline={pipeline}", "data.loader_workers=2"]
    _, whole = runner(module, root, warm=True)("whole", 0, *settings, small=False, env=cache)
    assert (root / "cache" / "peak_flops.json").is_file()
    return whole, cache


@pytest.fixture(scope="module")
def torch_loader_whole(tmp_path_factory):
    """torch's uninterrupted loader run: read by the resume test and the worker-count test."""
    return uninterrupted("torch_impl.train", "loader", tmp_path_factory.mktemp("loader"))


@pytest.mark.parametrize("module", ["torch_impl.train", "tf_impl.train"])
@pytest.mark.parametrize("pipeline", ["tensor", "loader"])
def test_stop_and_resume_equals_an_uninterrupted_run(module, pipeline, tmp_path, request):
    """Measuring the peak does not change the numbers either: the first run of a machine
    measures the GEMM peak (later ones read the cache), and its random matrices must not come
    from the generator dropout draws from. Here the uninterrupted run measures it (an empty
    cache of its own), the stopped and resumed one reads it."""
    run = runner(module, tmp_path, warm=True)
    settings = [*SETTINGS, f"data.pipeline={pipeline}", "data.loader_workers=2"]
    if (module, pipeline) == ("torch_impl.train", "loader"):
        whole, cache = request.getfixturevalue("torch_loader_whole")
    else:
        whole, cache = uninterrupted(module, pipeline, tmp_path)
    # inside epoch 2 (20 steps an epoch): the resume starts at the shard plan's next sample
    run("parts", 0, *settings, small=False, extra=["--stop-after-step", "27"], env=cache)
    _, parts = run("parts", 0, *settings, small=False, extra=["--resume"], env=cache)
    assert len(curve(whole)) == 3
    assert curve(parts) == curve(whole)


def test_the_number_of_loader_workers_does_not_change_the_numbers(tmp_path, torch_loader_whole):
    """0 and 1 workers against the uninterrupted run of 2 (its own cache changes nothing: the
    test above)."""
    run = runner("torch_impl.train", tmp_path, warm=True)
    found = []
    for workers in (0, 1):
        settings = [*SETTINGS, "data.pipeline=loader", f"data.loader_workers={workers}"]
        _, run_dir = run(f"w{workers}", 0, *settings, small=False)
        found.append(curve(run_dir))
    found.append(curve(torch_loader_whole[0]))
    assert found[0] == found[1] == found[2]
