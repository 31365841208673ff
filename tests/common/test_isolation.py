"""common/ is the framework-free spine, in subpackages by job whose imports only go down:
tools (bench, sizes, preflight) over projection (a run priced at other worker counts) over
report (what compare shows) over core (what a run is made of) over models (what is trained)
over data (what it trains on) and launch (how ranks meet), over
checks (what a value may be: the config sections' base, their rules and error lines)."""

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import common

COMMON = Path(common.__file__).parent
# Each subpackage may import only from those of a lower layer (and from itself).
LAYERS = {
    "checks": 0,
    "launch": 1,
    "data": 1,
    "models": 2,
    "core": 3,
    "report": 4,
    "projection": 5,
    "tools": 6,
}


def common_modules() -> list[str]:
    walked = pkgutil.walk_packages(common.__path__, "common.")
    return [info.name for info in walked if not info.name.endswith("__main__")]


def test_common_is_split_into_subpackages_by_job():
    top = {path.name for path in COMMON.iterdir() if path.suffix == ".py"}
    assert top == {"__init__.py"}, f"modules outside a subpackage: {sorted(top)}"
    packages = {info.name for info in pkgutil.iter_modules(common.__path__) if info.ispkg}
    assert packages == set(LAYERS)


def imports_of(path: Path) -> set[str]:
    """The `common.<subpackage>` names a module imports (at module level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found |= {name.split(".")[1] for name in names if name.startswith("common.")}
    return found


def test_imports_only_go_down():
    upward = []
    for path in COMMON.rglob("*.py"):
        package = path.relative_to(COMMON).parts[0]
        if package not in LAYERS:
            continue
        for imported in imports_of(path) - {package}:
            if LAYERS[imported] >= LAYERS[package]:
                upward.append(f"{path.relative_to(COMMON.parent)} imports common.{imported}")
    assert not upward, "\n".join(sorted(upward))


# common.core's own subpackages, by job, whose imports only go down as well.
CORE_LAYERS = {"config": 0, "records": 1, "measure": 2, "run": 3, "train": 4}
# Modules whose layer is not their package's: files written whole (they import nothing of the
# suite), and the trainer's contract, which lives with the trainer but is made of config,
# measure and records types only, so that run/ can hand a trainer around.
CORE_MODULE_LAYERS = {"whole_files": -1, "train.contract": 2.5}


def _core_layer(name: str) -> float:
    """The layer of `common.core.<name>` ("run.resume", "train.contract", "whole_files")."""
    for module, layer in CORE_MODULE_LAYERS.items():
        if name == module or name.startswith(module + "."):
            return layer
    return CORE_LAYERS[name.split(".")[0]]


def test_common_core_is_grouped_by_job_and_its_imports_go_down():
    core = COMMON / "core"
    top = {path.stem for path in core.iterdir() if path.suffix == ".py"}
    assert top == {"__init__"} | {name for name in CORE_MODULE_LAYERS if "." not in name}
    assert {p.name for p in core.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(
        CORE_LAYERS
    )
    upward = []
    for path in core.rglob("*.py"):
        module = ".".join(path.relative_to(core).with_suffix("").parts)
        if module == "__init__":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                parts = name.split(".")
                if parts[:2] != ["common", "core"] or len(parts) < 3:
                    continue
                imported, here = _core_layer(".".join(parts[2:])), _core_layer(module)
                level = parts[2] == module.split(".")[0] and imported == here
                if not (imported < here or level):
                    upward.append(f"{path.relative_to(COMMON.parent)} imports {name}")
    assert not upward, "\n".join(sorted(set(upward)))


def test_common_imports_no_framework():
    modules = common_modules()
    assert {"common.core.config.config", "common.data.mnist", "common.launch.cluster"} <= set(
        modules
    )
    probe = (
        f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in ('torch', 'tensorflow', 'keras') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_reports_models_do_not_import_its_rendering():
    """common/report/ holds what the report says (runs, rows, groups, verdict); its render/
    subpackage how it looks. Only the way down is allowed."""
    upward = []
    for path in (COMMON / "report").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            names = [alias.name for alias in getattr(node, "names", [])]
            imported = [module or "", *(f"{module}.{n}" for n in names)] if module else names
            if any(name.startswith("common.report.render") for name in imported):
                upward.append(path.name)
    assert not upward, f"models of the report that import its rendering: {sorted(set(upward))}"
