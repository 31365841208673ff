"""The SLURM test cluster's links carry jumbo frames (slurm/testcluster_links.py, MTU): a bulk TCP
transfer between two nodes over shaped links (where tc's tbf cuts the kernel's large segments
into frames of the MTU) crosses a node's veth in packets of several kB, not Ethernet's 1,500
bytes, so the kernel's work per packet (softirq, charged to no node's CPU quota) stays a small
share of the host however many nodes send at once."""

import subprocess
import sys

import pytest

from tests.slurm.jobs import REPO, ROOT_ONLY, slurm_env

sys.path.insert(0, str(REPO / "slurm"))
import testcluster_links  # noqa: E402 - the cluster's own module, beside its script

pytestmark = ROOT_ONLY
SENT = 16 << 20  # bytes n2 sends n1
RATE = "400mbit"  # shaped, as the projection's check shapes them: a third of a second
# task 0 (on n1) takes what task 1 (on n2) sends, until it has all of it
TRANSFER = f"""
import os, socket, time
port, sent = 47321, {SENT}
if os.environ["SLURM_PROCID"] == "0":
    server = socket.create_server(("", port))
    peer, _ = server.accept()
    got = 0
    while got < sent:
        got += len(peer.recv(1 << 20))
    peer.sendall(b"k")
else:
    deadline = time.monotonic() + 30
    while True:
        try:
            peer = socket.create_connection(("n1", port))
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    peer.sendall(bytes(sent))
    assert peer.recv(1) == b"k"
"""


@pytest.mark.parametrize("cluster", [2], indirect=True)
def test_a_bulk_transfer_crosses_the_links_in_jumbo_frames(cluster, tmp_path):
    command = ["srun", "--nodes=2", "--ntasks-per-node=1", "--job-name=mtu", "--time=2"]
    command += [sys.executable, "-c", TRANSFER]
    testcluster_links.shape(["n1", "n2"], RATE)
    try:
        before = testcluster_links.counters(["n2"])["n2"]
        done = subprocess.run(
            command, env=slurm_env(tmp_path), capture_output=True, text=True, timeout=120
        )
        after = testcluster_links.counters(["n2"])["n2"]
    finally:
        testcluster_links.shape(["n1", "n2"], "off")
    assert done.returncode == 0, done.stdout + done.stderr
    sent = after["sent_bytes"] - before["sent_bytes"]
    packets = after["sent_packets"] - before["sent_packets"]
    assert sent >= SENT, f"n2's veth counted {sent:,} B of {SENT:,}"
    assert sent / packets > 4_000, f"{sent / packets:,.0f} B a packet: the links' MTU is small"
