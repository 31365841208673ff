import pytest

from tests.launching import runner


@pytest.fixture
def run_tf(tmp_path):
    """Run tf_impl.train for real; return (completed process, run folder)."""
    return runner("tf_impl.train", tmp_path)
