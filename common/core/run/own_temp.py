"""A training process's own temporary folder, removed as it leaves.

The training programs leave with `os._exit` (`common.core.train.main`), which runs no atexit
handler. TensorFlow's AutoGraph writes the source of every function it converts to a file in
the temporary folder and removes it from an atexit handler
(tensorflow/python/autograph/pyct/loader.py), so every TensorFlow run left its
`__autograph_generated_file*.py` files (eight for a plain run) in /tmp, thousands over a sweep
or a test session. The TensorFlow side takes a folder of its own under the temporary folder
(TMPDIR, else /tmp) for what the process writes there, and leaving removes it. A process killed
outright (SIGKILL) leaves that one folder, named after its pid.

torch's side keeps the shared temporary folder: Inductor's and Triton's compile caches live
there (torchinductor_<user>), and they are meant to outlive a run.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

_taken: str | None = None


def take() -> str:
    """Point `tempfile` at a new folder of this process's own, under TMPDIR (read now: a rank
    forked from a warm process may have another TMPDIR than its parent had); return it. A
    process that ends without `os._exit` removes it at exit."""
    global _taken
    if _taken is None:
        tempfile.tempdir = None  # read TMPDIR again
        _taken = tempfile.mkdtemp(prefix=f"suite-rank-{os.getpid()}-")
        tempfile.tempdir = _taken
        atexit.register(give_back)
    return _taken


def give_back() -> None:
    """Remove the folder `take` made, with what is in it (nothing if none was taken); `tempfile`
    goes back to the shared temporary folder."""
    global _taken
    if _taken is None:
        return
    shutil.rmtree(_taken, ignore_errors=True)
    tempfile.tempdir = None
    _taken = None
