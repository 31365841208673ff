import atexit
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
# Every process a test starts imports the suite from this checkout: `python -m` puts its working
# folder first, the warm server tests/, and then a shared .venv's editable install would point
# at the checkout it was installed from (tests/common/test_checkout.py).
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(REPO_ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
)

# Runs under test measure the machine's GEMM peak while other tests load it: their figures go to
# a cache of the session's own (inherited by every launched rank), never to the user's. The xdist
# workers take their controller's, made before it starts them: a figure is probed once a session.
SESSION_CACHE = "SUITE_TEST_SESSION_CACHE"
if os.environ.get("PYTEST_XDIST_WORKER") and os.path.isdir(os.environ.get(SESSION_CACHE, "")):
    os.environ["SUITE_CACHE_DIR"] = os.environ[SESSION_CACHE]
else:
    os.environ["SUITE_CACHE_DIR"] = tempfile.mkdtemp(prefix="dist-mnist-test-cache-")
    os.environ[SESSION_CACHE] = os.environ["SUITE_CACHE_DIR"]
    atexit.register(shutil.rmtree, os.environ["SUITE_CACHE_DIR"], ignore_errors=True)


@pytest.fixture(scope="session")
def digits():
    """Real MNIST (make test fetches it first); a clear failure, never a skip, without it."""
    from common.data import mnist

    try:
        return mnist.load_mnist()
    except mnist.DataError as error:
        pytest.fail(f"real MNIST is needed: {error}")


STARTED = pytest.StashKey[tuple[str, float]]()


def pytest_configure(config):
    """The CPU tier (everything but `-m gpu`) runs on the CPU whatever the machine has: the
    tests mean gloo and CPU ranks, and 2 ranks on one GPU are refused. Every process they start
    inherits the hidden GPUs, TensorFlow's too. The GPU tier (make test-gpu) sees them."""
    wants_gpu = "gpu" in (config.option.markexpr or "") and "not gpu" not in config.option.markexpr
    if not wants_gpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    from tests.cost import Cost

    config.pluginmanager.register(Cost(config), "suite-cost")


def _controller(config) -> bool:
    """The controller of a run on xdist workers (make test): it runs no test itself (its
    session is registered by pytest-xdist's pytest_configure, which runs last)."""
    return config.pluginmanager.has_plugin("dsession")


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    """A SLURM test cluster that the first worker had no time to take down is taken down by the
    controller, once pytest-xdist has stopped its workers (10 s, then killed): a make test
    stopped mid-job (Ctrl-C, a timeout) leaves nothing behind. Another live run's is left."""
    if not _controller(session.config):
        return
    from tests.slurm.conftest import take_down_orphaned

    take_down_orphaned()


def pytest_addoption(parser):
    parser.addoption(
        "--lanes",
        action="store_true",
        help="with -n 2: the files of tests/lanes.py's SIDE (mostly waiting) run on the second "
        "worker beside the rest, each file on one worker (make test)",
    )
    parser.addoption(
        "--save-costs",
        action="store_true",
        help="write each file's measured wall seconds to tests/file_costs.json: the lanes' "
        "longest-first order on a checkout whose pytest cache is empty (a clean clone)",
    )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("lanes"):
        from tests.lanes import Lanes

        return Lanes(config, log)
    return None


def pytest_collection_modifyitems(config, items):
    """Mark every test of a file that starts processes (`tests.tiers`): make test-fast leaves
    them out."""
    from tests.tiers import starts_processes

    for item in items:
        if starts_processes(Path(str(item.fspath)).resolve()):
            item.add_marker(pytest.mark.processes)


def pytest_sessionstart(session):
    session.config.stash[STARTED] = (time.strftime("%Y-%m-%d %H:%M"), os.getloadavg()[0])
    if _controller(session.config):  # a timeout's SIGTERM stops the workers as Ctrl-C does
        signal.signal(signal.SIGTERM, _interrupt)
    elif hasattr(session.config, "workerinput"):
        # A stopped controller's workers end by a SIGINT to themselves (execnet, 5 s after it
        # asks), and their tests clean up on the KeyboardInterrupt (a frozen rank thawed, a
        # launch stopped). A job started in the background inherits SIGINT ignored, and then
        # the worker was killed with its tests' processes left behind.
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_unconfigure(config):
    """The last line of a test run: the machine and how loaded it was, so that a slow run
    explains itself (the suite's timings hold on the machine they came from)."""
    if STARTED not in config.stash:
        return
    from common.core.measure.peak import processor

    date, load = config.stash[STARTED]
    print(
        f"tests ran on {socket.gethostname()} ({processor() or 'unknown processor'}, "
        f"{os.cpu_count()} logical CPUs), {date}; load average {load:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end",
        flush=True,
    )
