"""How NCCL failures surface: as Python exceptions, so that every run ends with a run_end."""

from __future__ import annotations

from collections.abc import Mapping

# How a failed or timed-out NCCL collective must end: raised in Python, so that the run writes
# its run_end with the cause. torch's default (TORCH_NCCL_ASYNC_ERROR_HANDLING=3) tears the
# process down from the watchdog thread, and no `except` runs. Blocking wait makes `wait()`
# raise on timeout in the calling thread, and takes precedence over async error handling
# (pytorch PR 47926); 2 then only aborts the communicator, without killing the process
# (docs: torch_nccl_environment_variables.html). A value the user exported wins.
ERROR_SETTINGS = {"TORCH_NCCL_BLOCKING_WAIT": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"}


def error_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The NCCL error settings to add to `environ` (those it does not set yet)."""
    return {name: value for name, value in ERROR_SETTINGS.items() if name not in environ}
