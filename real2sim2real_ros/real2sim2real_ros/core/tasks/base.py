"""What a task plug-in provides (ROS-free): reset distribution, observation, action, reward,
success, how an action becomes joint motion, and where demonstrations come from.

A task runs an *episode* on a backend (core/tasks/worlds.py: a twin or an emulated cell):
``reset`` draws the start (object pose, goal), ``run_episode`` executes a policy and returns
an :class:`EpisodeResult`. One-shot tasks (slide_to_target) take one action per episode;
closed-loop tasks (push_to_pose) one per control tick.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np


class TaskError(ValueError):
    """Bad task input (unknown task, malformed config, action of the wrong shape)."""


@dataclass
class ResetSample:
    """One episode's start: the object's pose on the table and the goal."""
    object_xy: np.ndarray          # m, world frame
    object_yaw: float              # rad
    goal_xy: np.ndarray            # m
    goal_yaw: float = 0.0          # rad (push_to_pose only)
    extra: dict = field(default_factory=dict)   # task-specific (disturbances, ...)


@dataclass
class EpisodeResult:
    """One episode's outcome: success, reward, final error (m), observations, actions and the
    object's final pose."""
    success: bool
    reward: float
    final_error: float             # m, distance of the object to the goal at the end
    observations: np.ndarray       # (n_steps, obs_dim)
    actions: np.ndarray            # (n_steps, action_dim)
    final_object_xy: np.ndarray
    final_object_yaw: float
    info: dict = field(default_factory=dict)


Policy = Callable[[np.ndarray], np.ndarray]   # observation -> action (deterministic)


@runtime_checkable
class Task(Protocol):
    """What a task plug-in provides: spaces, resets, observations, reward, success,
    episodes, demos."""
    name: str
    object_id: str
    observation_dim: int
    action_dim: int
    action_low: np.ndarray
    action_high: np.ndarray
    one_shot: bool

    def sample_reset(self, rng: np.random.Generator) -> ResetSample:
        """A random episode start (object pose, goal) drawn from ``rng``."""

    def observation(self, state: dict) -> np.ndarray:
        """The observation vector for task state ``state``."""

    def reward(self, state: dict, action: np.ndarray) -> float:
        """The reward for ``action`` in state ``state``."""

    def success(self, state: dict) -> bool:
        """True when ``state`` meets the task's goal."""

    def run_episode(self, world, reset: ResetSample, policy: Policy) -> EpisodeResult:
        """Run ``policy`` from ``reset`` in ``world`` to the episode's end."""

    def scripted_demo_policy(self, reset: ResetSample, rng: np.random.Generator) -> Policy:
        """The scripted demonstrator's policy for the episode starting at ``reset``."""

    def config(self) -> dict:
        """The task's settings as a JSON-ready dict (with its name)."""


def task_config(config_cls, config, task_name: str):
    """A task's config from a dataclass instance, a dict of its fields, or None (defaults)."""
    if isinstance(config, dict):
        try:
            return config_cls(**config)
        except TypeError as exc:
            raise TaskError(f'{task_name} config: {exc}') from None
    return config or config_cls()


def check_action(task: Task, action) -> np.ndarray:
    """The action as a clipped float array of the task's action size (TaskError otherwise)."""
    a = np.asarray(action, float).reshape(-1)
    if a.shape != (task.action_dim,) or not np.all(np.isfinite(a)):
        raise TaskError(f'{task.name}: action must be {task.action_dim} finite numbers, '
                        f'got {np.asarray(action).tolist()}')
    return np.clip(a, task.action_low, task.action_high)
