"""Safety checks for executing joint trajectories: validation, tracking, stop ramps. ROS-free.

Start-state semantics follow ros2_control's JointTrajectoryController (JTC): the controller
interpolates from the state it is in when the trajectory arrives to the first point. So the
current position is an implicit point at t = 0 and the segment from it to the first point is
checked like every other segment. A first point at ``time_from_start == 0`` must already be
within ``start_tolerance`` of the current position (JTC would jump to it otherwise).

Interpolation between points is linear when no velocities are given (what JTC does) and cubic
Hermite when they are; the reference used to measure tracking error is the same.

Every check rejects, never clamps: a trajectory that fails is not sent and nothing moves.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

# Error kinds; the node maps them onto ExecuteTrajectory.Result error codes of the same names.
INVALID_TRAJECTORY = 'INVALID_TRAJECTORY'
JOINT_LIMIT_VIOLATION = 'JOINT_LIMIT_VIOLATION'
VELOCITY_LIMIT_VIOLATION = 'VELOCITY_LIMIT_VIOLATION'
WORKSPACE_VIOLATION = 'WORKSPACE_VIOLATION'

# Slack for floating-point round-off on limit comparisons (rad, rad/s, m).
_EPS = 1e-9


class TrajectoryViolation(Exception):
    """A trajectory failed validation. ``kind`` is one of the error kinds above."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


class SafetyConfigError(ValueError):
    """Limits, workspace or tolerances that cannot be used (names the field)."""


@dataclass(frozen=True)
class JointLimits:
    """Per-joint limits in the robot's joint order. Infinite position limits = continuous joint."""
    names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray

    def __post_init__(self):
        n = len(self.names)
        if n == 0:
            raise SafetyConfigError('joint limits: no joints')
        if len(set(self.names)) != n:
            raise SafetyConfigError(f'joint limits: duplicate joint names in {list(self.names)}')
        for attr in ('lower', 'upper', 'velocity'):
            arr = np.asarray(getattr(self, attr), dtype=float)
            if arr.shape != (n,):
                raise SafetyConfigError(f'joint limits: {attr} has shape {arr.shape}, want ({n},)')
            object.__setattr__(self, attr, arr)
        bad = np.flatnonzero(~(self.lower <= self.upper))
        if bad.size:
            j = bad[0]
            raise SafetyConfigError(f'joint limits: joint {self.names[j]!r} lower '
                                    f'{self.lower[j]} > upper {self.upper[j]}')
        bad = np.flatnonzero(~(self.velocity > 0))
        if bad.size:
            j = bad[0]
            raise SafetyConfigError(f'joint limits: joint {self.names[j]!r} velocity limit '
                                    f'{self.velocity[j]} must be > 0')

    @classmethod
    def from_robot(cls, robot, default_velocity: float = 1.0) -> JointLimits:
        """From an object with ``joint_names``, ``lower``, ``upper`` and velocity limits (common
        spellings accepted); a joint without a velocity limit (0/NaN) gets ``default_velocity``."""
        names = tuple(_attr(robot, 'joint_names', 'names'))
        lower = np.asarray(_attr(robot, 'lower', 'lower_limits', 'position_lower'), dtype=float)
        upper = np.asarray(_attr(robot, 'upper', 'upper_limits', 'position_upper'), dtype=float)
        vel = np.asarray(_attr(robot, 'velocity', 'velocity_limits', 'max_velocity'), dtype=float)
        vel = np.where(np.isfinite(vel) & (vel > 0), vel, default_velocity)
        return cls(names, lower, upper, vel)

    def as_dict(self) -> dict:
        return {n: {'lower': float(lo), 'upper': float(hi), 'velocity': float(v)}
                for n, lo, hi, v in zip(self.names, self.lower, self.upper, self.velocity)}


def _attr(obj, *names):
    for n in names:
        if hasattr(obj, n):
            return getattr(obj, n)
    raise SafetyConfigError(f'robot model has none of the attributes {names}')


