import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

# Runs under test measure the machine's GEMM peak while other tests load it: their figures go to
# a cache of the session's own (inherited by every launched rank), never to the user's.
os.environ["SUITE_CACHE_DIR"] = tempfile.mkdtemp(prefix="dist-mnist-test-cache-")
atexit.register(shutil.rmtree, os.environ["SUITE_CACHE_DIR"], ignore_errors=True)


@pytest.fixture(scope="session")
def digits():
    """Real MNIST (make test fetches it first); a clear failure, never a skip, without it."""
    from common.data import mnist

    try:
        return mnist.load_mnist()
    except mnist.DataError as error:
        pytest.fail(f"real MNIST is needed: {error}")
