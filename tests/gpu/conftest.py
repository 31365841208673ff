"""The GPU tier (`make test-gpu`, `pytest -m gpu`): every test here needs a GPU the framework
sees, and is skipped with that reason where there is none, so the CPU tier and CI are not
touched. tests/conftest.py leaves the GPUs visible only for a `-m gpu` session."""

import os

import pytest

pytest.register_assert_rewrite("tests.gpu.checks")


def pytest_collection_modifyitems(config, items):
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES") == ""  # tests/conftest.py: the CPU tier
    for item in items:
        if "tests/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)
            if hidden:
                item.add_marker(pytest.mark.skip(reason="the GPU tier runs with make test-gpu"))


@pytest.fixture(scope="session")
def torch_gpus() -> int:
    torch = pytest.importorskip("torch")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        pytest.skip("torch sees no GPU (run the GPU tier on a GPU machine: make test-gpu)")
    return count


@pytest.fixture(scope="session")
def tf_gpus() -> int:
    tf = pytest.importorskip("tensorflow")
    count = len(tf.config.list_physical_devices("GPU"))
    if count == 0:
        pytest.skip("TensorFlow sees no GPU (its CUDA build: pip install 'tensorflow[and-cuda]')")
    return count