@dataclass(frozen=True)
class Workspace:
    """Axis-aligned box (m, base frame) the tip must stay inside."""
    minimum: np.ndarray
    maximum: np.ndarray

    def __post_init__(self):
        lo = np.asarray(self.minimum, dtype=float)
        hi = np.asarray(self.maximum, dtype=float)
        if lo.shape != (3,) or hi.shape != (3,):
            raise SafetyConfigError(f'workspace: min/max need 3 values (x, y, z), got '
                                    f'{lo.tolist()} and {hi.tolist()}')
        if not np.all(np.isfinite(lo)) or not np.all(np.isfinite(hi)) or np.any(lo >= hi):
            raise SafetyConfigError(f'workspace: need finite min < max on every axis, got '
                                    f'min {lo.tolist()} max {hi.tolist()}')
        object.__setattr__(self, 'minimum', lo)
        object.__setattr__(self, 'maximum', hi)

    def contains(self, p) -> bool:
        p = np.asarray(p, dtype=float)
        return bool(np.all(p >= self.minimum - _EPS) and np.all(p <= self.maximum + _EPS))


@dataclass
class Trajectory:
    """A joint trajectory as plain arrays: ``times`` (N,) s from start, ``positions`` (N, J),
    optional ``velocities`` / ``accelerations`` (N, J)."""
    joint_names: tuple[str, ...]
    times: np.ndarray
    positions: np.ndarray
    velocities: np.ndarray | None = None
    accelerations: np.ndarray | None = None

    @property
    def duration(self) -> float:
        return float(self.times[-1]) if len(self.times) else 0.0


@dataclass
class ValidatedTrajectory:
    """What passed validation: the trajectory in the robot's joint order (what gets sent) and
    the reference the arm should follow (the current position prepended at t = 0 when the
    first point starts later, as JTC does)."""
    command: Trajectory
    reference: ReferenceTrajectory
    start_prepended: bool
    workspace_samples: int = 0


def validate_trajectory(
    traj: Trajectory,
    limits: JointLimits,
    current_position: Sequence[float] | None = None,
    *,
    velocity_scale: float = 1.0,
    fk: Callable[[np.ndarray], tuple] | None = None,
    workspace: Workspace | None = None,
    start_tolerance: float = 0.05,
    workspace_step: float = 0.05,
    max_points: int = 100_000,
) -> ValidatedTrajectory:
    """Check ``traj`` against ``limits`` and ``workspace``; raise TrajectoryViolation on the
    first problem, with a message naming the joint, the point index and the values.

    Position limits are checked at every point; the limit box is convex, so the linear segments
    between valid points stay inside it. Segment velocity is |Δq|/Δt; given point velocities are
    checked too; both against ``velocity * velocity_scale``. The tip (``fk(q)[0]``) is checked at
    every point and at samples along each segment no more than ``workspace_step`` rad apart on
    any joint. Point index -1 in messages is the implicit start point (the current position).
    """
    if not 0.0 < velocity_scale <= 1.0:
        raise SafetyConfigError(f'velocity_scale must be in (0, 1], got {velocity_scale}')
    if workspace is not None and fk is None:
        raise SafetyConfigError('workspace bounds given without a forward-kinematics function')
    names = tuple(traj.joint_names)
    order = _joint_order(names, limits.names)
    t = np.asarray(traj.times, dtype=float).reshape(-1)
    n = t.size
    if n == 0:
        raise TrajectoryViolation(INVALID_TRAJECTORY, 'trajectory has no points')
    if n > max_points:
        raise TrajectoryViolation(INVALID_TRAJECTORY,
                                  f'trajectory has {n} points, more than the {max_points} allowed')
    q = _points_array(traj.positions, n, names, 'positions', required=True)[:, order]
    v = _points_array(traj.velocities, n, names, 'velocities')
    a = _points_array(traj.accelerations, n, names, 'accelerations')
    v = None if v is None else v[:, order]
    a = None if a is None else a[:, order]

    _check_times(t)
    vmax = limits.velocity * velocity_scale
    _check_positions(q, limits)
    if v is not None:
        _check_point_velocities(v, vmax, limits.names)

    # The implicit start segment (JTC semantics).
    start_prepended = False
    ref_t, ref_q, ref_v = t, q, v
    if current_position is not None:
        q0 = np.asarray(current_position, dtype=float).reshape(-1)
        if q0.shape != (len(limits.names),) or not np.all(np.isfinite(q0)):
            raise TrajectoryViolation(INVALID_TRAJECTORY,
                                      f'current position {q0.tolist()} is not a finite vector '
                                      f'for joints {list(limits.names)}')
        if t[0] <= 0.0:
            gap = np.abs(q[0] - q0)
            j = int(np.argmax(gap))
            if gap[j] > start_tolerance:
                raise TrajectoryViolation(
                    INVALID_TRAJECTORY,
                    f'point 0 at time_from_start 0 is {gap[j]:.4f} rad from the current position '
                    f'on joint {limits.names[j]!r} ({q[0, j]:.4f} vs {q0[j]:.4f}; start tolerance '
                    f'{start_tolerance} rad): start at the current position or give the first '
                    f'point a time_from_start > 0')
        else:
            start_prepended = True
            ref_t = np.concatenate([[0.0], t])
            ref_q = np.vstack([q0, q])
            ref_v = None if v is None else np.vstack([np.zeros_like(q0), v])
    _check_segment_velocities(ref_t, ref_q, vmax, limits.names, offset=-1 if start_prepended else 0)

    samples = 0
    if workspace is not None:
        samples = _check_workspace(ref_q, fk, workspace, workspace_step,
                                   offset=-1 if start_prepended else 0)

    command = Trajectory(limits.names, t.copy(), q, v, a)
    reference = ReferenceTrajectory(ref_t, ref_q, ref_v)
    return ValidatedTrajectory(command, reference, start_prepended, samples)


