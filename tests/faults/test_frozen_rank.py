"""A rank stuck in the kernel (frozen with the cgroup freezer: state D, as on a hung NFS mount)
is seen through the ranks' beacons, not through its process state: the launcher names it, not
the healthy rank that only noticed, and does not wait for it to wake before it ends the launch
(SIGKILL waits for a frozen process), on both frameworks."""

import os
import time
from pathlib import Path

import pytest

from tests.faults.test_lost_ranks import TIMEOUT_S, launched_mid_training, one_end, rank_pid

FREEZER = Path("/sys/fs/cgroup/freezer")
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not (FREEZER / "freezer.state").exists() and not FREEZER.is_dir(),
    reason="freezing a process needs root and the cgroup v1 freezer",
)


class Frozen:
    """A cgroup of the freezer of this test's own, holding one process, frozen until `thaw`."""

    def __init__(self, pid: int, name: str) -> None:
        self.group = FREEZER / name
        self.group.mkdir()
        (self.group / "cgroup.procs").write_text(str(pid))  # every thread of it
        (self.group / "freezer.state").write_text("FROZEN")
        deadline = time.monotonic() + 10
        while (self.group / "freezer.state").read_text().strip() != "FROZEN":
            assert time.monotonic() < deadline, "the freezer did not freeze the rank"
            time.sleep(0.05)

    def thaw(self) -> None:
        (self.group / "freezer.state").write_text("THAWED")
        deadline = time.monotonic() + 30
        while (self.group / "tasks").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.1)  # the rank dies once thawed (SIGKILL is pending)
        for task in (self.group / "tasks").read_text().split():
            (FREEZER / "cgroup.procs").write_text(task)
        self.group.rmdir()


@pytest.mark.parametrize("module", ["torch_impl.train", "tf_impl.train"])
def test_a_rank_frozen_in_the_kernel_is_named_and_not_waited_for(module, tmp_path):
    # grace 1 s: the chief has left after its collective's timeout, the frozen rank cannot act
    launcher, run_dir = launched_mid_training(module, tmp_path, grace=1)
    victim = rank_pid(launcher, 1)
    frozen = Frozen(victim, f"suite-test-{os.getpid()}-{module}")
    try:
        frozen_at = time.monotonic()
        _, stderr = launcher.communicate(timeout=TIMEOUT_S + 90)
        took = time.monotonic() - frozen_at
    finally:
        launcher.kill()
        frozen.thaw()
    assert launcher.returncode == 1, stderr
    lines = stderr.strip().splitlines()
    assert lines[-1].startswith(f"[launch] rank 1 (host {os.uname().nodename}, pid {victim}) "), (
        lines[-1]
    )
    assert "stopped answering" in lines[-1] and "rank 0 only noticed it" in lines[-1], lines[-1]
    assert any(f"rank 1 (pid {victim}) did not exit after SIGKILL" in line for line in lines), (
        stderr
    )
    assert took < TIMEOUT_S + 60, took
    assert one_end(run_dir)["error"].startswith("rank 1 ("), one_end(run_dir)["error"]
