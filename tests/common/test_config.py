import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.core.config import config_io
from common.core.config.config import Config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("preset", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_preset_loads(preset):
    cfg = config_io.load_config(preset)
    assert isinstance(cfg, Config)


def test_seed_presets_hold_the_seed_runs():
    mlp = config_io.load_config(CONFIGS / "mlp_adam.yaml")
    assert (mlp.model.name, mlp.optim.name, mlp.optim.lr) == ("mlp", "adam", 1e-3)
    assert (mlp.train.batch_size, mlp.train.batch_mode, mlp.train.epochs) == (64, "global", 5)
    cnn = config_io.load_config(CONFIGS / "cnn_adadelta.yaml")
    assert (cnn.model.name, cnn.optim.name, cnn.optim.lr) == ("cnn", "adadelta", 1.0)
    assert (cnn.optim.schedule, cnn.optim.gamma, cnn.train.epochs) == ("step", 0.7, 10)
    assert cnn.train.global_batch_size(world_size=4) == 256  # 64 per rank


def test_overrides_are_typed_by_the_schema():
    cfg = config_io.load_config(
        None, ["optim.lr=0.5", "train.epochs=3", "model.dropout=false", "torch.strategy=fsdp2"]
    )
    assert cfg.optim.lr == 0.5 and cfg.train.epochs == 3
    assert cfg.model.dropout is False and cfg.torch.strategy == "fsdp2"
    # an int is a fine float, and a YAML null is a fine optional
    cfg = config_io.load_config(None, ["optim.lr=1", "data.dir=null"])
    assert cfg.optim.lr == 1.0 and isinstance(cfg.optim.lr, float) and cfg.data.dir is None


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "optim.learning_rate=0.1",
            r"Unknown config key: optim.learning_rate; allowed in optim: "
            r"name, lr",
        ),
        ("optimizer.lr=0.1", r"Unknown config section: 'optimizer'; allowed: data, model"),
        ("train.epochs=2.5", r"train.epochs: expected an integer, got 2.5"),
        ("train.epochs=true", r"train.epochs: expected an integer, got True"),
        ("model.dropout=1", r"model.dropout: expected a boolean, got 1"),
        (
            "optim.name=rmsprop",
            r"optim.name: expected one of 'sgd', 'adam', 'adadelta', "
            r"got 'rmsprop'",
        ),
        (
            "torch.strategy=zero3",
            r"torch.strategy='zero3' is not a strategy of torch; allowed: single, ddp, fsdp2, "
            r"fsdp1, hsdp",
        ),
        ("optim.lr=-1", r"optim.lr must be greater than 0, got -1.0"),
        ("train.target_accuracy=98", r"train.target_accuracy is a fraction in \(0, 1\]"),
        ("optim.lr=.inf", r"optim.lr: expected a finite number, got inf"),
        ("optim.momentum=.nan", r"optim.momentum: expected a finite number, got nan"),
        ("output.run_name=" + "r" * 201, r"output.run_name is 201 bytes long; at most 200"),
        ("output.run_name=.hidden", r"output.run_name is a folder name, not a path"),
        ("optim.lr", r"must look like section.key=value"),
        ("lr=0.1", r"must look like section.key=value"),
    ],
)
def test_bad_overrides_are_refused_with_the_key_and_allowed_values(override, message):
    with pytest.raises(ValueError, match=message):
        config_io.load_config(None, [override])


def test_bad_preset_file_names_the_file(tmp_path):
    preset = tmp_path / "bad.yaml"
    preset.write_text("train:\n  epochs: ten\n")
    with pytest.raises(ValueError, match=r"train.epochs: expected an integer.*bad.yaml"):
        config_io.load_config(preset)
    with pytest.raises(ValueError, match="does not exist"):
        config_io.load_config(tmp_path / "missing.yaml")
    preset.write_text("- a list\n")
    with pytest.raises(ValueError, match="must hold a mapping"):
        config_io.load_config(preset)


def test_an_error_says_whether_the_preset_or_an_override_caused_it(tmp_path):
    preset = tmp_path / "fine.yaml"
    preset.write_text("train:\n  epochs: 2\n")
    with pytest.raises(
        ValueError, match=r"expected an integer, got 'x' \(after --set train.epochs=x\)"
    ):
        config_io.load_config(preset, ["train.epochs=x"])
    preset.write_text("train:\n  epochs: x\n")
    with pytest.raises(ValueError, match=r"expected an integer, got 'x' \(in .*fine.yaml\)"):
        config_io.load_config(preset, ["train.epochs=2"])


