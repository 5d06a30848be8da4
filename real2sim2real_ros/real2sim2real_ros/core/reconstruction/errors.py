"""Error codes of scene reconstruction (same names and values as Reconstruct.action)."""
from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """Reconstruction error codes (the Reconstruct action's error_code values)."""
    NONE = 0
    INVALID_CAPTURE = 1
    MISSING_INTRINSICS = 2
    NO_TABLE_PLANE = 3
    EMPTY_TABLE = 4
    OBJECTS_TOUCHING = 5
    OBJECT_OUT_OF_VIEW = 6
    INSUFFICIENT_DEPTH = 7
    WRITE_FAILED = 8
    CANCELED = 9


class ReconstructionError(RuntimeError):
    """Reconstruction failed for a reason the caller can act on; ``code`` is an ErrorCode."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(f'{code.name}: {message}')
        self.code = ErrorCode(code)
        self.message = message