def _joint_order(names, robot_names) -> list[int]:
    if len(set(names)) != len(names):
        raise TrajectoryViolation(INVALID_TRAJECTORY, f'duplicate joint names in {list(names)}')
    unknown = [n for n in names if n not in robot_names]
    if unknown:
        raise TrajectoryViolation(
            INVALID_TRAJECTORY, f'joints {unknown} are not joints of the robot {list(robot_names)}')
    missing = [n for n in robot_names if n not in names]
    if missing:
        raise TrajectoryViolation(INVALID_TRAJECTORY,
                                  f'trajectory does not command joints {missing} '
                                  f'(the robot has {list(robot_names)})')
    return [names.index(n) for n in robot_names]


def _points_array(values, n, names, what, required=False):
    j = len(names)
    if values is None or (not required and np.size(values) == 0):
        if required:
            raise TrajectoryViolation(INVALID_TRAJECTORY, f'trajectory has no {what}')
        return None
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise TrajectoryViolation(INVALID_TRAJECTORY, f'{what} are not numbers') from None
    if arr.shape != (n, j):
        raise TrajectoryViolation(INVALID_TRAJECTORY,
                                  f'{what} have shape {arr.shape}, want ({n} points, {j} joints)')
    bad = np.argwhere(~np.isfinite(arr))
    if bad.size:
        i, k = bad[0]
        raise TrajectoryViolation(
            INVALID_TRAJECTORY,
            f'{what} at point {i}, joint {names[k]!r}: {arr[i, k]} is not finite')
    return arr


def _check_times(t):
    if not np.all(np.isfinite(t)):
        i = int(np.flatnonzero(~np.isfinite(t))[0])
        raise TrajectoryViolation(INVALID_TRAJECTORY, f'time_from_start at point {i} is {t[i]}')
    if t[0] < 0:
        raise TrajectoryViolation(INVALID_TRAJECTORY,
                                  f'time_from_start at point 0 is negative ({t[0]} s)')
    dt = np.diff(t)
    if dt.size and np.any(dt <= 0):
        i = int(np.flatnonzero(dt <= 0)[0]) + 1
        raise TrajectoryViolation(INVALID_TRAJECTORY,
                                  f'time_from_start is not strictly increasing at point {i}: '
                                  f'{t[i - 1]:.6f} s then {t[i]:.6f} s')
    if t[-1] <= 0:
        raise TrajectoryViolation(INVALID_TRAJECTORY,
                                  'trajectory has zero duration (last time_from_start is 0)')


def _check_positions(q, limits: JointLimits):
    below = q < limits.lower - _EPS
    above = q > limits.upper + _EPS
    bad = np.argwhere(below | above)
    if bad.size:
        i, j = bad[0]
        raise TrajectoryViolation(
            JOINT_LIMIT_VIOLATION,
            f'joint {limits.names[j]!r} at point {i}: position {q[i, j]:.4f} rad is outside '
            f'its limits [{limits.lower[j]:.4f}, {limits.upper[j]:.4f}]')


