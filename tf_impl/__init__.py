"""The TensorFlow side: MultiWorkerMirroredStrategy training on the shared `common` spine."""

import importlib.abc
import os
import sys

# TensorFlow's C++ INFO lines (oneDNN, CUDA stubs, gRPC) drown the run's own output; warnings
# and errors still show. A user who sets the variable keeps their choice.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
# TensorFlow's oneDNN CPU kernels, which torch's convolutions use too: the pip build turns them
# on by itself only on processors with AVX-512 and the like, and leaves the rest on Eigen's
# kernels. On a Zen 3 host (AVX2) the CNN trained 1.08x faster with them and evaluated 1.7x
# faster (docs/performance.md). Set before TensorFlow is imported; a user's 0 still wins, and
# run_start's numerics name the kernels that ran (`cpu_kernels`).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


class _NoPlotsInTensorFlowsImport(importlib.abc.MetaPathFinder):
    """Keras imports matplotlib's pyplot while `import tensorflow` runs, for plotting helpers
    it guards with `except ImportError` and a training rank never calls: 0.73-0.79 s of CPU
    of TensorFlow's import on a 2-core host, paid by every rank. While TensorFlow or Keras is
    being imported, matplotlib is not found; any later import of it (compare.py's plots in the
    same process) finds it as usual."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.partition(".")[0] == "matplotlib" and any(
            getattr(getattr(sys.modules.get(top), "__spec__", None), "_initializing", False)
            for top in ("tensorflow", "keras")
        ):
            raise ModuleNotFoundError(f"{name}: not imported while TensorFlow is (tf_impl)")
        return None


if not any(isinstance(finder, _NoPlotsInTensorFlowsImport) for finder in sys.meta_path):
    sys.meta_path.insert(0, _NoPlotsInTensorFlowsImport())
