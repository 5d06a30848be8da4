"""ros2_control joint_trajectory_controller semantics without ROS: validation, splines, replacement.

Follows the ros2_control JTC documentation ("Trajectory Representation", spline method):

* interpolation per segment from what the waypoints carry: positions only -> linear
  (velocity is piecewise constant); positions + velocities -> cubic (continuous velocity);
  positions + velocities + accelerations -> quintic (continuous acceleration);
* the first segment starts from the state *before* the trajectory (here: the controller's
  current reference, i.e. JTC's "interpolate from desired state") at the trajectory's start
  time and ends at the first waypoint;
* after the last waypoint the reference holds the last position (velocity 0);
* header.stamp == 0 means "start now"; a new trajectory replaces the active one from its start
  time (the old one keeps running until then; a still-pending one is discarded);
* an empty trajectory (no points) stops: the reference holds where it is.

Trajectories are validated before acceptance; a bad one raises :class:`TrajectoryError` with
a message naming the problem, and the active trajectory stays as it was.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class TrajectoryError(ValueError):
    """A trajectory command was rejected; the message says why."""


@dataclass
class JointTrajectoryCommand:
    """A trajectory_msgs/JointTrajectory in plain numpy form.

    ``times`` are time_from_start (s); ``start_time`` is an absolute time on the controller's
    clock, or None / 0 for "now".
    """
    joint_names: list[str]
    times: np.ndarray
    positions: np.ndarray
    velocities: np.ndarray | None = None
    accelerations: np.ndarray | None = None
    start_time: float | None = None

    @classmethod
    def from_points(cls, joint_names, points, start_time=None) -> JointTrajectoryCommand:
        """Build from [(t, positions[, velocities[, accelerations]]), ...]."""
        times = np.array([p[0] for p in points], float)
        if not points:
            return cls(list(joint_names), times, np.zeros((0, len(joint_names))), None, None,
                       start_time)
        pos = np.array([p[1] for p in points], float).reshape(len(points), -1)
        vel = (np.array([p[2] for p in points], float)
               if points and all(len(p) > 2 for p in points) else None)
        acc = (np.array([p[3] for p in points], float)
               if points and all(len(p) > 3 for p in points) else None)
        return cls(list(joint_names), times, pos, vel, acc, start_time)


def validate_trajectory(cmd: JointTrajectoryCommand, joint_names: list[str],
                        lower=None, upper=None, velocity_limits=None,
                        allow_partial: bool = False) -> JointTrajectoryCommand:
    """Check ``cmd`` and return it reordered to ``joint_names`` (the controller's order)."""
    names = list(cmd.joint_names)
    if len(set(names)) != len(names):
        raise TrajectoryError(f'joint_names has duplicates: {names}')
    unknown = [n for n in names if n not in joint_names]
    if unknown:
        raise TrajectoryError(f'unknown joints {unknown}; controller joints: {joint_names}')
    if not allow_partial and set(names) != set(joint_names):
        missing = [n for n in joint_names if n not in names]
        raise TrajectoryError(f'joints {missing} missing (partial goals are not allowed)')
    times = np.asarray(cmd.times, float).reshape(-1)
    n = times.size
    if n == 0:
        return JointTrajectoryCommand(list(joint_names), times, np.zeros((0, len(joint_names))),
                                      None, None, cmd.start_time)
    if not np.all(np.isfinite(times)) or times[0] < 0:
        raise TrajectoryError('time_from_start must be finite and >= 0')
    if np.any(np.diff(times) <= 0):
        i = int(np.argmax(np.diff(times) <= 0)) + 1
        raise TrajectoryError(f'points[{i}].time_from_start must be strictly increasing')

    def field(arr, label):
        if arr is None:
            return None
        a = np.asarray(arr, float)
        if a.shape != (n, len(names)):
            raise TrajectoryError(f'{label}: expected {n} points x {len(names)} joints, '
                                  f'got shape {a.shape}')
        if not np.all(np.isfinite(a)):
            raise TrajectoryError(f'{label}: values must be finite')
        return a

    pos = field(cmd.positions, 'positions')
    if pos is None:
        raise TrajectoryError('positions are required (position-controlled joints)')
    vel = field(cmd.velocities, 'velocities')
    acc = field(cmd.accelerations, 'accelerations')
    if acc is not None and vel is None:
        raise TrajectoryError('accelerations given without velocities')
    order = [names.index(j) for j in joint_names if j in names]
    if len(order) != len(joint_names):
        raise TrajectoryError('partial trajectories are not supported by this controller')
    pos, vel, acc = (None if a is None else a[:, order] for a in (pos, vel, acc))
    if lower is not None and upper is not None:
        lo, hi = np.asarray(lower), np.asarray(upper)
        bad = (pos < lo - 1e-9) | (pos > hi + 1e-9)
        if bad.any():
            i, j = map(int, np.argwhere(bad)[0])
            raise TrajectoryError(f'points[{i}].positions[{joint_names[j]}] = {pos[i, j]:.4f} '
                                  f'outside limits [{lo[j]:.4f}, {hi[j]:.4f}]')
    if velocity_limits is not None and vel is not None:
        lim = np.asarray(velocity_limits)
        bad = np.abs(vel) > lim + 1e-9
        if bad.any():
            i, j = map(int, np.argwhere(bad)[0])
            raise TrajectoryError(f'points[{i}].velocities[{joint_names[j]}] = {vel[i, j]:.4f} '
                                  f'exceeds the limit {lim[j]:.4f}')
    return JointTrajectoryCommand(list(joint_names), times, pos, vel, acc, cmd.start_time)


def interpolation_kind(velocities, accelerations) -> str:
    """JTC's spline method from what the waypoints carry: 'linear', 'cubic' or 'quintic'."""
    if accelerations is not None:
        return 'quintic'
    return 'cubic' if velocities is not None else 'linear'


def spline_coefficients(knots, positions, velocities, accelerations, kind: str) -> np.ndarray:
    """Coefficients (S, 6, J) of the S = len(knots) - 1 segments through the points.

    Row k of ``positions`` / ``velocities`` / ``accelerations`` (each (S + 1, J); velocities
    and accelerations may be None = zero) is the state at ``knots[k]``. Segment k is
    p(tau) = sum_i c[k, i] tau^i for tau in [0, knots[k + 1] - knots[k]]: linear through the
    positions, cubic matching positions and velocities, or quintic matching positions,
    velocities and accelerations at both ends. A zero-length segment jumps: it holds the
    end point.
    """
    knots = np.asarray(knots, float)
    p = np.asarray(positions, float)
    v = np.zeros_like(p) if velocities is None else np.asarray(velocities, float)
    a = np.zeros_like(p) if accelerations is None else np.asarray(accelerations, float)
    T = np.diff(knots)[:, None]
    jump = T <= 0
    T = np.where(jump, 1.0, T)
    pa, pb, va, vb, aa, ab = p[:-1], p[1:], v[:-1], v[1:], a[:-1], a[1:]
    c = np.zeros((T.shape[0], 6, p.shape[1]))
    c[:, 0] = pa
    with np.errstate(over='ignore', invalid='ignore', divide='ignore'):
        if kind == 'linear':
            c[:, 1] = (pb - pa) / T
        elif kind == 'cubic':
            c[:, 1] = va
            c[:, 2] = (3 * (pb - pa) - (2 * va + vb) * T) / T ** 2
            c[:, 3] = (2 * (pa - pb) + (va + vb) * T) / T ** 3
        elif kind == 'quintic':
            # What the cubic-and-up terms must add to p, v and a at the end.
            A = pb - pa - va * T - aa * T * T / 2
            B = vb - va - aa * T
            C = ab - aa
            c[:, 1] = va
            c[:, 2] = aa / 2
            c[:, 3] = (10 * A - 4 * B * T + C * T * T / 2) / T ** 3
            c[:, 4] = (-15 * A + 7 * B * T - C * T * T) / T ** 4
            c[:, 5] = (6 * A - 3 * B * T + C * T * T / 2) / T ** 5
        else:
            raise ValueError(f'unknown interpolation {kind!r} (linear, cubic, quintic)')
    jump = jump[:, 0]
    c[jump] = 0.0
    c[jump, 0] = pb[jump]
    return c


@dataclass
class SplineExtrema:
    """Per segment (rows) and joint (columns): the exact extreme position and velocity of the
    reference on the segment and the absolute times where they occur."""
    pos_min: np.ndarray
    pos_min_time: np.ndarray
    pos_max: np.ndarray
    pos_max_time: np.ndarray
    vel_min: np.ndarray
    vel_min_time: np.ndarray
    vel_max: np.ndarray
    vel_max_time: np.ndarray

    @property
    def speed(self) -> np.ndarray:
        """max |velocity| per segment and joint."""
        return np.maximum(np.abs(self.vel_min), np.abs(self.vel_max))


class Spline:
    """A piecewise polynomial joint reference on an absolute clock.

    ``knots`` (K,) and ``coeffs`` (K, 6, J): piece i starts at ``knots[i]``; the last piece is
    the hold after the end (constant). Before ``knots[0]`` the reference is the first piece's
    start state.
    """

    def __init__(self, knots, coeffs):
        self.knots = np.asarray(knots, float)
        self.coeffs = np.asarray(coeffs, float)

    @classmethod
    def through(cls, knots, positions, velocities=None, accelerations=None,
                kind: str | None = None) -> Spline:
        """The spline through points at ``knots`` (see :func:`spline_coefficients`), holding
        the last position after the last knot. ``kind`` defaults to what the points carry."""
        kind = kind or interpolation_kind(velocities, accelerations)
        p = np.asarray(positions, float)
        segs = spline_coefficients(knots, p, velocities, accelerations, kind)
        hold = np.zeros((1, 6, p.shape[1]))
        hold[0, 0] = p[-1]
        return cls(knots, np.concatenate([segs, hold], axis=0))

    @property
    def end_time(self) -> float:
        """Time of the last knot in s."""
        return float(self.knots[-1])

    def sample(self, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Reference (position, velocity, acceleration) at absolute time ``t``."""
        i = int(np.searchsorted(self.knots, t, side='right')) - 1
        i = min(max(i, 0), self.coeffs.shape[0] - 1)
        tau = t - self.knots[i] if i < len(self.knots) - 1 else 0.0
        tau = max(tau, 0.0)
        c = self.coeffs[i]
        p = c[0] + tau * (c[1] + tau * (c[2] + tau * (c[3] + tau * (c[4] + tau * c[5]))))
        v = c[1] + tau * (2 * c[2] + tau * (3 * c[3] + tau * (4 * c[4] + tau * 5 * c[5])))
        a = 2 * c[2] + tau * (6 * c[3] + tau * (12 * c[4] + tau * 20 * c[5]))
        return p, v, a

    def sample_many(self, times) -> tuple[np.ndarray, np.ndarray]:
        """Positions and velocities (N, J) at the absolute ``times`` (N,), as :meth:`sample`."""
        t = np.asarray(times, float).reshape(-1)
        i = np.clip(np.searchsorted(self.knots, t, side='right') - 1, 0,
                    self.coeffs.shape[0] - 1)
        last = i >= len(self.knots) - 1
        tau = np.where(last, 0.0, np.maximum(t - self.knots[i], 0.0))[:, None]
        c = self.coeffs[i]
        p = c[:, 0] + tau * (c[:, 1] + tau * (c[:, 2] + tau * (c[:, 3] + tau * (
            c[:, 4] + tau * c[:, 5]))))
        v = c[:, 1] + tau * (2 * c[:, 2] + tau * (3 * c[:, 3] + tau * (
            4 * c[:, 4] + tau * 5 * c[:, 5])))
        return p, v

    def extrema(self) -> SplineExtrema:
        """Exact extremes of position and velocity on every segment (the final hold excluded).

        Per joint and segment the extremes of a polynomial on [0, T] lie at an end or at a root
        of its derivative: the derivative's roots (companion-matrix eigenvalues, in the
        normalised time s = tau / T in [0, 1]) plus both ends are evaluated and the extremes
        taken. Leading coefficients below 1e-13 of the largest are dropped before root finding;
        that changes the polynomial by less than 1e-12 of its coefficient scale on [0, 1].
        """
        c = self.coeffs[:-1]                               # (S, 6, J)
        S, _, J = c.shape
        T = np.diff(self.knots)                            # (S,)
        powers = T[:, None] ** np.arange(6)[None, :]       # (S, 6)
        with np.errstate(over='ignore', invalid='ignore', divide='ignore'):
            ps = c * powers[:, :, None]                        # p(s) coefficients, s in [0, 1]
            vs = np.zeros_like(ps)                             # v(s) in rad/s
            k = np.arange(1, 6)
            vs[:, :5] = c[:, 1:] * (k * powers[:, :5])[:, :, None]
        # (S*J, 6): one polynomial in s per row.
        prow = np.moveaxis(ps, 2, 1).reshape(S * J, 6)
        vrow = np.moveaxis(vs, 2, 1).reshape(S * J, 6)
        start = np.repeat(self.knots[:-1], J)
        dur = np.repeat(T, J)

        def extremes(rows):
            d = rows[:, 1:] * np.arange(1, 6)              # derivative coefficients
            cand = np.concatenate([np.zeros((len(rows), 1)), np.ones((len(rows), 1)),
                                   _roots_in_unit_interval(d)], axis=1)
            vals = _polyval_rows(rows, cand)
            lo, hi = np.argmin(vals, axis=1), np.argmax(vals, axis=1)
            r = np.arange(len(rows))
            t_lo = start + cand[r, lo] * dur
            t_hi = start + cand[r, hi] * dur
            return (vals[r, lo].reshape(S, J), t_lo.reshape(S, J),
                    vals[r, hi].reshape(S, J), t_hi.reshape(S, J))

        return SplineExtrema(*extremes(prow), *extremes(vrow))


def _roots_in_unit_interval(d: np.ndarray) -> np.ndarray:
    """Real parts of the roots of each row's polynomial (coefficients low to high), clipped to
    [0, 1]; padded with 0. Evaluating the polynomial there as well as at true real roots never
    overstates its range, so complex roots need no filtering."""
    m, n = d.shape
    out = np.zeros((m, n - 1))
    scale = np.max(np.abs(d), axis=1)
    sig = np.abs(d) > 1e-13 * scale[:, None]
    deg = np.where(sig.any(axis=1), n - 1 - np.argmax(sig[:, ::-1], axis=1), 0)
    for k in range(1, n):
        rows = np.flatnonzero(deg == k)
        if rows.size == 0:
            continue
        c = d[rows, :k + 1]
        if k == 1:
            r = (-c[:, 0] / c[:, 1])[:, None]
        else:
            comp = np.zeros((rows.size, k, k))
            comp[:, np.arange(1, k), np.arange(k - 1)] = 1.0
            comp[:, :, -1] = -c[:, :k] / c[:, k:k + 1]
            r = np.linalg.eigvals(comp).real
        out[rows, :k] = np.clip(r, 0.0, 1.0)
    return out


def _polyval_rows(coef: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Row i's polynomial (coefficients low to high) at each x[i, :]."""
    y = np.zeros_like(x)
    for i in range(coef.shape[1] - 1, -1, -1):
        y = y * x + coef[:, i:i + 1]
    return y


class Trajectory:
    """One accepted trajectory, sampled on an absolute clock."""

    def __init__(self, cmd: JointTrajectoryCommand, start_time: float,
                 p0: np.ndarray, v0: np.ndarray, a0: np.ndarray):
        self.start_time = float(start_time)
        n_j = p0.size
        if cmd.times.size == 0:   # empty trajectory: hold the state before it
            self.kind = 'hold'
            coeffs = np.zeros((1, 6, n_j))
            coeffs[0, 0] = p0
            self.spline = Spline(np.array([self.start_time]), coeffs)
            return
        self.kind = interpolation_kind(cmd.velocities, cmd.accelerations)
        pts_p, pts_v, pts_a = start_state_points(cmd.positions, cmd.velocities,
                                                 cmd.accelerations, p0, v0, a0)
        knots = np.concatenate([[self.start_time], self.start_time + cmd.times])
        self.spline = Spline.through(knots, pts_p, pts_v, pts_a, self.kind)

    @property
    def knots(self) -> np.ndarray:
        """Knot times of the spline (s)."""
        return self.spline.knots

    @property
    def coeffs(self) -> np.ndarray:
        """Polynomial coefficients of the spline, one set per segment and joint."""
        return self.spline.coeffs

    @property
    def end_time(self) -> float:
        """Time of the last point in s."""
        return self.spline.end_time

    def sample(self, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Reference (position, velocity, acceleration) at absolute time ``t``."""
        return self.spline.sample(t)


def start_state_points(positions, velocities, accelerations, p0, v0=None, a0=None):
    """The points a trajectory is interpolated through, the state before it prepended (JTC:
    the first segment runs from that state to the first waypoint). Velocities and
    accelerations of the start state are used only where the waypoints carry them (cubic /
    quintic); None = zero. Returns (positions, velocities or None, accelerations or None)."""
    p0 = np.asarray(p0, float).reshape(1, -1)
    zero = np.zeros_like(p0)
    pts_p = np.vstack([p0, positions])
    pts_v = pts_a = None
    if velocities is not None:
        pts_v = np.vstack([zero if v0 is None else np.asarray(v0, float).reshape(1, -1),
                           velocities])
    if accelerations is not None:
        pts_a = np.vstack([zero if a0 is None else np.asarray(a0, float).reshape(1, -1),
                           accelerations])
    return pts_p, pts_v, pts_a


class TrajectoryFollower:
    """The reference generator of a joint_trajectory_controller (no feedback loop here)."""

    def __init__(self, joint_names: list[str], initial_positions, lower=None, upper=None,
                 velocity_limits=None, allow_partial: bool = False):
        self.joint_names = list(joint_names)
        self.lower, self.upper = lower, upper
        self.velocity_limits = velocity_limits
        self.allow_partial = allow_partial
        q0 = np.asarray(initial_positions, float)
        self._active = self._hold_at(q0, -np.inf)
        self._pending: Trajectory | None = None

    def _hold_at(self, q, t) -> Trajectory:
        z = np.zeros_like(q)
        empty = JointTrajectoryCommand(self.joint_names, np.zeros(0), np.zeros((0, q.size)))
        return Trajectory(empty, t, q, z, z)

    def _current(self, t: float) -> Trajectory:
        if self._pending is not None and t >= self._pending.start_time:
            self._active, self._pending = self._pending, None
        return self._active

    def set_trajectory(self, cmd: JointTrajectoryCommand, now: float) -> Trajectory:
        """Validate and accept ``cmd``; it takes over from its start time (0/None = now)."""
        cmd = validate_trajectory(cmd, self.joint_names, self.lower, self.upper,
                                  self.velocity_limits, self.allow_partial)
        start = now if not cmd.start_time else float(cmd.start_time)
        self._current(now)
        self._pending = None
        p0, v0, a0 = self._active.sample(start)
        traj = Trajectory(cmd, start, p0, v0, a0)
        if start <= now:
            self._active = traj
        else:
            self._pending = traj
        return traj

    def hold(self, position, now: float):
        """Stop: hold ``position`` from ``now`` on, dropping active and pending trajectories."""
        self._pending = None
        self._active = self._hold_at(np.asarray(position, float), now)

    def sample(self, t: float):
        """Reference (position, velocity, acceleration) of the trajectory in force at time ``t``."""
        return self._current(t).sample(t)

    def is_done(self, t: float) -> bool:
        """True when nothing is pending and the active trajectory has reached its end."""
        return self._pending is None and t >= self._current(t).end_time