def _check_point_velocities(v, vmax, names):
    bad = np.argwhere(np.abs(v) > vmax + _EPS)
    if bad.size:
        i, j = bad[0]
        raise TrajectoryViolation(
            VELOCITY_LIMIT_VIOLATION,
            f'joint {names[j]!r} at point {i}: velocity {v[i, j]:.4f} rad/s exceeds the limit '
            f'{vmax[j]:.4f} rad/s (URDF limit x velocity_limit_scale)')


def _check_segment_velocities(t, q, vmax, names, offset):
    if t.size < 2:
        return
    speed = np.abs(np.diff(q, axis=0)) / np.diff(t)[:, None]
    bad = np.argwhere(speed > vmax + _EPS)
    if bad.size:
        i, j = bad[0]
        a, b = i + offset, i + 1 + offset
        start = ' (point -1 is the current position)' if a < 0 else ''
        raise TrajectoryViolation(
            VELOCITY_LIMIT_VIOLATION,
            f'joint {names[j]!r} between points {a} and {b}: moving '
            f'{q[i + 1, j] - q[i, j]:+.4f} rad in {t[i + 1] - t[i]:.4f} s needs '
            f'{speed[i, j]:.4f} rad/s, over the limit {vmax[j]:.4f} rad/s{start}')


def _check_workspace(q, fk, ws: Workspace, step, offset) -> int:
    if step <= 0:
        raise SafetyConfigError(f'workspace_step must be > 0, got {step}')
    count = 0

    def check(qs, where):
        nonlocal count
        count += 1
        p = np.asarray(fk(qs)[0], dtype=float).reshape(3)
        if not ws.contains(p):
            axis = 'xyz'[int(np.argmax(np.maximum(ws.minimum - p, p - ws.maximum)))]
            raise TrajectoryViolation(
                WORKSPACE_VIOLATION,
                f'tip leaves the workspace {where}: tip at ({p[0]:.3f}, {p[1]:.3f}, {p[2]:.3f}) m, '
                f'bounds min {ws.minimum.round(3).tolist()} max {ws.maximum.round(3).tolist()} '
                f'(out on {axis}); joints {np.round(qs, 4).tolist()}')

    check(q[0], f'at point {offset}')
    for i in range(1, len(q)):
        n = max(1, int(math.ceil(float(np.max(np.abs(q[i] - q[i - 1]))) / step - 1e-9)))
        for k in range(1, n):
            s = k / n
            check(q[i - 1] + s * (q[i] - q[i - 1]),
                  f'between points {i - 1 + offset} and {i + offset} (at {s:.2f} of the segment)')
        check(q[i], f'at point {i + offset}')
    return count


class ReferenceTrajectory:
    """Where the arm should be at time t: linear between points, or cubic Hermite when point
    velocities are given (JTC's interpolation); held at the ends."""

    def __init__(self, times, positions, velocities=None):
        self.times = np.asarray(times, dtype=float)
        self.positions = np.asarray(positions, dtype=float)
        self.velocities = None if velocities is None else np.asarray(velocities, dtype=float)

    @property
    def duration(self) -> float:
        return float(self.times[-1])

    @property
    def final(self) -> np.ndarray:
        return self.positions[-1]

    def sample(self, t: float) -> np.ndarray:
        ts, qs = self.times, self.positions
        if t <= ts[0]:
            return qs[0].copy()
        if t >= ts[-1]:
            return qs[-1].copy()
        i = int(np.searchsorted(ts, t, side='right')) - 1
        h = ts[i + 1] - ts[i]
        s = (t - ts[i]) / h
        if self.velocities is None:
            return qs[i] + s * (qs[i + 1] - qs[i])
        v0, v1 = self.velocities[i], self.velocities[i + 1]
        h00 = 2 * s**3 - 3 * s**2 + 1
        h10 = s**3 - 2 * s**2 + s
        h01 = -2 * s**3 + 3 * s**2
        h11 = s**3 - s**2
        return h00 * qs[i] + h10 * h * v0 + h01 * qs[i + 1] + h11 * h * v1


@dataclass
class TrackingSample:
    time: float
    error: np.ndarray          # |measured - reference| per joint, rad
    max_error: float           # max over joints, rad
    progress: float            # 0..1 of the trajectory's duration
    exceeded: bool             # max_error > the monitor's limit


