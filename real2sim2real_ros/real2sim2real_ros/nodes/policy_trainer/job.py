"""One policy_trainer goal's worker state and the error that ends it with a result code."""
from __future__ import annotations

import threading

MAX_EVAL_TRIALS = 100_000   # trials per evaluate goal (and the eval_trials parameter)
MAX_TRAIN_STEPS = 100_000_000   # total_steps per train goal
MAX_DEMO_BAGS = 1000        # demo_bags per train goal
CANCEL_GRACE = 5.0       # s the action waits for the worker after a cancel request
SCENE_GRACE = 3.0        # s after start-up during which a goal waits for a latched scene


class GoalFailed(Exception):
    """Ends the running goal with ``code`` (the action's result code) and ``message``."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message


class Job:
    """One goal's worker: cancel flag in, outcome out."""

    def __init__(self, goal_handle):
        self.goal_handle = goal_handle
        self.cancel = threading.Event()
        self.done = threading.Event()
        self.code, self.message, self.result = 0, '', None
