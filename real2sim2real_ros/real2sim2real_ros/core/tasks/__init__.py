"""Task plug-ins (ROS-free). ``get_task(name, robot, config)`` builds one by name.

A task says what is observed, what an action is and how it becomes joint motion, what is
rewarded and counted as success, how episodes start, and where demonstrations come from
(see base.Task). Register a new task by adding it to ``TASKS``.
"""
from __future__ import annotations

import importlib

from .base import EpisodeResult, ResetSample, Task, TaskError

__all__ = ['EpisodeResult', 'ResetSample', 'TASKS', 'Task', 'TaskError', 'get_task',
           'task_names']

# name -> (module, class); imported on demand so one broken task does not hide the others.
TASKS = {
    'slide_to_target': ('.slide_to_target', 'SlideToTarget'),
    'push_to_pose': ('.push_to_pose', 'PushToPose'),
}


def task_names() -> list[str]:
    """The registered task names, sorted."""
    return sorted(TASKS)


def get_task(name: str, robot, config: dict | None = None) -> Task:
    """The task ``name`` for ``robot`` (a RobotDescription), configured by ``config``."""
    if name not in TASKS:
        raise TaskError(f'unknown task {name!r}; known tasks: {task_names()}')
    module, cls = TASKS[name]
    return getattr(importlib.import_module(module, __name__), cls)(robot, config)