@dataclass
class TrackingSummary:
    max_error: float           # rad, max over samples and joints
    rms_error: float           # rad, RMS over samples of the per-sample max-over-joints error
    final_error: float         # rad, max over joints against the last point, last sample
    samples: int
    worst_joint: str = ''


@dataclass
class TrackingMonitor:
    """Compares measured joint positions with the reference and accumulates statistics."""
    reference: ReferenceTrajectory
    max_tracking_error: float
    goal_tolerance: float
    joint_names: tuple[str, ...] = ()
    _max: float = 0.0
    _sum_sq: float = 0.0
    _count: int = 0
    _worst: int = -1
    _final: float = float('nan')
    _last: TrackingSample | None = field(default=None, repr=False)

    def update(self, t: float, measured) -> TrackingSample:
        """``t``: seconds since the command was sent; ``measured``: positions in robot order."""
        q = np.asarray(measured, dtype=float)
        err = np.abs(q - self.reference.sample(t))
        emax = float(np.max(err))
        if emax > self._max or self._worst < 0:
            self._worst = int(np.argmax(err))
        self._max = max(self._max, emax)
        self._sum_sq += emax * emax
        self._count += 1
        self._final = float(np.max(np.abs(q - self.reference.final)))
        dur = self.reference.duration
        progress = 1.0 if dur <= 0 else min(1.0, max(0.0, t / dur))
        self._last = TrackingSample(t, err, emax, progress, emax > self.max_tracking_error)
        return self._last

    @property
    def last(self) -> TrackingSample | None:
        return self._last

    def at_goal(self) -> bool:
        """All joints within goal_tolerance of the final point (on the latest sample)."""
        return self._count > 0 and self._final <= self.goal_tolerance

    def summary(self) -> TrackingSummary:
        rms = math.sqrt(self._sum_sq / self._count) if self._count else 0.0
        worst = self.joint_names[self._worst] if 0 <= self._worst < len(self.joint_names) else ''
        final = self._final if self._count else float('nan')
        return TrackingSummary(self._max, rms, final, self._count, worst)


def stop_ramp(position, velocity, decel_time: float, control_period: float,
              limits: JointLimits | None = None) -> Trajectory:
    """A trajectory that brings the arm to rest from ``position`` moving at ``velocity``.

    Constant deceleration to zero over T = ``decel_time`` rounded to whole control periods
    (at least one), one point per period: q(t) = q0 + v0 (t - t²/2T), v(t) = v0 (1 - t/T).
    With ``decel_time <= control_period`` that is a single point, ``time_from_start`` = one
    control period, zero velocity, at q0 + v0·T/2 (the current position plus the distance a
    one-period stop covers: a hold exactly at the measured position, which lags the moving arm,
    would pull it backwards). No velocity known: a hold at q0. Positions are kept inside the
    joint limits (a ramp must never push a joint past its limit).
    """
    if control_period <= 0 or not math.isfinite(control_period):
        raise SafetyConfigError(f'control_period must be > 0, got {control_period}')
    if decel_time < 0 or not math.isfinite(decel_time):
        raise SafetyConfigError(f'stop_decel_time must be >= 0, got {decel_time}')
    q0 = np.asarray(position, dtype=float).reshape(-1)
    v0 = (np.zeros_like(q0) if velocity is None or np.size(velocity) == 0
          else np.nan_to_num(np.asarray(velocity, dtype=float).reshape(-1)))
    names = tuple(limits.names) if limits is not None else tuple(f'j{i}' for i in range(q0.size))
    steps = max(1, int(round(decel_time / control_period)))
    big_t = steps * control_period
    times = control_period * np.arange(1, steps + 1)
    frac = times[:, None]
    q = q0 + v0 * (frac - frac**2 / (2 * big_t))
    v = v0 * (1 - frac / big_t)
    v[-1] = 0.0
    if limits is not None:
        q = np.clip(q, limits.lower, limits.upper)
    return Trajectory(names, times, q, v)


def hold_trajectory(position, control_period: float, joint_names: Sequence[str]) -> Trajectory:
    """One point at ``position``, reached after one control period, at rest."""
    q = np.asarray(position, dtype=float).reshape(1, -1)
    return Trajectory(tuple(joint_names), np.array([float(control_period)]), q, np.zeros_like(q))
