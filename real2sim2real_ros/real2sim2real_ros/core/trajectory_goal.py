"""FollowJointTrajectory goal semantics of ros2_control's joint_trajectory_controller, ROS-free.

What a JTC does with a control_msgs/action/FollowJointTrajectory goal, in plain Python (the
emulated cell's action server, ros/fjt_server.py, is a thin shell over it):

* **Goal check** (:func:`check_goal`) before acceptance: joint names must be the controller's
  (``INVALID_JOINTS``), tolerances must name controller joints and be >= 0 or -1
  (``INVALID_JOINTS`` / ``INVALID_GOAL``), a non-zero ``header.stamp`` start whose last point
  lies in the past is ``OLD_HEADER_TIMESTAMP``, anything the trajectory validation of
  core/joint_trajectory.py refuses (no points, times not increasing, sizes, limits) is
  ``INVALID_GOAL``. A refused goal raises :class:`GoalRefused` with the code and a message.
* **Tolerances** (:func:`resolve_tolerances`): the controller's configured defaults
  (JTC's ``constraints``: per joint ``trajectory`` = path position bound and ``goal`` = goal
  position bound, ``stopped_velocity_tolerance`` = goal velocity bound, ``goal_time``),
  overridden per goal: a goal entry of 0 keeps the default, -1 removes the bound, a positive
  value replaces it; a non-zero ``goal_time_tolerance`` replaces ``goal_time``. A bound of 0
  after resolution is not checked. Acceleration bounds are accepted but cannot be checked
  (the measured state has no acceleration).
* **Monitoring** (:class:`GoalMonitor`): fed the reference and the measured state at each
  controller update. While the trajectory runs (start <= t < end) every path bound must hold,
  else ``PATH_TOLERANCE_VIOLATED``. From the end on, the goal succeeds (``SUCCESSFUL``) at the
  first update where every goal bound holds; if ``goal_time`` > 0 and it has not by
  end + goal_time, ``GOAL_TOLERANCE_VIOLATED``; with ``goal_time`` 0 it waits indefinitely
  (JTC's documented behaviour). Both violations mean the controller holds position.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

SUCCESSFUL = 0
INVALID_GOAL = -1
INVALID_JOINTS = -2
OLD_HEADER_TIMESTAMP = -3
PATH_TOLERANCE_VIOLATED = -4
GOAL_TOLERANCE_VIOLATED = -5
ERROR_NAMES = {SUCCESSFUL: 'SUCCESSFUL', INVALID_GOAL: 'INVALID_GOAL',
               INVALID_JOINTS: 'INVALID_JOINTS', OLD_HEADER_TIMESTAMP: 'OLD_HEADER_TIMESTAMP',
               PATH_TOLERANCE_VIOLATED: 'PATH_TOLERANCE_VIOLATED',
               GOAL_TOLERANCE_VIOLATED: 'GOAL_TOLERANCE_VIOLATED'}


def error_name(code: int) -> str:
    """FollowJointTrajectory.Result error_code -> its constant's name (or the number)."""
    return ERROR_NAMES.get(int(code), f'error_code {int(code)}')


class GoalRefused(ValueError):
    """A goal the controller does not take; ``code`` is the FollowJointTrajectory code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Bound:
    """One joint's bounds (rad, rad/s, rad/s^2); 0 = not checked."""
    position: float = 0.0
    velocity: float = 0.0
    acceleration: float = 0.0


@dataclass(frozen=True)
class ToleranceEntry:
    """One JointTolerance entry of a goal: 0 = keep the default, -1 = no bound."""
    name: str
    position: float = 0.0
    velocity: float = 0.0
    acceleration: float = 0.0


@dataclass
class ControllerConstraints:
    """The controller's configured defaults (JTC's ``constraints`` parameters)."""
    path: dict[str, Bound] = field(default_factory=dict)
    goal: dict[str, Bound] = field(default_factory=dict)
    goal_time: float = 0.0


@dataclass
class Tolerances:
    """Resolved bounds for one goal, in the controller's joint order."""
    joint_names: list[str]
    path: list[Bound]
    goal: list[Bound]
    goal_time: float


def _entry_value(default: float, given: float, what: str) -> float:
    if not math.isfinite(given):
        raise GoalRefused(INVALID_GOAL, f'{what} = {given} is not finite')
    if given == 0.0:
        return default
    if given == -1.0:
        return 0.0
    if given < 0.0:
        raise GoalRefused(INVALID_GOAL, f'{what} = {given}: a tolerance is >= 0, or -1 for '
                          f'"no bound"')
    return given


