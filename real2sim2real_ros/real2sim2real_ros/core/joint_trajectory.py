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


def _segment_coeffs(T, pa, va, aa, pb, vb, ab, kind):
    """Polynomial coefficients c0..c5 (each shaped like pa) for one segment of duration T."""
    zero = np.zeros_like(pa)
    if T <= 0:   # a zero-length first segment: jump to the waypoint
        return [pb, zero, zero, zero, zero, zero]
    if kind == 'linear':
        return [pa, (pb - pa) / T, zero, zero, zero, zero]
    if kind == 'cubic':
        c2 = (3 * (pb - pa) - (2 * va + vb) * T) / T ** 2
        c3 = (2 * (pa - pb) + (va + vb) * T) / T ** 3
        return [pa, va, c2, c3, zero, zero]
    # quintic: match p, v, a at both ends. A, B, C are what the cubic-and-up terms must add.
    A = pb - pa - va * T - aa * T * T / 2
    B = vb - va - aa * T
    C = ab - aa
    c3 = (10 * A - 4 * B * T + C * T * T / 2) / T ** 3
    c4 = (-15 * A + 7 * B * T - C * T * T) / T ** 4
    c5 = (6 * A - 3 * B * T + C * T * T / 2) / T ** 5
    return [pa, va, aa / 2, c3, c4, c5]


class Trajectory:
    """One accepted trajectory, sampled on an absolute clock."""

    def __init__(self, cmd: JointTrajectoryCommand, start_time: float,
                 p0: np.ndarray, v0: np.ndarray, a0: np.ndarray):
        self.start_time = float(start_time)
        n_j = p0.size
        if cmd.times.size == 0:   # empty trajectory: hold the state before it
            self.kind = 'hold'
            self.knots = np.array([self.start_time])
            self.coeffs = np.zeros((1, 6, n_j))
            self.coeffs[0, 0] = p0
            return
        self.kind = ('quintic' if cmd.accelerations is not None else
                     'cubic' if cmd.velocities is not None else 'linear')
        pos = cmd.positions
        vel = cmd.velocities if cmd.velocities is not None else np.zeros_like(pos)
        acc = cmd.accelerations if cmd.accelerations is not None else np.zeros_like(pos)
        self.knots = np.concatenate([[self.start_time], self.start_time + cmd.times])
        pts_p = np.vstack([p0, pos])
        pts_v = np.vstack([v0 if self.kind != 'linear' else np.zeros(n_j), vel])
        pts_a = np.vstack([a0 if self.kind == 'quintic' else np.zeros(n_j), acc])
        segs = []
        for k in range(len(self.knots) - 1):
            T = self.knots[k + 1] - self.knots[k]
            segs.append(_segment_coeffs(T, pts_p[k], pts_v[k], pts_a[k],
                                        pts_p[k + 1], pts_v[k + 1], pts_a[k + 1], self.kind))
        last = np.zeros((6, n_j))
        last[0] = pos[-1]     # hold the last position after the end
        self.coeffs = np.concatenate([np.array(segs), last[None]], axis=0)

    @property
    def end_time(self) -> float:
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
        return self._current(t).sample(t)

    def is_done(self, t: float) -> bool:
        """True when nothing is pending and the active trajectory has reached its end."""
        return self._pending is None and t >= self._current(t).end_time
