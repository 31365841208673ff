"""The TensorFlow side: MultiWorkerMirroredStrategy training on the shared `common` spine."""

import os

# TensorFlow's C++ INFO lines (oneDNN, CUDA stubs, gRPC) drown the run's own output; warnings
# and errors still show. A user who sets the variable keeps their choice.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
# TensorFlow's oneDNN CPU kernels, which torch's convolutions use too: the pip build turns them
# on by itself only on processors with AVX-512 and the like, and leaves the rest on Eigen's
# kernels. On a Zen 3 host (AVX2) the CNN trained 1.08x faster with them and evaluated 1.7x
# faster (docs/performance.md). Set before TensorFlow is imported; a user's 0 still wins, and
# run_start's numerics name the kernels that ran (`cpu_kernels`).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
