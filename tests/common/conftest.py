"""Fixtures of the tier's files that drive runs in this process."""

import signal

import pytest


@pytest.fixture(autouse=True)
def keep_signal_handlers():
    """A run's execute() installs its signal handlers; give pytest its own back afterwards."""
    saved = {
        s: signal.getsignal(s)
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGCHLD)
    }
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)
