"""Gripper action goals with the semantics of ros2_control's gripper action controllers,
ROS-free (the emulated cell's ``<gripper_controller>/gripper_cmd`` server, ros/gripper_server.py,
is a thin shell over it).

* **Goal check** (:func:`parallel_goal` for control_msgs/action/ParallelGripperCommand,
  :func:`single_goal` for control_msgs/action/GripperCommand): one position for the jaw's
  driven joint (``command.name`` empty or exactly that joint), finite and within its limits;
  ParallelGripperCommand's optional ``velocity`` / ``effort`` (one value each, > 0) are the
  maximum speed and effort, GripperCommand's ``max_effort`` (0 = the controller's default).
  Positions are the driven joint's value, as both ros2_control controllers command it. A
  refused goal raises :class:`GripperGoalRefused` with one line naming the field.
* **Monitoring** (:class:`GripperMonitor`, the controllers' ``check_for_success``): fed the
  jaw's measured position and velocity at each controller update. Within ``goal_tolerance``
  of the goal: succeeded, ``reached_goal``. Not moving (speed below
  ``stall_velocity_threshold``) for ``stall_timeout``: ``stalled``, which succeeds with
  ``allow_stalling`` and aborts without it. A grasp always stalls (the object stops the jaw),
  so a gripper that grasps needs ``allow_stalling``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .jaw import GripperJoints

# How a lab's controller takes jaw goals: ros2_control's parallel_gripper_action_controller
# (control_msgs ParallelGripperCommand), gripper_action_controller (GripperCommand), or a
# joint_trajectory_controller on the finger joint (core/grasping/finger_trajectory.py).
ACTION_TYPES = ('parallel_gripper_command', 'gripper_command', 'follow_joint_trajectory')


class GripperGoalRefused(ValueError):
    """A gripper goal the controller does not take (the message names the field)."""


@dataclass(frozen=True)
class GripperGoal:
    """A checked goal: the jaw's target (m) and its optional limits (None = the default)."""

    position: float
    max_effort: float | None = None
    max_speed: float | None = None


@dataclass(frozen=True)
class MonitorSettings:
    """The controller's parameters (ros2_control's names and defaults but allow_stalling)."""

    goal_tolerance: float = 0.01            # m
    stall_velocity_threshold: float = 0.001  # m/s
    stall_timeout: float = 1.0              # s
    allow_stalling: bool = True


@dataclass(frozen=True)
class GripperOutcome:
    """How a goal ended: ``succeeded`` (else aborted), and the result flags."""

    succeeded: bool
    reached_goal: bool
    stalled: bool
    message: str


def _finite(value, field: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise GripperGoalRefused(f'{field}: must be a number, got {value!r}') from None
    if not math.isfinite(x):
        raise GripperGoalRefused(f'{field}: must be finite, got {value!r}')
    return x


def _position(value, jaw: GripperJoints, field: str) -> float:
    x = _finite(value, field)
    if not jaw.lower - 1e-9 <= x <= jaw.upper + 1e-9:
        raise GripperGoalRefused(f'{field}: {x} m is outside {jaw.joint} limits '
                                 f'[{jaw.lower}, {jaw.upper}]')
    return x


def _limit(values, field: str) -> float | None:
    values = list(values)
    if not values:
        return None
    if len(values) != 1:
        raise GripperGoalRefused(f'{field}: give one value (the driven joint), got '
                                 f'{len(values)}')
    x = _finite(values[0], f'{field}[0]')
    if not x > 0:
        raise GripperGoalRefused(f'{field}[0]: must be > 0, got {x}')
    return x


def parallel_goal(names, positions, velocities, efforts, jaw: GripperJoints) -> GripperGoal:
    """A ParallelGripperCommand goal's ``command`` (sensor_msgs/JointState fields) checked."""
    names, positions = list(names), list(positions)
    if names and names != [jaw.joint]:
        raise GripperGoalRefused(f"command.name: must be ['{jaw.joint}'] (or empty), got "
                                 f'{names}')
    if len(positions) != 1:
        raise GripperGoalRefused(f'command.position: give one value ({jaw.joint}), got '
                                 f'{len(positions)}')
    return GripperGoal(_position(positions[0], jaw, 'command.position[0]'),
                       _limit(efforts, 'command.effort'), _limit(velocities, 'command.velocity'))


def single_goal(position, max_effort, jaw: GripperJoints) -> GripperGoal:
    """A GripperCommand goal's ``command`` (position, max_effort; 0 = default) checked."""
    effort = _finite(max_effort, 'command.max_effort')
    if effort < 0:
        raise GripperGoalRefused(f'command.max_effort: must be >= 0 (0 = default), got '
                                 f'{effort}')
    return GripperGoal(_position(position, jaw, 'command.position'), effort or None)


class GripperMonitor:
    """The active goal's success / stall check (module docstring)."""

    def __init__(self, goal: GripperGoal, settings: MonitorSettings, start_time: float):
        self.goal, self.settings = goal, settings
        self._last_motion = start_time

    def update(self, t: float, position: float, velocity: float) -> GripperOutcome | None:
        """One controller update at time ``t`` (s); the outcome once the goal ends."""
        s = self.settings
        if abs(position - self.goal.position) < s.goal_tolerance:
            return GripperOutcome(True, True, False, '')
        if abs(velocity) > s.stall_velocity_threshold:
            self._last_motion = t
        elif t - self._last_motion > s.stall_timeout:
            msg = (f'stalled at {position:.4f} m, {abs(position - self.goal.position):.4f} m '
                   'from the goal')
            return GripperOutcome(s.allow_stalling, False, True,
                                  msg if s.allow_stalling else msg + ' (allow_stalling false)')
        return None
