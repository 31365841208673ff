import pytest

from tests.launching import SMALL, runner
from tests.launching import train_command as _train_command

__all__ = ["SMALL", "train_command"]


def train_command(nproc: int, overrides: list[str], extra: list[str]) -> list[str]:
    """Ranks forked warm (tests/warm_ranks.py): the torch tests' subject is training."""
    return _train_command("torch_impl.train", nproc, overrides, extra, warm=True)


@pytest.fixture
def run_torch(tmp_path):
    """Run torch_impl.train for real; return (completed process, run folder)."""
    return runner("torch_impl.train", tmp_path, warm=True)