def test_global_batch_must_split_over_the_ranks():
    cfg = config_io.load_config(None, ["train.batch_size=64"])
    assert cfg.train.per_rank_batch_size(4) == 16
    with pytest.raises(ValueError, match="does not split evenly over 3 ranks"):
        cfg.train.global_batch_size(3)


def test_hash_is_stable_and_tracks_values(tmp_path):
    preset = tmp_path / "a.yaml"
    preset.write_text("optim:\n  lr: 0.01\n  name: sgd\nmodel:\n  name: cnn\n")
    reordered = tmp_path / "b.yaml"
    reordered.write_text("model:\n  name: cnn\noptim:\n  name: sgd\n  lr: 0.01\n")
    a, b = config_io.load_config(preset), config_io.load_config(reordered)
    assert config_io.config_hash(a) == config_io.config_hash(b)
    # the same in another process with another string-hash seed
    probe = (
        "from common.core.config import config_io\n"
        "print(config_io.config_hash(config_io.load_config()))"
    )
    other = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert other.stdout.strip() == config_io.config_hash(Config())
    assert config_io.config_hash(config_io.load_config(None, ["optim.lr=0.02"])) != (
        config_io.config_hash(config_io.load_config(None, ["optim.lr=0.01"]))
    )


def test_resolved_config_round_trips_through_the_run_folder(tmp_path):
    cfg = config_io.load_config(CONFIGS / "cnn_adadelta.yaml", ["train.seed=7"])
    written = config_io.save_config(cfg, tmp_path)
    assert config_io.config_hash(cfg) in written.read_text().splitlines()[0]
    assert config_io.load_config(written) == cfg


def test_every_float_form_python_reads_is_a_number_in_overrides_and_presets(tmp_path):
    """PyYAML follows YAML 1.1, which reads an exponent without a dot ("1e-3", "1e4") as a
    string; users write them all the time."""
    cfg = config_io.load_config(None, ["optim.lr=1e4", "optim.weight_decay=5E-4"])
    assert (cfg.optim.lr, cfg.optim.weight_decay) == (1e4, 5e-4)
    preset = tmp_path / "p.yaml"
    preset.write_text("optim:\n  lr: 1e-3\n  gamma: 7e-1\n  momentum: '9e-1'\n")
    cfg = config_io.load_config(preset)
    assert (cfg.optim.lr, cfg.optim.gamma, cfg.optim.momentum) == (1e-3, 0.7, 0.9)
    for bad, message in (("1e", "expected a number, got '1e'"), ("inf", "finite number")):
        with pytest.raises(ValueError, match=message):
            config_io.load_config(None, [f"optim.lr={bad}"])
    with pytest.raises(ValueError, match="train.epochs: expected an integer, got '1e3'"):
        config_io.load_config(None, ["train.epochs=1e3"])  # counts stay integers


def test_free_text_keys_take_what_was_typed_and_yaml_booleans_in_files_are_explained(tmp_path):
    cfg = config_io.load_config(None, ["output.run_name=on", "output.dir=1e3"])
    assert (cfg.output.run_name, cfg.output.dir) == ("on", "1e3")
    preset = tmp_path / "p.yaml"
    preset.write_text("output:\n  run_name: yes\n")
    with pytest.raises(ValueError, match="YAML reads yes/no/on/off/true/false as booleans: quote"):
        config_io.load_config(preset)


def test_a_check_across_sections_is_said_as_the_registry_words_it():
    """A refusal of the whole config (a strategy against another section) has no key of its
    own in pydantic's error; it is said as the strategy registry words it."""
    with pytest.raises(ValueError, match="torch.compile=true is offered for single, ddp"):
        config_io.load_config(None, ["torch.strategy=fsdp1", "torch.compile=true"])


def test_the_hash_of_an_unchanged_config_does_not_move():
    """Published hashes (run_start, config.yaml) of the presets, from before the config moved to
    pydantic and before output.tensorboard existed: a config that sets nothing new keeps its."""
    published = {
        "cnn_adadelta.yaml": "69a594d82758",
        "mlp_adam.yaml": "20a3be337db3",
        "parity_sgd.yaml": "990db89430ad",
        "resnet8_sgd.yaml": "cd8d755be417",
    }
    for name, digest in published.items():
        assert config_io.config_hash(config_io.load_config(CONFIGS / name)) == digest, name
    live = config_io.load_config(CONFIGS / "mlp_adam.yaml", ["output.tensorboard=true"])
    assert config_io.config_hash(live) != published["mlp_adam.yaml"]
