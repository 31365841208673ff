"""Epochs taken in turn with another process: how the bench (`common.tools.bench`) sets a launched
run beside its framework's plain loop. Both start together, joined by a socket (the training
programs' `--in-turn FD`, the plain loops' own), and each waits for the other's epoch, its
evaluation included, before it starts its own, so that a slow spell of a shared host falls on
both alike and neither's epoch runs beside the other's. A turn is one byte. The plain loop goes
first, and waits once more after its last pass, so that its exit does not run beside the
launched run's last epoch. A process whose partner is gone (its end closed) goes on alone.
"""

from __future__ import annotations

import socket

from common.core.config.cli import check_socket


class Turns:
    """This process's end of the socket (None: no partner, every call does nothing)."""

    def __init__(self, fd: int | None = None) -> None:
        if fd is not None:
            check_socket(fd)
        self.end = socket.socket(fileno=fd) if fd is not None else None

    def wait(self) -> None:
        """Return once the partner gives the turn; at once when it is gone (from then on alone)."""
        if self.end is None:
            return
        try:
            given = self.end.recv(1)
        except OSError:
            given = b""
        if not given:
            self.close()

    def give(self) -> None:
        """Hand the turn to the partner (nothing when it is gone)."""
        if self.end is None:
            return
        try:
            self.end.sendall(b".")
        except OSError:
            self.close()

    def close(self) -> None:
        if self.end is not None:
            self.end.close()
            self.end = None
