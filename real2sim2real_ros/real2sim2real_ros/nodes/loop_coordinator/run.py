"""One run_loop goal's book-keeping and the two ways a stage ends early.

:class:`StageFailed` ends the goal with STAGE_FAILED naming the running stage, :class:`Canceled`
with CANCELED; :class:`LoopRun` holds what the stages leave for the summary (their records,
artifacts and success counts).
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from ...core import loop_plan as lp
from ...ros.goal_client import code_name


class StageFailed(Exception):
    """The running stage cannot finish: STAGE_FAILED with ``message``."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class Canceled(Exception):
    """The goal was canceled or the node is shutting down: CANCELED with ``message``."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def child_error(what: str, result) -> str:
    """'<what>: <CODE NAME> (<code>): <error_msg>' of a child goal's result."""
    return (f'{what}: {code_name(type(result), result.error_code)} ({result.error_code}): '
            f'{result.error_msg}')


def read_json(path) -> dict:
    """The JSON object in ``path``; {} when it is missing, unreadable or not an object."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class LoopRun:
    """One goal's book-keeping."""

    def __init__(self, goal_handle, task: str, run_dir: Path, plan):
        self.goal_handle = goal_handle
        self.task = task
        self.run_dir = run_dir
        self.plan = plan
        self.t0 = time.monotonic()
        self.started = time.time()
        self.done: list[str] = []
        self.stage = ''
        self.artifacts: dict[str, lp.Artifact] = {}
        self.records = {s.stage: {'stage': s.stage, 'status': 'not_run', 'seconds': 0.0,
                                  'artifact': '', 'reason': s.reason, 'detail': {}}
                        for s in plan}
        self.child = None                 # the running child goal's handle
        # Held while the stage changes and while a child's feedback is relayed: a late
        # feedback of a finished child is never published under the next stage's name.
        self.feedback_lock = threading.Lock()
        self.last_feedback = ('', 0.0)
        self.twin = None                  # SuccessCount dicts
        self.train_twin = None
        self.cell = None
