"""Task plug-ins (ROS-free). ``get_task(name_or_path, robot, config)`` builds one.

A task says what is observed, what an action is and how it becomes joint motion, what is
rewarded and counted as success, how episodes start, and where demonstrations come from
(see base.Task). What a task IS (its object, start and goal distributions, horizon, expert,
reward, success predicates and config values) is declared in YAML: config/tasks/<name>.yaml
for the shipped tasks (spec.py: the schema and its validation; docs/tasks.md). How it runs
is a task kind's class (``spec.KINDS``). Add a task by adding a YAML file (a new kind: a
class in KINDS too).
"""
from __future__ import annotations

from pathlib import Path

from .base import EpisodeResult, ResetSample, Task, TaskError
from .spec import KINDS, TaskSpec, load_task_spec, shipped_spec, shipped_task_names, task_class

__all__ = ['EpisodeResult', 'KINDS', 'ResetSample', 'TASKS', 'Task', 'TaskError', 'TaskSpec',
           'get_task', 'load_task_spec', 'task_names', 'task_spec']

# kind -> (module, class, config class); the kinds a task YAML's ``task`` may name.
TASKS = KINDS


def task_names() -> list[str]:
    """The shipped tasks (config/tasks/*.yaml)."""
    return shipped_task_names()


def task_spec(name) -> TaskSpec:
    """The TaskSpec of ``name``: a shipped task, the path of a task YAML, or a TaskSpec
    (TaskError otherwise)."""
    if isinstance(name, TaskSpec):
        return name
    if name in task_names():
        return shipped_spec(name)
    if str(name).endswith(('.yaml', '.yml')) or Path(str(name)).is_file():
        return load_task_spec(name)
    raise TaskError(f'unknown task {name!r}; known tasks: {task_names()} (or a task '
                    f'YAML path)')


def get_task(name: str, robot, config: dict | None = None) -> Task:
    """The task ``name`` (a shipped task, or the path of a task YAML) for ``robot`` (a
    RobotDescription), its spec's config under ``config`` (a dict of overrides)."""
    spec = task_spec(name)
    return task_class(spec.task)(robot, config, spec)
