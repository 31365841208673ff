"""common/ is the framework-free spine: importing all of it loads neither torch nor TensorFlow."""

import pkgutil
import subprocess
import sys

import common


def test_common_imports_no_framework():
    modules = [f"common.{info.name}" for info in pkgutil.iter_modules(common.__path__)]
    assert {"common.config", "common.data", "common.cluster", "common.metrics"} <= set(modules)
    probe = (
        f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in ('torch', 'tensorflow', 'keras') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
