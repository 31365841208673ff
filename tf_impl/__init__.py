"""The TensorFlow side: MultiWorkerMirroredStrategy training on the shared `common` spine."""

import os

# TensorFlow's C++ INFO lines (oneDNN, CUDA stubs, gRPC) drown the run's own output; warnings
# and errors still show. A user who sets the variable keeps their choice.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
