"""Excitation trajectories for identification (ROS-free).

Multi-sine joint probes: every joint moves about a centre pose as a sum of a few sines at
frequencies no other joint uses (so the joints' effects separate), under a smooth envelope
that starts and ends at rest, scaled to stay inside the joint limits and a fraction of the
velocity limits. Object pushes: the tool sweeps horizontally through an object's side.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ['Probe', 'ProbeError', 'effort_limited_multisine', 'move_trajectory',
           'multisine_probe', 'predicted_torques', 'push_probe']

# Base frequencies (Hz); joint j uses FREQS[j::n_joints] style interleaving so no two joints
# share one.
_FREQS = np.array([0.35, 0.45, 0.55, 0.65, 0.8, 0.95, 1.1, 1.25, 1.4, 1.6, 1.8, 2.0,
                   2.2, 2.45, 2.7, 3.0, 3.3, 3.6])


class ProbeError(ValueError):
    """A probe cannot be generated for the given limits / pose."""


@dataclass
class Probe:
    """A joint trajectory (JTC points: time_from_start, positions, velocities)."""

    joint_names: list[str]
    times: np.ndarray
    positions: np.ndarray
    velocities: np.ndarray
    name: str = 'probe'

    @property
    def duration(self) -> float:
        """Time of the last sample in s."""
        return float(self.times[-1])


def _envelope(t: np.ndarray, duration: float, ramp: float) -> np.ndarray:
    up = np.clip(t / ramp, 0, 1)
    down = np.clip((duration - t) / ramp, 0, 1)
    return np.sin(0.5 * np.pi * np.minimum(up, down)) ** 2


def multisine_probe(joint_names, center, lower, upper, velocity_limits, *,
                    duration: float = 3.0, rate: float = 50.0, amplitude: float = 0.2,
                    velocity_fraction: float = 0.4, n_sines: int = 3, seed: int = 0,
                    joints=None, name: str = 'multisine', scale=None) -> Probe:
    """Multi-sine probe about ``center`` (rad); ``joints`` (names) limits which joints move.

    amplitude: peak excursion per joint (rad, reduced near a limit); velocity_fraction:
    peak speed as a fraction of the joint's velocity limit; scale: per-joint factors (0..1]
    on each joint's excursion after those limits (``effort_limited_multisine``), the
    waveforms (phases, frequencies) unchanged.
    """
    names = list(joint_names)
    n = len(names)
    center = np.asarray(center, float)
    lower, upper = np.asarray(lower, float), np.asarray(upper, float)
    vlim = np.asarray(velocity_limits, float)
    if center.shape != (n,) or lower.shape != (n,) or upper.shape != (n,) or vlim.shape != (n,):
        raise ProbeError(f'center, limits and velocity limits need {n} values each')
    if not (duration > 1.0 and rate > 0 and amplitude > 0 and 0 < velocity_fraction <= 1):
        raise ProbeError('need duration > 1 s, rate > 0, amplitude > 0, '
                         '0 < velocity_fraction <= 1')
    if np.any(center < lower) or np.any(center > upper):
        raise ProbeError('the probe centre is outside the joint limits')
    moving = np.ones(n, bool) if joints is None else np.isin(names, list(joints))
    rng = np.random.default_rng(seed)
    t_fine = np.arange(0.0, duration + 1e-9, 0.001)
    env = _envelope(t_fine, duration, ramp=min(0.6, duration / 4))
    q = np.tile(center, (t_fine.size, 1))
    for j in np.flatnonzero(moving):
        freqs = _FREQS[(j + n * np.arange(n_sines)) % _FREQS.size]
        phases = rng.uniform(0, 2 * np.pi, n_sines)
        s = sum(np.sin(2 * np.pi * f * t_fine + p) for f, p in zip(freqs, phases))
        s = env * s
        room = 0.9 * min(center[j] - lower[j], upper[j] - center[j])
        amp = min(amplitude, room)
        if amp <= 1e-3:
            raise ProbeError(f"joint '{names[j]}' is at its limit: no room to move")
        shape = s / np.abs(s).max()
        peak_speed = np.abs(np.gradient(shape, t_fine)).max()
        amp = min(amp, velocity_fraction * vlim[j] / peak_speed)
        if scale is not None:
            amp *= float(scale[j])
        q[:, j] = center[j] + amp * shape
    qd = np.gradient(q, t_fine, axis=0)
    step = max(1, int(round(1.0 / (rate * 0.001))))
    idx = np.arange(step, t_fine.size, step)
    if idx[-1] != t_fine.size - 1:
        idx = np.append(idx, t_fine.size - 1)
    qd[-1] = 0.0
    return Probe(names, t_fine[idx], q[idx], qd[idx], name)


def predicted_torques(robot, probe: Probe, model=None) -> np.ndarray:
    """(n_points, n_joints) joint torques (N m) the arm's actuators need to follow ``probe``:
    MuJoCo inverse dynamics on the robot description's model (URDF masses and inertias, its
    joint damping, the held joints where they are held), gravity counted in full (a real
    arm's motors carry it; the emulated cell's gravity compensation is no part of the
    actuators' effort limits there, so this errs on the safe side). Accelerations from the
    probe's velocities. model: an MjModel of ``robot`` to use instead of ``robot.compile()``
    (e.g. the twin's, with its armature)."""
    import copy

    import mujoco
    m = copy.copy(robot.compile() if model is None else model)
    m.body_gravcomp[:] = 0.0
    d = mujoco.MjData(m)
    qadr = robot.qpos_indices(m)
    dadr = np.array([m.jnt_dofadr[m.jnt_qposadr.tolist().index(a)] for a in qadr])
    t = np.asarray(probe.times, float)
    qd = np.asarray(probe.velocities, float)
    qdd = np.gradient(qd, t, axis=0) if len(t) > 1 else np.zeros_like(qd)
    out = np.zeros_like(qd)
    for k in range(len(t)):
        d.qpos[:] = m.qpos0
        d.qpos[qadr] = probe.positions[k]
        d.qvel[:] = 0.0
        d.qvel[dadr] = qd[k]
        d.qacc[:] = 0.0
        d.qacc[dadr] = qdd[k]
        mujoco.mj_inverse(m, d)
        out[k] = d.qfrc_inverse[dadr]
    return out


def effort_limited_multisine(robot, center, *, effort_fraction: float = 0.8,
                             iterations: int = 8, model=None, **kw) -> Probe:
    """``multisine_probe`` on ``robot``'s arm joints whose predicted torques
    (``predicted_torques``) stay within ``effort_fraction`` of each joint's effort limit:
    each joint's excursion is scaled down by the ratio of its allowed to its predicted
    dynamic torque (the part above the torque of holding the centre), a few passes as the
    joints couple. ProbeError, never a probe, when a joint's torque cannot be brought under
    the margin (holding the centre alone needs more, or the passes do not converge). kw: as
    ``multisine_probe``."""
    if not 0 < effort_fraction <= 1:
        raise ProbeError('need 0 < effort_fraction <= 1')
    limit = effort_fraction * np.asarray(robot.effort_limits, float)
    center = np.asarray(center, float)
    names = list(robot.joint_names)
    hold = Probe(names, np.array([0.0, 1.0]), np.vstack([center, center]),
                 np.zeros((2, len(center))))
    static = np.abs(predicted_torques(robot, hold, model)[0])
    if np.any(static >= limit):
        j = int(np.argmax(static / limit))
        raise ProbeError(f"joint '{names[j]}' needs {static[j]:.1f} N m to hold the probe "
                         f'centre, above {effort_fraction:.0%} of its {robot.effort_limits[j]:g}'
                         f' N m effort limit: no room to excite it')
    scale = np.ones(len(center))
    for _ in range(iterations):
        probe = multisine_probe(names, center, robot.lower, robot.upper,
                                robot.velocity_limits, scale=scale, **kw)
        peak = np.abs(predicted_torques(robot, probe, model)).max(axis=0)
        if np.all(peak <= limit):
            return probe
        over = peak > limit
        # The torque above holding the centre scales about with the excursion; aim 5% under.
        dyn = np.maximum(peak - static, 1e-9)
        scale[over] *= np.clip(0.95 * (limit[over] - static[over]) / dyn[over], 0.05, 0.95)
    j = int(np.argmax(peak / limit))
    raise ProbeError(f"joint '{names[j]}': the probe's predicted torque {peak[j]:.1f} N m "
                     f'stays above {effort_fraction:.0%} of its {robot.effort_limits[j]:g} N m '
                     f'effort limit after {iterations} reductions')


def push_probe(robot, object_xyz, *, direction=(1.0, 0.0), approach: float = 0.08,
               push: float = 0.06, height: float = 0.02, speed: float = 0.15,
               rate: float = 50.0, tip_link: str | None = None, q_seed=None,
               name: str = 'push') -> Probe:
    """Tool sweep through an object's side, horizontally along ``direction`` (world x, y).

    The tool tip starts ``approach`` m before the object's centre at ``height`` above the
    table (object base z + height), moves ``approach + push`` m along the direction at
    ``speed`` m/s. Positions come from a damped least-squares IK on ``robot`` (a
    RobotDescription), tool pointing down as in the seed pose.
    """
    d = np.asarray(direction, float)
    d = np.array([d[0], d[1], 0.0]) / np.linalg.norm(d)
    obj = np.asarray(object_xyz, float)
    start = obj - approach * d
    start[2] = height
    dist = approach + push
    duration = dist / speed
    n_pts = max(2, int(np.ceil(duration * rate)))
    s = np.linspace(0, 1, n_pts + 1)
    # Smooth (minimum-jerk) progress so the tool starts and stops at rest.
    prog = 10 * s ** 3 - 15 * s ** 4 + 6 * s ** 5
    q = np.asarray(q_seed if q_seed is not None else (robot.lower + robot.upper) / 2, float)
    path = []
    for p in prog:
        q = _ik_position(robot, start + p * dist * d, q, tip_link)
        path.append(q.copy())
    path = np.array(path)
    t_move = np.linspace(0, duration, n_pts + 1)
    qd = np.gradient(path, t_move, axis=0)
    qd[0] = qd[-1] = 0.0
    # 1 s to reach the start pose, then the push.
    times = np.concatenate([[1.0], 1.0 + t_move[1:]])
    positions = np.vstack([path[0], path[1:]])
    velocities = np.vstack([np.zeros(len(q)), qd[1:]])
    return Probe(list(robot.joint_names), times, positions, velocities, name)


def _ik_position(robot, target, q, tip_link, iters: int = 60) -> np.ndarray:
    """Position-only IK keeping the seed's tool orientation (damped least squares, FD Jacobian)."""
    q = np.asarray(q, float).copy()
    _, quat0 = robot.fk(q, tip_link)
    for _ in range(iters):
        pos, quat = robot.fk(q, tip_link)
        err = np.concatenate([target - pos, 0.2 * _quat_err(quat0, quat)])
        if np.linalg.norm(err[:3]) < 1e-5:
            break
        jac = np.zeros((6, q.size))
        for i in range(q.size):
            dq = q.copy()
            dq[i] += 1e-6
            p2, r2 = robot.fk(dq, tip_link)
            jac[:, i] = np.concatenate([(p2 - pos), 0.2 * (_quat_err(quat0, r2) -
                                                           _quat_err(quat0, quat))]) / 1e-6
        step = jac.T @ np.linalg.solve(jac @ jac.T + 1e-6 * np.eye(6), err)
        q = np.clip(q + step, robot.lower, robot.upper)
    if np.linalg.norm(robot.fk(q, tip_link)[0] - target) > 1e-3:
        raise ProbeError(f'push waypoint {np.round(target, 3).tolist()} is out of reach')
    return q


def _quat_err(q_ref, q) -> np.ndarray:
    """Small rotation vector taking q to q_ref (both w, x, y, z)."""
    w1, v1 = q_ref[0], np.asarray(q_ref[1:])
    w2, v2 = q[0], -np.asarray(q[1:])          # conjugate of q
    w = w1 * w2 - v1 @ v2
    v = w1 * v2 + w2 * v1 + np.cross(v1, v2)
    return 2 * v * np.sign(w if w != 0 else 1.0)


def move_trajectory(q_from, q_to, velocity_limits, fraction=0.25, rate=20.0):
    """(times, positions, velocities) of a smooth (minimum-jerk) move from ``q_from`` to
    ``q_to`` at ``fraction`` of the velocity limits, at least 1 s; ``rate`` points per second,
    the first after t = 0."""
    import math
    q_from, q_to = np.asarray(q_from, float), np.asarray(q_to, float)
    peak = 1.875   # max of d/ds (10 s^3 - 15 s^4 + 6 s^5)
    duration = max(1.0, float(np.max(np.abs(q_to - q_from) * peak
                                      / (fraction * np.asarray(velocity_limits)))))
    t = np.linspace(0.0, duration, max(2, int(math.ceil(duration * rate))) + 1)[1:]
    s = t / duration
    shape = 10 * s ** 3 - 15 * s ** 4 + 6 * s ** 5
    dshape = (30 * s ** 2 - 60 * s ** 3 + 30 * s ** 4) / duration
    d = q_to - q_from
    return t, q_from + shape[:, None] * d, dshape[:, None] * d
