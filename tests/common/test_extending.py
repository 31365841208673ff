"""docs/extending.md stays true: its module map names every module, and its checklists name every
file an extension touches. A throwaway model with a new layer kind is added to a copy of the
tree by the checklists of "A model" and "A model with a new layer kind" alone; the files it had
to touch must be the files they name, and the copy's tests of every model must pass."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "extending.md"
CHECKLISTS = ("A model", "A model with a new layer kind")
PATH = re.compile(r"`((?:common|torch_impl|tf_impl|tests|docs|slurm|configs)/[\w/.]+)`")

# The throwaway model, 784-32-10 with a tanh, written into each file as a newcomer would.
KIND = """

@dataclass(frozen=True)
class Tanh(Layer):
    kind: ClassVar[str] = "tanh"
"""
MODEL = '''

def tanhnet(cfg: ModelConfig, inputs: Shape, classes: int) -> tuple[Layer, ...]:
    """A test's throwaway: flatten, dense 32, tanh, dense of the logits."""
    from common.models.layers import Tanh

    features = inputs[0] * inputs[1] * inputs[2]
    return (Flatten(), Dense("fc1", features, 32), Tanh(), Dense("fc2", 32, classes))


MODELS["tanhnet"] = ModelEntry("tanhnet", "784-32-10 with a tanh (a test's)", "hidden", tanhnet)
'''
EDITS = {
    "common/models/layers.py": lambda text: text + KIND,
    "common/models/zoo.py": lambda text: text + MODEL,
    "torch_impl/layers.py": lambda text: text.replace(
        '"relu": nn.ReLU,', '"relu": nn.ReLU,\n        "tanh": nn.Tanh,'
    ),
    "tf_impl/layers.py": lambda text: text.replace(
        '"relu": keras.layers.ReLU,',
        '"relu": keras.layers.ReLU,\n        "tanh": lambda: keras.layers.Activation("tanh"),',
    ),
    "tests/reference.py": lambda text: text.replace(
        "    if isinstance(layer, layers.ReLU):",
        '    if layer.kind == "tanh":\n        return np.tanh(x)\n'
        "    if isinstance(layer, layers.ReLU):",
    ),
}


def checklist(title: str) -> set[str]:
    """The files the checklist under `### title` names, each on its `- [ ]` lines."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split(f"\n### {title}\n", 1)[1].split("\n### ", 1)[0]
    items = re.split(r"\n- \[ \] ", section)[1:]
    return {path for item in items for path in PATH.findall(item.split("\n\n")[0])}


def test_every_module_is_in_the_map():
    text = GUIDE.read_text(encoding="utf-8")
    missing = []
    for package in ("common", "torch_impl", "tf_impl", "slurm"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path.stem.startswith("__") or ".venv" in path.parts:
                continue
            if f"`{path.stem}`" not in text and f"`{path.name}`" not in text:
                missing.append(str(path.relative_to(REPO)))
    assert not missing, f"docs/extending.md's map does not name: {', '.join(missing)}"


def test_a_model_with_a_new_layer_kind_takes_exactly_the_files_its_checklists_name(tmp_path):
    named = set().union(*(checklist(title) for title in CHECKLISTS))
    listed = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    copy = tmp_path / "tree"
    for name in listed:
        if (REPO / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, copy / name)
    for name, edit in EDITS.items():
        before = (copy / name).read_text(encoding="utf-8")
        after = edit(before)
        assert after != before, f"the edit of {name} found nothing to change"
        (copy / name).write_text(after, encoding="utf-8")
    env = {**os.environ, "MNIST_DIR": str(REPO / os.environ.get("MNIST_DIR", "data/mnist"))}
    docs = subprocess.run(
        [sys.executable, "-m", "common.tools.docs"], cwd=copy, env=env, capture_output=True
    )
    assert docs.returncode == 0, docs.stderr
    touched = {
        name
        for name in listed
        if (REPO / name).is_file() and (copy / name).read_bytes() != (REPO / name).read_bytes()
    }
    assert touched == named, (
        f"the checklists name {sorted(named - touched)} that it did not touch; "
        f"it touched {sorted(touched - named)} that they do not name"
    )
    tests = [
        "tests/common/test_weights.py",
        "tests/torch/test_units.py",
        "tests/tf/test_units.py",
        "tests/common/test_docs.py",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
        + ["-k", "tanhnet or reference_pages"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "5 passed" in done.stdout, done.stdout[-2000:]  # both layouts, round trip, 2 sides
