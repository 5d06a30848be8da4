"""The error that ends an identify goal with a result code (see node.error_code_for for the
core's exceptions)."""
from __future__ import annotations


class GoalFailed(Exception):
    """Ends the identify goal with ``code`` (an Identify.Result code) and ``message``."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message
