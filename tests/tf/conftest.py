import pytest

from tests import run_store
from tests.launching import runner

PARITY = ["--config", "configs/parity_sgd.yaml"]
PARITY_SET = ["data.train_limit=3200", "data.test_limit=1000", "output.save_model=true"]


@pytest.fixture
def run_tf(tmp_path):
    """Run tf_impl.train for real; return (completed process, run folder)."""
    return runner("tf_impl.train", tmp_path, warm=True)


@pytest.fixture(scope="session")
def parity_runs(tmp_path_factory):
    """The parity preset (MLP, no dropout, SGD, 50 steps of 64) on both frameworks, 1 and 2
    processes each, from the session's store (made once for both workers): read by
    tests/tf/test_distributed.py (parity, golden curve, weights) and tests/tf/test_compile.py
    (XLA's curve and compile time against these)."""
    return {
        name: run_store.run(
            tmp_path_factory, module, name, nproc, *PARITY_SET, *extra, extra=PARITY, small=False
        )
        for name, module, nproc, extra in (
            ("torch-single", "torch_impl.train", 0, ("torch.strategy=single",)),
            ("torch-ddp", "torch_impl.train", 2, ("torch.strategy=ddp",)),
            ("tf-w1", "tf_impl.train", 0, ()),
            ("tf-w2", "tf_impl.train", 2, ()),
        )
    }
