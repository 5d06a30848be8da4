"""Safety checks for executing joint trajectories: validation, tracking, stop ramps. ROS-free.

Start-state semantics follow ros2_control's JointTrajectoryController (JTC): the controller
interpolates from the state it is in when the trajectory arrives to the first point. So the
current position is an implicit point at t = 0 and the segment from it to the first point is
checked like every other segment. A first point at ``time_from_start == 0`` must already be
within ``start_tolerance`` of the current position (JTC would jump to it otherwise).

What is checked is the reference the controller follows, built by the one interpolation the
emulated cell uses (:class:`core.joint_trajectory.Spline`, JTC's spline method): linear when
the points carry positions only, cubic with velocities, quintic with accelerations. A cubic or
quintic reference overshoots its waypoints, so checking the points is not enough:

* joint position and velocity limits hold on the whole reference: per segment and joint the
  exact extremes (ends and roots of the derivative) are compared with the limits;
* the tip stays in the workspace box: the tip is sampled along the reference no more than
  ``workspace_step`` rad apart on any joint; with a Lipschitz bound on the forward kinematics
  (``fk_lipschitz``, :func:`fk_lipschitz_bound`) the gaps between samples are certified too
  (refined where needed), so an accepted reference keeps the tip within ``workspace_tolerance``
  of the box everywhere, not only at the samples.

The tracking reference is the same spline. Every check rejects, never clamps: a trajectory that
fails is not sent and nothing moves.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .joint_trajectory import Spline, interpolation_kind, start_state_points

# Error kinds; the node maps them onto ExecuteTrajectory.Result error codes of the same names.
INVALID_TRAJECTORY = 'INVALID_TRAJECTORY'
JOINT_LIMIT_VIOLATION = 'JOINT_LIMIT_VIOLATION'
VELOCITY_LIMIT_VIOLATION = 'VELOCITY_LIMIT_VIOLATION'
WORKSPACE_VIOLATION = 'WORKSPACE_VIOLATION'

# Slack for floating-point round-off on limit comparisons (rad, rad/s, m).
# Upper bounds on what a trajectory goal may hold (docs/limits.md).
MAX_TRAJECTORY_POINTS = 100_000       # points per trajectory
MAX_TRAJECTORY_DURATION = 86_400.0    # s, last time_from_start
MAX_WORKSPACE_SAMPLES = 200_000       # FK calls spent checking the workspace box

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
        """Joint name -> {'lower', 'upper', 'velocity'} limits (rad, rad/s)."""
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
        """True when point ``p`` (m, world) lies in the box (within a small tolerance)."""
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
        """Time of the last point in s (0 for an empty trajectory)."""
        return float(self.times[-1]) if len(self.times) else 0.0


@dataclass
class ValidatedTrajectory:
    """What passed validation: the trajectory in the robot's joint order (what gets sent) and
    the reference the arm should follow (the current position prepended at t = 0 when the
    first point starts later, as JTC does). ``workspace_bound`` (m): how far outside the box
    the reference tip can be between the samples that were checked: ``workspace_tolerance``
    when the gaps were certified with a Lipschitz bound, inf when only samples were checked,
    None when no workspace was given."""
    command: Trajectory
    reference: ReferenceTrajectory
    start_prepended: bool
    workspace_samples: int = 0
    workspace_bound: float | None = None


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
    max_points: int = MAX_TRAJECTORY_POINTS,
    max_duration: float = MAX_TRAJECTORY_DURATION,
    current_velocity: Sequence[float] | None = None,
    fk_lipschitz: Sequence[float] | None = None,
    workspace_tolerance: float = 0.001,
    max_workspace_samples: int = MAX_WORKSPACE_SAMPLES,
) -> ValidatedTrajectory:
    """Check the reference the controller will follow for ``traj`` against ``limits`` and
    ``workspace``; raise TrajectoryViolation on the first problem, with a message naming the
    joint, the point index or time and the values. Any input gives either a result or a
    TrajectoryViolation (SafetyConfigError only for unusable limits/settings). Bounds on
    the input: ``max_points`` points, ``max_duration`` s.

    The reference is :class:`core.joint_trajectory.Spline` through the points (and through
    ``current_position`` at t = 0 when the first point starts later; ``current_velocity``,
    default zero, is its velocity for cubic/quintic references). Checked, in order: times,
    shapes and finiteness; positions and velocities at the points; the exact position extremes
    of every segment against the limits (on the start segment the range is widened to include
    ``current_position``, so a trajectory may move an arm back inside its limits but never
    further out); the exact velocity extremes against ``velocity * velocity_scale``; the tip
    (``fk(q)[0]``) inside ``workspace``, sampled no more than ``workspace_step`` rad apart on
    any joint along the reference. With ``fk_lipschitz`` (per joint, m per rad: a bound on
    |d tip / d q_j|, see :func:`fk_lipschitz_bound`) the tip speed between two samples is at
    most sum_j L_j max|q_j'| over the segment, and a gap is accepted only when the two samples'
    margins to the box cover it with ``workspace_tolerance`` to spare, else it is halved
    (at most ``max_workspace_samples`` FK calls in all): the whole reference then keeps the tip
    within ``workspace_tolerance`` of the box. Point index -1 in messages is the implicit start
    point (the current position).
    """
    if not 0.0 < velocity_scale <= 1.0:
        raise SafetyConfigError(f'velocity_scale must be in (0, 1], got {velocity_scale}')
    if workspace is not None and fk is None:
        raise SafetyConfigError('workspace bounds given without a forward-kinematics function')
    if not workspace_tolerance > 0:
        raise SafetyConfigError(f'workspace_tolerance must be > 0, got {workspace_tolerance}')
    names = _joint_names(traj)
    order = _joint_order(names, limits.names)
    try:
        t = np.asarray(traj.times, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        raise TrajectoryViolation(INVALID_TRAJECTORY, 'time_from_start values are not numbers'
                                  ) from None
    n = t.size
    if n == 0:
        raise TrajectoryViolation(INVALID_TRAJECTORY, 'trajectory has no points')
    if n > max_points:
        raise TrajectoryViolation(INVALID_TRAJECTORY,
                                  f'trajectory has {n} points, more than the {max_points} allowed')
    q = _points_array(traj.positions, n, names, 'positions', required=True)[:, order]
    v = _points_array(traj.velocities, n, names, 'velocities')
    a = _points_array(traj.accelerations, n, names, 'accelerations')
    if a is not None and v is None:
        raise TrajectoryViolation(INVALID_TRAJECTORY,
                                  'accelerations given without velocities (JTC refuses it)')
    v = None if v is None else v[:, order]
    a = None if a is None else a[:, order]

    _check_times(t, max_duration)
    vmax = limits.velocity * velocity_scale
    _check_positions(q, limits)
    if v is not None:
        _check_point_velocities(v, vmax, limits.names)

    # The implicit start segment (JTC semantics).
    start_prepended = False
    ref_t, ref_q, ref_v, ref_a = t, q, v, a
    lower, upper = limits.lower, limits.upper
    if current_position is not None:
        q0 = _state_vector(current_position, limits, 'current position')
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
            v0 = (None if current_velocity is None
                  else _state_vector(current_velocity, limits, 'current velocity'))
            ref_t = np.concatenate([[0.0], t])
            ref_q, ref_v, ref_a = start_state_points(q, v, a, q0, v0, None)
            lower = np.vstack([np.minimum(limits.lower, q0),
                               np.broadcast_to(limits.lower, (n - 1, q0.size))])
            upper = np.vstack([np.maximum(limits.upper, q0),
                               np.broadcast_to(limits.upper, (n - 1, q0.size))])
    offset = -1 if start_prepended else 0
    kind = interpolation_kind(ref_v, ref_a)
    reference = ReferenceTrajectory(ref_t, ref_q, ref_v, ref_a)
    spline = reference.spline
    if not np.all(np.isfinite(spline.coeffs)):
        k = int(np.flatnonzero(~np.all(np.isfinite(spline.coeffs), axis=(1, 2)))[0])
        raise TrajectoryViolation(
            INVALID_TRAJECTORY,
            f'the {kind} segment between points {k + offset} and {k + 1 + offset} cannot be '
            f'interpolated in floating point ({ref_t[k + 1] - ref_t[k]:.3g} s long)')
    extrema = spline.extrema()
    finite = np.isfinite(extrema.pos_min) & np.isfinite(extrema.pos_max) & np.isfinite(
        extrema.vel_min) & np.isfinite(extrema.vel_max)
    if not np.all(finite):
        k = int(np.flatnonzero(~np.all(finite, axis=1))[0])
        raise TrajectoryViolation(
            INVALID_TRAJECTORY,
            f'the {kind} segment between points {k + offset} and {k + 1 + offset} cannot be '
            f'interpolated in floating point ({ref_t[k + 1] - ref_t[k]:.3g} s long)')
    if ref_t.size > 1:
        _check_reference_positions(extrema, lower, upper, limits, kind, offset)
        _check_reference_velocities(extrema, ref_t, ref_q, vmax, limits.names, kind, offset)

    samples, bound = 0, None
    if workspace is not None:
        lip = None
        if fk_lipschitz is not None:
            lip = np.asarray(fk_lipschitz, dtype=float).reshape(-1)
            if lip.shape != (len(limits.names),) or not np.all(np.isfinite(lip) & (lip >= 0)):
                raise SafetyConfigError(f'fk_lipschitz needs {len(limits.names)} finite values '
                                        f'>= 0, got {lip.tolist()}')
        samples = _check_workspace(spline, extrema.speed, fk, workspace, workspace_step, lip,
                                   workspace_tolerance, offset, max_workspace_samples)
        bound = workspace_tolerance if lip is not None else math.inf

    command = Trajectory(limits.names, t.copy(), q, v, a)
    return ValidatedTrajectory(command, reference, start_prepended, samples, bound)


def _joint_names(traj) -> tuple[str, ...]:
    try:
        names = tuple(traj.joint_names)
    except TypeError:
        raise TrajectoryViolation(INVALID_TRAJECTORY, 'joint_names is not a list') from None
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise TrajectoryViolation(INVALID_TRAJECTORY, f'joint names {bad!r} are not strings')
    return names


def _state_vector(values, limits: JointLimits, what: str) -> np.ndarray:
    try:
        x = np.asarray(values, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        x = np.array([np.nan])
    if x.shape != (len(limits.names),) or not np.all(np.isfinite(x)):
        raise TrajectoryViolation(INVALID_TRAJECTORY,
                                  f'{what} {np.asarray(values, dtype=object).tolist()} is not a '
                                  f'finite vector for joints {list(limits.names)}')
    return x
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
    if values is None:
        if required:
            raise TrajectoryViolation(INVALID_TRAJECTORY, f'trajectory has no {what}')
        return None
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise TrajectoryViolation(INVALID_TRAJECTORY,
                                  f'{what} are not numbers (or rows of unequal length)') from None
    if arr.size == 0 and not required:
        return None
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


def _check_times(t, max_duration):
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
    if t[-1] > max_duration:
        raise TrajectoryViolation(INVALID_TRAJECTORY,
                                  f'trajectory lasts {t[-1]:.6g} s, longer than the '
                                  f'{max_duration:g} s allowed')


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


def _segment_name(k, offset, t=None):
    a, b = k + offset, k + 1 + offset
    where = f'between points {a} and {b}'
    if t is not None:
        where += f' at t = {t:.3f} s'
    return where + (' (point -1 is the current position)' if a < 0 else '')


def _earliest(mask, times):
    """(segment, joint) of the earliest True entry of ``mask`` by ``times``, or None."""
    if not mask.any():
        return None
    idx = np.argwhere(mask)
    i = int(np.argmin(times[mask]))
    return int(idx[i, 0]), int(idx[i, 1])


def _check_reference_positions(ext, lower, upper, limits: JointLimits, kind, offset):
    below = ext.pos_min < lower - _EPS
    above = ext.pos_max > upper + _EPS
    times = np.where(below, ext.pos_min_time, np.inf)
    times = np.minimum(times, np.where(above, ext.pos_max_time, np.inf))
    hit = _earliest(below | above, times)
    if hit is None:
        return
    k, j = hit
    low = below[k, j] and (not above[k, j] or ext.pos_min_time[k, j] <= ext.pos_max_time[k, j])
    value, when = ((ext.pos_min[k, j], ext.pos_min_time[k, j]) if low
                   else (ext.pos_max[k, j], ext.pos_max_time[k, j]))
    raise TrajectoryViolation(
        JOINT_LIMIT_VIOLATION,
        f'joint {limits.names[j]!r} {_segment_name(k, offset, when)}: the {kind} reference '
        f'reaches {value:.4f} rad, outside its limits [{limits.lower[j]:.4f}, '
        f'{limits.upper[j]:.4f}] (the points are inside; the interpolation between them '
        f'overshoots)')


def _check_reference_velocities(ext, t, q, vmax, names, kind, offset):
    fast_hi = ext.vel_max > vmax + _EPS
    fast_lo = -ext.vel_min > vmax + _EPS
    times = np.minimum(np.where(fast_hi, ext.vel_max_time, np.inf),
                       np.where(fast_lo, ext.vel_min_time, np.inf))
    hit = _earliest(fast_hi | fast_lo, times)
    if hit is None:
        return
    k, j = hit
    if kind == 'linear':
        dq, dt = q[k + 1, j] - q[k, j], t[k + 1] - t[k]
        raise TrajectoryViolation(
            VELOCITY_LIMIT_VIOLATION,
            f'joint {names[j]!r} {_segment_name(k, offset)}: moving {dq:+.4f} rad in '
            f'{dt:.4f} s (from t = {t[k]:.3f} s) needs {abs(dq) / dt:.4f} rad/s, over the limit '
            f'{vmax[j]:.4f} rad/s')
    hi = fast_hi[k, j] and (not fast_lo[k, j] or ext.vel_max_time[k, j] <= ext.vel_min_time[k, j])
    value, when = ((ext.vel_max[k, j], ext.vel_max_time[k, j]) if hi
                   else (ext.vel_min[k, j], ext.vel_min_time[k, j]))
    raise TrajectoryViolation(
        VELOCITY_LIMIT_VIOLATION,
        f'joint {names[j]!r} {_segment_name(k, offset, when)}: the {kind} reference moves at '
        f'{value:+.4f} rad/s, over the limit {vmax[j]:.4f} rad/s')


def _check_workspace(spline: Spline, speed, fk, ws: Workspace, step, lipschitz, tol, offset,
                     max_samples) -> int:
    """FK samples along the reference; returns how many. See validate_trajectory."""
    if not step > 0:
        raise SafetyConfigError(f'workspace_step must be > 0, got {step}')
    knots = spline.knots
    seg_len = np.diff(knots)
    counts = np.maximum(1, np.ceil(np.max(speed, axis=1) * seg_len / step - 1e-9))
    if knots.size > 1 and float(np.sum(counts)) + 1 > max_samples:
        raise TrajectoryViolation(
            WORKSPACE_VIOLATION,
            f'checking the tip along this trajectory needs {int(np.sum(counts)) + 1} FK samples, '
            f'more than the {max_samples} allowed (a long trajectory: split it)')
    rate = None if lipschitz is None else speed @ lipschitz       # m/s bound per segment
    used = 0

    def tip(t, k):
        nonlocal used
        used += 1
        if used > max_samples:
            raise TrajectoryViolation(
                WORKSPACE_VIOLATION,
                f'cannot certify the tip inside the workspace with {max_samples} FK samples '
                f'(it runs within {tol} m of the box {_segment_name(k, offset)} for long)')
        qs = spline.sample(t)[0]
        p = np.asarray(fk(qs)[0], dtype=float).reshape(3)
        margin = np.minimum(p - ws.minimum, ws.maximum - p)
        if not np.all(margin >= -_EPS):          # NaN from fk counts as outside
            axis = 'xyz'[int(np.argmin(np.nan_to_num(margin, nan=-np.inf)))]
            knot = np.flatnonzero(np.abs(knots - t) <= 1e-12 * max(1.0, abs(t)))
            where = (f'at point {int(knot[0]) + offset}' if knot.size
                     else _segment_name(k, offset, t))
            raise TrajectoryViolation(
                WORKSPACE_VIOLATION,
                f'tip leaves the workspace {where}: tip at ({p[0]:.3f}, {p[1]:.3f}, {p[2]:.3f}) m, '
                f'bounds min {ws.minimum.round(3).tolist()} max {ws.maximum.round(3).tolist()} '
                f'(out on {axis}); joints {np.round(qs, 4).tolist()}')
        return margin

    m_prev = tip(knots[0], 0)
    for k in range(knots.size - 1):
        n = int(counts[k])
        ts = knots[k] + seg_len[k] * np.arange(1, n + 1) / n
        ts[-1] = knots[k + 1]
        t_prev = knots[k]
        for t_next in ts:
            m_next = tip(t_next, k)
            if rate is not None:
                # Halve until each gap's end margins cover the distance the tip can move in it.
                stack = [(t_prev, m_prev, t_next, m_next)]
                while stack:
                    ta, ma, tb, mb = stack.pop()
                    if float(np.min(ma + mb)) + 2 * tol >= rate[k] * (tb - ta):
                        continue
                    tm = 0.5 * (ta + tb)
                    mm = tip(tm, k)
                    stack.append((tm, mm, tb, mb))
                    stack.append((ta, ma, tm, mm))     # the earlier half first
            t_prev, m_prev = t_next, m_next
    return used


def fk_lipschitz_bound(robot, link: str | None = None) -> np.ndarray:
    """Per actuated joint (``robot.joint_names`` order), a bound L_j on |d tip / d q_j| for the
    origin of ``link`` (default ``robot.tip_link``) of a :class:`RobotDescription`.

    A hinge moves the tip at |axis x (tip - anchor)| <= |tip - anchor| per rad, and that
    distance is at most |joint anchor offset| plus the lengths of the fixed offsets (body
    positions, and twice each joint anchor offset of the bodies below) along the chain to the
    tip; a slide joint moves it 1 m per m; a joint not above the tip does not move it. So
    |d tip / dt| <= sum_j L_j |q_j'| at any configuration.
    """
    import mujoco

    model = robot.compile()
    tip = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, link or robot.tip_link)
    if tip < 0:
        raise SafetyConfigError(f"link '{link or robot.tip_link}' is not a body of {robot.name}")
    reach = {}          # body -> bound on |tip - body origin|
    acc, b = 0.0, tip
    while b > 0:
        reach[b] = acc
        acc += float(np.linalg.norm(model.body_pos[b]))
        for jid in range(model.body_jntadr[b], model.body_jntadr[b] + model.body_jntnum[b]):
            acc += 2.0 * float(np.linalg.norm(model.jnt_pos[jid]))
        b = int(model.body_parentid[b])
    out = np.zeros(len(robot.joint_names))
    for i, name in enumerate(robot.joint_names):
        jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        if jid < 0:
            raise SafetyConfigError(f'joint {name!r} is not in the compiled model')
        body = int(model.jnt_bodyid[jid])
        if body not in reach:
            continue
        if model.jnt_type[jid] == mujoco.mjtJoint.mjJNT_SLIDE:
            out[i] = 1.0
        else:
            out[i] = reach[body] + float(np.linalg.norm(model.jnt_pos[jid]))
    return out


class ReferenceTrajectory:
    """Where the arm should be at time t (s from the command's start): the controller's spline
    (:class:`core.joint_trajectory.Spline`) through the points: linear, cubic with velocities,
    quintic with accelerations; held at the ends."""

    def __init__(self, times, positions, velocities=None, accelerations=None):
        self.times = np.asarray(times, dtype=float)
        self.positions = np.asarray(positions, dtype=float)
        self.velocities = None if velocities is None else np.asarray(velocities, dtype=float)
        self.accelerations = (None if accelerations is None
                              else np.asarray(accelerations, dtype=float))
        self.kind = interpolation_kind(self.velocities, self.accelerations)
        self.spline = Spline.through(self.times, self.positions, self.velocities,
                                     self.accelerations, self.kind)

    @property
    def duration(self) -> float:
        """Time of the last point in s."""
        return float(self.times[-1])

    @property
    def final(self) -> np.ndarray:
        """Joint positions of the last point (rad)."""
        return self.positions[-1]

    def sample(self, t: float) -> np.ndarray:
        """Reference joint positions (rad) at time ``t`` (s) along the spline."""
        return self.spline.sample(t)[0].copy()


@dataclass
class TrackingSample:
    """One tracking check: per-joint and max error (rad), progress (0..1) and whether the limit was
    exceeded."""
    time: float
    error: np.ndarray          # |measured - reference| per joint, rad
    max_error: float           # max over joints, rad
    progress: float            # 0..1 of the trajectory's duration
    exceeded: bool             # max_error > the monitor's limit


@dataclass
class TrackingSummary:
    """Tracking over a whole trajectory: max, RMS and final error (rad) and the worst joint."""
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
        """The latest TrackingSample, or None before the first update."""
        return self._last

    def at_goal(self) -> bool:
        """All joints within goal_tolerance of the final point (on the latest sample)."""
        return self._count > 0 and self._final <= self.goal_tolerance

    def summary(self) -> TrackingSummary:
        """TrackingSummary of every sample so far (final error nan before any)."""
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