def resolve_tolerances(joint_names: list[str], defaults: ControllerConstraints,
                       path_tolerance: list[ToleranceEntry] = (),
                       goal_tolerance: list[ToleranceEntry] = (),
                       goal_time_tolerance: float = 0.0) -> Tolerances:
    """The bounds one goal runs under (GoalRefused for unknown joints or bad values)."""
    def merged(base: dict[str, Bound], entries, kind: str) -> list[Bound]:
        out = {j: base.get(j, Bound()) for j in joint_names}
        for e in entries:
            if e.name not in out:
                raise GoalRefused(INVALID_JOINTS, f'{kind}_tolerance names joint {e.name!r}, '
                                  f'which is not a controller joint {list(joint_names)}')
            b = out[e.name]
            out[e.name] = Bound(
                _entry_value(b.position, e.position, f'{kind}_tolerance[{e.name}].position'),
                _entry_value(b.velocity, e.velocity, f'{kind}_tolerance[{e.name}].velocity'),
                _entry_value(b.acceleration, e.acceleration,
                             f'{kind}_tolerance[{e.name}].acceleration'))
        return [out[j] for j in joint_names]

    if not math.isfinite(goal_time_tolerance) or goal_time_tolerance < 0:
        raise GoalRefused(INVALID_GOAL, f'goal_time_tolerance = {goal_time_tolerance} s must '
                          f'be finite and >= 0')
    return Tolerances(list(joint_names), merged(defaults.path, path_tolerance, 'path'),
                      merged(defaults.goal, goal_tolerance, 'goal'),
                      goal_time_tolerance if goal_time_tolerance > 0 else defaults.goal_time)


def check_goal(controller_joints: list[str], goal_joints: list[str], n_points: int,
               start_time: float | None, last_time_from_start: float, now: float) -> None:
    """The structural checks JTC makes before a goal is considered (GoalRefused if any fails).

    ``start_time`` is the header stamp on the controller's clock (None/0 = now); the rest of
    the trajectory is checked by core/joint_trajectory.validate_trajectory (INVALID_GOAL)."""
    if not goal_joints:
        raise GoalRefused(INVALID_JOINTS, 'the trajectory names no joints')
    if len(set(goal_joints)) != len(goal_joints):
        raise GoalRefused(INVALID_JOINTS, f'joint_names has duplicates: {list(goal_joints)}')
    unknown = [j for j in goal_joints if j not in controller_joints]
    missing = [j for j in controller_joints if j not in goal_joints]
    if unknown or missing:
        raise GoalRefused(INVALID_JOINTS, (
            f'joints {unknown} are not controller joints' if unknown else
            f'joints {missing} missing (this controller takes no partial goals)')
            + f'; controller joints: {list(controller_joints)}')
    if n_points == 0:
        raise GoalRefused(INVALID_GOAL, 'the trajectory has no points')
    if start_time and start_time + last_time_from_start < now:
        raise GoalRefused(OLD_HEADER_TIMESTAMP, (
            f'the trajectory starts at {start_time:.3f} s and ends '
            f'{now - start_time - last_time_from_start:.3f} s before now ({now:.3f} s)'))


@dataclass(frozen=True)
class Outcome:
    """How a goal ended: FollowJointTrajectory error_code and error_string."""
    code: int
    message: str

    @property
    def succeeded(self) -> bool:
        """True when the goal's outcome code is SUCCESSFUL."""
        return self.code == SUCCESSFUL


class GoalMonitor:
    """Watches one accepted goal; ``update`` returns an Outcome once it is decided."""

    def __init__(self, tolerances: Tolerances, start_time: float, end_time: float,
                 unit: str = 'rad'):
        self.tol, self.unit = tolerances, unit     # the joints' unit: 'rad' or 'm'
        self.start_time = float(start_time)
        self.end_time = float(end_time)
        n = len(tolerances.joint_names)
        self._path_p = np.array([b.position for b in tolerances.path]).reshape(n)
        self._path_v = np.array([b.velocity for b in tolerances.path]).reshape(n)
        self._goal_p = np.array([b.position for b in tolerances.goal]).reshape(n)
        self._goal_v = np.array([b.velocity for b in tolerances.goal]).reshape(n)

    def _first_violation(self, err_p, err_v, bound_p, bound_v) -> str | None:
        for err, bound, what, unit in ((err_p, bound_p, 'position', self.unit),
                                       (err_v, bound_v, 'velocity', f'{self.unit}/s')):
            bad = (bound > 0) & ~(np.abs(err) <= bound)
            if bad.any():
                j = int(np.argmax(bad))
                return (f'joint {self.tol.joint_names[j]!r} {what} error {err[j]:+.4f} {unit} '
                        f'outside the tolerance {bound[j]:.4f} {unit}')
        return None

    def update(self, t: float, ref_p, ref_v, meas_p, meas_v) -> Outcome | None:
        """One controller update at time ``t`` (controller clock); None while undecided."""
        if t < self.start_time:
            return None
        err_p = np.asarray(ref_p, float) - np.asarray(meas_p, float)
        err_v = np.asarray(ref_v, float) - np.asarray(meas_v, float)
        if t < self.end_time:
            problem = self._first_violation(err_p, err_v, self._path_p, self._path_v)
            if problem:
                return Outcome(PATH_TOLERANCE_VIOLATED, (
                    f'path tolerance violated at {t - self.start_time:.3f} s into the '
                    f'trajectory: {problem}; holding position'))
            return None
        problem = self._first_violation(err_p, err_v, self._goal_p, self._goal_v)
        if problem is None:
            return Outcome(SUCCESSFUL, '')
        late = t - self.end_time
        if self.tol.goal_time > 0 and late > self.tol.goal_time:
            return Outcome(GOAL_TOLERANCE_VIOLATED, (
                f'not within the goal tolerance {late:.3f} s after the trajectory ended '
                f'(goal_time_tolerance {self.tol.goal_time:.3f} s): {problem}; holding '
                f'position'))
        return None
