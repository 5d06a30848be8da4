"""The one error type a bad launch file, launch argument or missing file raises.

The runner turns it into ONE line on stderr and exit code 2, before any process starts.
"""
from __future__ import annotations


class LaunchError(Exception):
    """A launch file, launch argument or referenced file is unusable; the message names it."""

    def __init__(self, message: str, where: str | None = None) -> None:
        self.where = where
        super().__init__(f'{where}: {message}' if where else message)


# Exit codes of the runner (and of ``main``).
EXIT_OK = 0  # every node exited 0, or a clean shutdown on request / signal
EXIT_NODE_FAILED = 1  # a node failed (non-zero exit, or a required node died)
EXIT_BAD_INPUT = 2  # bad launch file or arguments; nothing was started
