import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


@pytest.fixture(scope="session")
def mnist():
    """Real MNIST (make test fetches it first); a clear failure, never a skip, without it."""
    from common import data

    try:
        return data.load_mnist()
    except data.DataError as error:
        pytest.fail(f"real MNIST is needed: {error}")
