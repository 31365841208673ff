"""Ports chosen by launches running at once on one host (common.launch.ports), with real
processes: each launch holds its window while it runs."""

import subprocess
import sys

from common.launch import ports


def test_a_launch_does_not_choose_the_ports_another_running_launch_chose(monkeypatch):
    """Two launches of one host choosing ports the same moment: the first's window, free until
    its ranks listen, is held for it while it runs, so the second chooses another."""
    chooser = subprocess.Popen(
        [sys.executable, "-c", HOLDING], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        first = [int(port) for port in chooser.stdout.readline().split()]
        low, _ = ports.port_windows(ports.ephemeral_range())
        window = (first[0] - low) // ports.PORT_SPAN
        monkeypatch.setattr(ports.secrets, "randbelow", lambda _: window)  # the same start
        second = ports.free_ports(3)
        assert not set(first) & set(second), (first, second)
    finally:
        chooser.communicate("")  # it ends: its window is free again
    assert chooser.returncode == 0


HOLDING = """
import sys
from common.launch import ports
print(*ports.free_ports(3), flush=True)
sys.stdin.read()
"""
