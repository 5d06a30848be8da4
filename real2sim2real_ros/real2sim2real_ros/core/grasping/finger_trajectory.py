"""The gripper's finger joint under a joint_trajectory_controller, ROS-free.

Some labs drive a parallel gripper with ros2_control's joint_trajectory_controller on its one
driven finger joint (``<gripper_controller>/follow_joint_trajectory``) instead of a gripper
action controller. This module is what the emulated cell's server for that case
(ros/gripper_jtc_server.py) and the executor's gripper backend (ros/gripper_backend.py, kind
``follow_joint_trajectory``) share:

* :func:`finger_goal` checks a FollowJointTrajectory goal for the finger: joint_names exactly
  the driven joint (INVALID_JOINTS otherwise, as JTC says it), one finite position per point
  inside the jaw's limits, times from start strictly increasing and the last > 0
  (INVALID_GOAL); the message names the field.
* :class:`FingerTrajectory` is the accepted goal: the reference the controller's tolerances
  are checked against (piecewise linear from the jaw's position at acceptance through the
  points) and the jaw command that follows it: the jaw servo to the last point at the speed
  that reaches it at its time (capped at the joint's velocity limit). A gripper goal is one
  point in practice; intermediate points shape only the checked reference.
* :func:`one_point` times the goal the executor sends: the target at ``speed``.

What a position-driven finger cannot carry is the effort: under a JTC the jaw squeezes with
what the hardware gives (the cell: ``gripper.max_effort``, 0 = the URDF effort limit). With
JTC's default constraints (goal bound 0 = unchecked) a jaw stalled on an object succeeds once
it stops; a goal bound set on the finger makes a grasp end GOAL_TOLERANCE_VIOLATED, as a real
JTC does.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..trajectory_goal import INVALID_GOAL, INVALID_JOINTS, GoalRefused
from .jaw import GripperJoints

MIN_DURATION = 0.05     # s, the shortest one-point goal the executor sends


@dataclass(frozen=True)
class FingerTrajectory:
    """An accepted finger goal (module docstring): times from start (s, increasing) and
    positions (m) of its points, from ``start_position`` at ``start_time``."""

    times: tuple[float, ...]
    positions: tuple[float, ...]
    start_position: float
    start_time: float

    @property
    def end_time(self) -> float:
        """When the last point is due (controller clock, s)."""
        return self.start_time + self.times[-1]

    @property
    def target(self) -> float:
        """The last point's position (m)."""
        return self.positions[-1]

    def speed(self, max_velocity: float) -> float:
        """The jaw speed (m/s) that reaches the last point at its time, capped."""
        need = abs(self.target - self.start_position) / self.times[-1]
        return float(min(max(need, 1e-6), max_velocity))

    def reference(self, t: float) -> tuple[float, float]:
        """(position m, velocity m/s) of the reference at controller time ``t``."""
        ts = np.array((0.0, *self.times))
        ps = np.array((self.start_position, *self.positions))
        s = t - self.start_time
        if s <= 0.0 or s >= ts[-1]:
            return float(ps[0] if s <= 0.0 else ps[-1]), 0.0
        k = int(np.searchsorted(ts, s, side='right')) - 1
        slope = (ps[k + 1] - ps[k]) / (ts[k + 1] - ts[k])
        return float(ps[k] + slope * (s - ts[k])), float(slope)


def finger_goal(joint_names, points, jaw: GripperJoints, start_position: float,
                start_time: float) -> FingerTrajectory:
    """A FollowJointTrajectory goal for the finger checked (module docstring): ``points`` are
    (positions, time_from_start s) pairs; GoalRefused with the JTC error code otherwise."""
    names = list(joint_names)
    if names != [jaw.joint]:
        raise GoalRefused(INVALID_JOINTS, f"joint_names: must be ['{jaw.joint}'] (this "
                          f'controller drives the finger joint only), got {names}')
    if not points:
        raise GoalRefused(INVALID_GOAL, 'points: the trajectory has no points')
    times, positions = [], []
    for k, (pos, t) in enumerate(points):
        pos = list(pos)
        if len(pos) != 1:
            raise GoalRefused(INVALID_GOAL, f'points[{k}].positions: give one value '
                              f'({jaw.joint}), got {len(pos)}')
        x, t = float(pos[0]), float(t)
        if not math.isfinite(x) or not jaw.lower - 1e-9 <= x <= jaw.upper + 1e-9:
            raise GoalRefused(INVALID_GOAL, f'points[{k}].positions[0]: {x} m is outside '
                              f'{jaw.joint} [{jaw.lower}, {jaw.upper}]')
        if not math.isfinite(t) or t <= (times[-1] if times else 0.0):
            raise GoalRefused(INVALID_GOAL, f'points[{k}].time_from_start: {t} s must be '
                              'finite and after the previous point (the first after 0)')
        times.append(t)
        positions.append(x)
    return FingerTrajectory(tuple(times), tuple(positions), float(start_position),
                            float(start_time))


def one_point(position: float, speed: float, current: float) -> float:
    """The time from start (s) of the executor's one-point goal to ``position`` (m) at
    ``speed`` (m/s) from ``current`` (m), at least MIN_DURATION. ValueError when
    ``current`` is not known (no joint state for the finger yet): the time, and so the
    jaw's speed, would be a guess."""
    if not math.isfinite(current):
        raise ValueError('no joint state for the finger joint yet: a goal through its '
                         'joint_trajectory_controller needs the jaw position to set its speed')
    return max(abs(position - current) / speed, MIN_DURATION)
