"""Arm identification by inverse-dynamics regression (ROS-free).

The arm's joint dynamics are linear in each joint's damping ``d``, armature ``a``, friction
loss ``f`` and in the gravity compensation factor ``c``; only the command latency ``L``
enters non-linearly. Per recorded sample and joint::

    tau_servo(L) - tau_rb  =  a qdd + d qd+ + f s(qd) - c g

* ``q, qd, qdd``: the recorded joint positions smoothed and differentiated by a
  Savitzky-Golay filter (``scipy.signal.savgol_filter``, cubic/quartic local polynomials over
  ``window_s``; zero phase, so no lag). A recording is cut at gaps (``core.bag_io.
  stream_gaps``: lost joint states) and filtered one segment at a time;
  samples of a segment that are not evenly spaced are first interpolated linearly onto an
  even grid of the median spacing;
* ``tau_servo(L)``: the torque the twin's servo would command, ``kp (p - q) + kv (v - qd+)``,
  with ``(p, v)`` the reference the controller follows (the twin's own JTC interpolation of
  the commanded points, :meth:`Twin._reference`) delayed by ``L``;
* ``qd+ = qd + qdd dt / 2``: the twin integrates the servo's ``kv`` and joint damping
  implicitly (implicitfast), so over a step they act on the velocity at the step's end; this
  is the twin's discretisation (``dt`` its timestep), the same the rollout fit sees;
* ``tau_rb``: MuJoCo inverse dynamics (``mj_inverse``) of the twin's rigid bodies with damping,
  armature and friction loss zeroed and no gravity compensation; ``g``: the compensation
  torque at ``c = 1`` (``qfrc_gravcomp`` with the twin's built-in gravcomp);
* ``s(qd) = tanh(qd / friction_eps)``: a smooth sign. MuJoCo's friction loss is a soft
  constraint that acts like a stiff viscous damper saturating at ``f``, not a discontinuous
  Coulomb sign, so near zero velocity the torque passes smoothly through zero.

Parameters not declared are held at the twin's current value (their columns move to the
left-hand side). The linear parameters are solved by bounded weighted least squares
(``scipy.optimize.lsq_linear``; per-joint weights 1 / residual RMS, two passes); the latency
by a grid over its bounds (1 ms) refined by a bounded scalar search on the same cost.

Covariance: ``s^2 (J^T J)^-1`` of the weighted problem with the latency's column taken by a
central difference; the residual is correlated over about one filter window, so each joint's
rows are down-weighted by its Bartlett variance inflation ``1 + 2 sum (1 - k/K) rho_k``
(lags up to the window). 95% intervals: Student-t.

Diagnostics (returned, never acted on silently): the condition number of the weighted,
column-normalised regressor (the excitation's quality; large = some parameter is not
excited); residual spikes (runs of samples beyond ``spike_sigma`` robust standard deviations
of their joint, at least ``spike_min_s`` long): what a contact with the arm looks like; the
joint-state noise the filter leaves behind (``sigma = std(q - S q) / sqrt(1 - h0)`` with
``h0`` the filter's centre weight), which the residual test compares the fit with.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import mujoco
import numpy as np

from ..bag_io import stream_gaps
from ..parameters import ParameterSpec, split_name

__all__ = ['ArmRegression', 'RegressionNotPossible', 'RegressionOptions',
           'planned_condition_number', 'regress_arm', 'regression_supported']

_FIELDS = ('armature', 'damping', 'frictionloss')


class RegressionNotPossible(ValueError):
    """The recordings or the declared parameters do not allow the regression (too few
    samples for the filter, a parameter it cannot fit): the caller may fall back to the
    rollout fit. Any other error is a bug and propagates."""


@dataclass
class RegressionOptions:
    """Filter, friction model and search settings of :func:`regress_arm`."""

    window_s: float = 0.1          # Savitzky-Golay window (s)
    polyorder: int = 4
    friction_eps: float = 0.02     # rad/s: tanh smooth sign of the friction loss
    latency_step: float = 0.001    # s: grid spacing of the latency search
    trim_s: float = 0.05           # s dropped at each end (filter edge effects)
    spike_sigma: float = 8.0       # robust standard deviations for a residual spike
    spike_min_s: float = 0.03      # s: the shortest run of samples that counts as a spike
    instruments: bool = False      # instrumental variables from the reference (else OLS)


@dataclass
class ArmRegression:
    """The regression's estimates and diagnostics (declared names, in spec order)."""

    values: dict[str, float]
    half_widths: dict[str, float]
    covariance: np.ndarray
    condition_number: float
    joint_noise: np.ndarray           # rad, per joint, estimated from the recordings
    torque_residual_rms: np.ndarray   # N m, per joint
    spikes: list[dict] = field(default_factory=list)
    latency_profile: list[tuple[float, float]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    samples: int = 0


def regression_supported(twin, specs: list[ParameterSpec]) -> bool:
    """True when every spec is an arm joint's damping / armature / friction loss, the command
    latency or the gravity compensation of ``twin`` (what :func:`regress_arm` can fit)."""
    joints = set(twin.joint_names)
    for s in specs:
        kind, el, fld = split_name(s.name)
        if kind == 'global' and fld in ('command_latency', 'gravity_compensation'):
            continue
        if kind == 'joint' and el in joints and fld in _FIELDS:
            continue
        return False
    return bool(specs)


def _segments(times, positions):
    """(runs, dt): the recording cut at gaps (``core.bag_io.stream_gaps``: a loaded PC's
    middleware drops joint states) into runs ``(t, q)`` of evenly spaced samples, each
    interpolated onto an even grid of the median spacing ``dt`` where its spacing jitters.
    Differentiating across a gap would turn the missing motion into a torque spike (measured:
    a 0.24 s gap at load 4 gave 105 N m on shoulder_pan and left its damping pinned at a
    bound), so every filter runs on one run at a time."""
    t = np.asarray(times, float)
    q = np.asarray(positions, float)
    dt, at = stream_gaps(t)
    runs = []
    for tt, qq in zip(np.split(t, at + 1), np.split(q, at + 1)):
        if tt.size > 1 and np.max(np.abs(np.diff(tt) - dt)) > 0.01 * dt:
            grid = np.arange(tt[0], tt[-1] + 0.5 * dt, dt)
            qq = np.column_stack([np.interp(grid, tt, qq[:, j]) for j in range(q.shape[1])])
            tt = grid
        runs.append((tt, qq))
    return runs, dt


def _savgol(a, slices, kw, **extra):
    """``savgol_filter`` of ``a`` along axis 0, one segment at a time."""
    from scipy.signal import savgol_filter
    return np.concatenate([savgol_filter(a[s], **kw, **extra) for s in slices])


def _filtered(rec, opt: RegressionOptions):
    """(t, keep, q, qd, qdd, sign, noise per joint, filter, segments) of a recording, smoothed
    by Savitzky-Golay per gap-free segment; segments shorter than three filter windows are
    left out."""
    from scipy.signal import savgol_coeffs
    runs, dt = _segments(rec.times, rec.positions)
    win = max(opt.polyorder + 2, int(round(opt.window_s / dt)) | 1)
    if win % 2 == 0:
        win += 1
    runs = [(tt, qq) for tt, qq in runs if tt.size >= 3 * win]
    if not runs:
        raise RegressionNotPossible(f'{rec.name}: no run of {3 * win} evenly spaced samples '
                                    f'(too few for a {opt.window_s} s filter window)')
    ends = np.cumsum([tt.size for tt, _ in runs])
    slices = [slice(int(a), int(b)) for a, b in zip(np.concatenate([[0], ends[:-1]]), ends)]
    t = np.concatenate([tt for tt, _ in runs])
    q = np.concatenate([qq for _, qq in runs])
    kw = dict(window_length=win, polyorder=opt.polyorder, axis=0, mode='interp')
    qs = _savgol(q, slices, kw)
    qd = _savgol(q, slices, kw, deriv=1, delta=dt)
    qdd = _savgol(q, slices, kw, deriv=2, delta=dt)
    h0 = savgol_coeffs(win, opt.polyorder)[win // 2]
    noise = np.std(q - qs, axis=0) / np.sqrt(max(1e-9, 1.0 - h0))
    keep = np.zeros(t.size, bool)
    for s in slices:
        ts = t[s]
        keep[s] = (ts >= ts[0] + opt.trim_s) & (ts <= ts[-1] - opt.trim_s)
    # The friction loss switches with the velocity's sign, faster than the filter: its column
    # goes through the same filter as the torque it explains.
    sign = _savgol(np.tanh(qd / opt.friction_eps), slices, kw)
    return t, keep, qs[keep], qd[keep], qdd[keep], sign[keep], noise, kw, slices


class _Terms:
    """Per-recording quantities that do not depend on the parameters."""

    def __init__(self, twin, rec, opt: RegressionOptions):
        self.name = rec.name
        self.t_full, self.keep, self.q, self.qd, self.qdd, self.sign, self.noise, \
            self.filt, self.segments = _filtered(rec, opt)
        self.t = self.t_full[self.keep]
        self.win = self.filt['window_length']
        dt = twin.timestep
        self.qd_plus = self.qd + 0.5 * dt * self.qdd
        self.traj = twin._reference(rec.q0 if rec.reference_start is None
                                    else np.asarray(rec.reference_start, float),
                                    rec.traj_times, rec.traj_positions, rec.traj_velocities)
        self.tau_rb, self.grav = _inverse_dynamics(twin, self.q, self.qd, self.qdd)
        # Instruments: the same columns from the commanded reference (delayed by the twin's
        # current latency), through the same filter: correlated with the measured columns,
        # not with the joint-state noise that the measured columns and the servo torque share.
        pz, vz = twin._sample(self.traj, self.t_full - twin.latency)
        az = np.concatenate([np.gradient(vz[s], self.t_full[s], axis=0)
                             for s in self.segments])
        f = lambda a: _savgol(a, self.segments, self.filt)[self.keep]   # noqa: E731
        self.inst = {'armature': f(az), 'damping': f(vz + 0.5 * dt * az),
                     'frictionloss': f(np.tanh(vz / opt.friction_eps))}

    def servo(self, twin, kp, kv, latency: float) -> np.ndarray:
        p, v = twin._sample(self.traj, self.t_full - latency)
        # The reference through the same filter as the measurements, so the servo's
        # tracking error carries no filter attenuation (kp x a tiny attenuation of q would
        # swamp the joint terms).
        p = _savgol(p, self.segments, self.filt)[self.keep]
        v = _savgol(v, self.segments, self.filt)[self.keep]
        return kp * (p - self.q) + kv * (v - self.qd_plus)

    def column(self, fld: str) -> np.ndarray:
        return {'armature': self.qdd, 'damping': self.qd_plus, 'frictionloss': self.sign}[fld]

    def instrument(self, fld: str) -> np.ndarray:
        return self.inst[fld]


def _inverse_dynamics(twin, q, qd, qdd):
    """(tau_rb, g): rigid-body inverse dynamics without damping, armature, friction loss
    and gravity compensation; the compensation torque at the twin's built-in gravcomp."""
    m = twin.model
    saved = {f: getattr(m, f).copy() for f in ('dof_damping', 'dof_armature',
                                                'dof_frictionloss', 'body_gravcomp')}
    gravcomp = m.body_gravcomp.copy()
    gravcomp[twin._robot_bodies] = twin._gravcomp0
    d = mujoco.MjData(m)
    qadr, dadr = twin._qadr, twin._dadr
    n = q.shape[0]
    tau = np.empty_like(q)
    grav = np.empty_like(q)
    try:
        m.dof_damping[:] = 0.0
        m.dof_armature[:] = 0.0
        m.dof_frictionloss[:] = 0.0
        for k in range(n):
            d.qpos[qadr], d.qvel[dadr], d.qacc[dadr] = q[k], qd[k], qdd[k]
            m.body_gravcomp[:] = 0.0
            mujoco.mj_inverse(m, d)
            tau[k] = d.qfrc_inverse[dadr]
            m.body_gravcomp[:] = gravcomp
            mujoco.mj_fwdPosition(m, d)
            mujoco.mj_fwdVelocity(m, d)
            grav[k] = d.qfrc_gravcomp[dadr]
    finally:
        for f, v in saved.items():
            getattr(m, f)[...] = v
    return tau, grav


def _bartlett(r: np.ndarray, lags: int) -> float:
    r = r - r.mean()
    var = float(r @ r)
    if var <= 0:
        return 1.0
    k = np.arange(1, min(lags, r.size - 1) + 1)
    rho = np.array([float(r[:-i] @ r[i:]) / var for i in k])
    return float(max(1.0, 1.0 + 2.0 * np.sum((1.0 - k / (lags + 1)) * rho)))


def _runs(mask: np.ndarray):
    """(start, end) index pairs of the True runs of ``mask`` (end exclusive)."""
    d = np.diff(np.concatenate([[0], mask.astype(int), [0]]))
    return list(zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1)))


def regress_arm(twin, specs: list[ParameterSpec], recordings, opt: RegressionOptions | None
                = None) -> ArmRegression:
    """Fit ``specs`` (see :func:`regression_supported`) to ``recordings`` by regression.

    The twin's other parameters (servo gains, undeclared joint values) are its current ones.
    Raises RegressionNotPossible when the specs are not all regressable or a recording is
    too short.
    """
    from scipy import optimize, stats
    opt = opt or RegressionOptions()
    if not regression_supported(twin, specs):
        raise RegressionNotPossible(
            'regression fits only arm joint damping / armature / frictionloss, '
            'global/command_latency and global/gravity_compensation')
    timings = {}
    t0 = time.perf_counter()
    terms = [_Terms(twin, r, opt) for r in recordings]
    timings['filter_and_inverse_dynamics_s'] = time.perf_counter() - t0
    t1 = time.perf_counter()
    nj = len(twin.joint_names)
    jidx = {n: i for i, n in enumerate(twin.joint_names)}
    m = twin.model
    kp = m.actuator_gainprm[twin._act, 0].copy()
    kv = -m.actuator_biasprm[twin._act, 2].copy()
    names = [s.name for s in specs]
    lat_spec = next((s for s in specs if s.name == 'global/command_latency'), None)
    gc_known = twin.gravity_compensation
    # Linear columns: (spec index, joint or -1 for gc, field)
    lin = []
    for i, s in enumerate(specs):
        kind, el, fld = split_name(s.name)
        if kind == 'joint':
            lin.append((i, jidx[el], fld))
        elif fld == 'gravity_compensation':
            lin.append((i, -1, 'gc'))
    declared = {(j, f) for _, j, f in lin}
    fixed = {(j, f): float(getattr(m, f'dof_{f}')[twin._dadr[j]])
             for j in range(nj) for f in _FIELDS if (j, f) not in declared}
    t_all = np.concatenate([tm.t for tm in terms])
    rows_per_joint = t_all.size
    # Regressor blocks per joint: X[j] (samples, n_lin); y[j] = servo - rigid - fixed terms.
    X = np.zeros((nj, rows_per_joint, len(lin)))
    Z = np.zeros_like(X)
    base = np.zeros((nj, rows_per_joint))
    offset = 0
    for tm in terms:
        sl = slice(offset, offset + tm.t.size)
        for c, (_, j, f) in enumerate(lin):
            if j < 0:
                X[:, sl, c] = Z[:, sl, c] = -tm.grav.T
            else:
                X[j, sl, c] = tm.column(f)[:, j]
                Z[j, sl, c] = tm.instrument(f)[:, j]
        fixed_part = tm.tau_rb.copy()
        for (j, f), v in fixed.items():
            fixed_part[:, j] += v * tm.column(f)[:, j]
        if not any(f == 'gc' for _, _, f in lin):
            fixed_part -= gc_known * tm.grav
        base[:, sl] = fixed_part.T
        offset += tm.t.size
    scale = np.array([specs[i].scale for i, _, _ in lin])
    lo = np.array([specs[i].lower for i, _, _ in lin]) / scale
    hi = np.array([specs[i].upper for i, _, _ in lin]) / scale
    Xs = X * scale                      # scaled variables: value / scale
    Zs = Z * scale if opt.instruments else Xs

    def target(latency):
        return np.concatenate([tm.servo(twin, kp, kv, latency) for tm in terms]).T - base

    cache = {}

    def factor(w):
        """(Q of the weighted instruments, Q^T X): the regressor projected on the
        instruments (two-stage least squares; Q^T X = R for OLS). Independent of the
        latency."""
        key = w.tobytes()
        if key not in cache:
            cache.clear()
            Q, _ = np.linalg.qr((Zs * w[:, None, None]).reshape(-1, len(lin)))
            cache[key] = Q, Q.T @ (Xs * w[:, None, None]).reshape(-1, len(lin))
        return cache[key]

    def solve(latency, w, bounded=True):
        y = target(latency)
        Q, R = factor(w)
        b = (y * w[:, None]).reshape(-1)
        c = Q.T @ b
        if bounded:
            x = optimize.lsq_linear(R, c, bounds=(lo, hi), method='bvls').x
        else:
            x = np.clip(np.linalg.lstsq(R, c, rcond=None)[0], lo, hi)
        r = (y - np.einsum('jnc,c->jn', Xs, x))
        return x, r, float(np.sum((r * w[:, None]) ** 2))

    lat_now = twin.latency
    w = 1.0 / np.maximum(kp * np.mean([tm.noise for tm in terms], axis=0), 1e-6)
    profile = []
    if lat_spec is not None:
        grid = np.arange(lat_spec.lower, lat_spec.upper + 1e-12, opt.latency_step)
        costs = [solve(L, w, bounded=False)[2] for L in grid]
        profile = list(zip(grid.tolist(), costs))
        k = int(np.argmin(costs))
        # Reweight at the grid's best, then refine with the bounded solve.
        _, r, _ = solve(grid[k], w)
        w = 1.0 / np.maximum(np.sqrt(np.mean(r ** 2, axis=1)), 1e-9)
        a, b = grid[max(0, k - 1)], grid[min(grid.size - 1, k + 1)]
        res = optimize.minimize_scalar(lambda L: solve(L, w)[2], bounds=(a, b),
                                       method='bounded', options={'xatol': 2e-6})
        latency = float(res.x)
    else:
        latency = lat_now
        _, r, _ = solve(latency, w)
        w = 1.0 / np.maximum(np.sqrt(np.mean(r ** 2, axis=1)), 1e-9)
    x, r, _ = solve(latency, w)
    w = 1.0 / np.maximum(np.sqrt(np.mean(r ** 2, axis=1)), 1e-9)
    x, r, _ = solve(latency, w)
    timings['latency_search_and_solve_s'] = time.perf_counter() - t1
    # Covariance (scaled variables + latency), rows weighted and inflated per joint.
    lags = max(t.win for t in terms)
    infl = np.array([_bartlett(r[j] * w[j], lags) for j in range(nj)])
    we = w / np.sqrt(infl)
    Qc, _ = np.linalg.qr((Zs * we[:, None, None]).reshape(-1, len(lin)))
    Xhat = Qc @ (Qc.T @ (Xs * we[:, None, None]).reshape(-1, len(lin)))
    cols = [Xhat.reshape(Xs.shape)]
    if lat_spec is not None:
        h = 1e-4
        dy = (target(latency + h) - target(latency - h)) / (2 * h) * lat_spec.scale
        cols.append((-dy * we[:, None])[:, :, None])   # d(model - y)/d(L / scale)
    J = np.concatenate(cols, axis=2).reshape(-1, len(lin) + (lat_spec is not None))
    rw = (r * we[:, None]).reshape(-1)
    dof = max(1, rw.size - J.shape[1])
    s2 = float(rw @ rw) / dof
    JtJ = J.T @ J
    cov_s = s2 * np.linalg.pinv(JtJ)
    tq = stats.t.ppf(0.975, dof)
    norms = np.linalg.norm(J, axis=0)
    cond = float(np.linalg.cond(J / np.where(norms > 0, norms, 1.0)))
    order = [i for i, _, _ in lin] + ([names.index(lat_spec.name)] if lat_spec else [])
    sc_all = np.concatenate([scale, [lat_spec.scale] if lat_spec else []])
    cov = np.zeros((len(specs), len(specs)))
    for a_, ia in enumerate(order):
        for b_, ib in enumerate(order):
            cov[ia, ib] = cov_s[a_, b_] * sc_all[a_] * sc_all[b_]
    values, half = {}, {}
    for c, (i, _, _) in enumerate(lin):
        values[names[i]] = float(x[c] * scale[c])
    if lat_spec is not None:
        values[lat_spec.name] = latency
    for i, n in enumerate(names):
        half[n] = float(tq * np.sqrt(max(cov[i, i], 0.0)))
    values = {n: values[n] for n in names}
    # Residual spikes: runs beyond spike_sigma robust standard deviations.
    spikes = []
    offset = 0
    for tm in terms:
        dt = float(np.median(np.diff(tm.t)))
        min_len = max(3, int(np.ceil(opt.spike_min_s / dt)))
        for j in range(nj):
            rj = r[j]
            mad = 1.4826 * np.median(np.abs(rj - np.median(rj)))
            z = np.abs(r[j, offset:offset + tm.t.size] - np.median(rj)) / max(mad, 1e-12)
            for a_, b_ in _runs(z > opt.spike_sigma):
                if b_ - a_ >= min_len:
                    spikes.append({'recording': tm.name, 'joint': twin.joint_names[j],
                                   't_start': float(tm.t[a_]), 't_end': float(tm.t[b_ - 1]),
                                   'peak_sigma': float(z[a_:b_].max()),
                                   'peak_torque': float(np.abs(r[j, offset + a_:offset
                                                                 + b_]).max())})
        offset += tm.t.size
    noise = np.sqrt(np.mean([tm.noise ** 2 for tm in terms], axis=0))
    return ArmRegression(values, half, cov, cond, noise, np.sqrt(np.mean(r ** 2, axis=1)),
                         spikes, profile, timings, int(rows_per_joint))


def planned_condition_number(twin, probes, reference_start, *, friction_eps: float = 0.02,
                             rate: float = 500.0) -> float:
    """Condition number of the regressor ``probes`` would give if the arm followed them
    exactly (q = the reference): their excitation for :func:`regress_arm`, before moving.

    Rows weighted per joint by 1 / kp (a position noise becomes kp x it in torque), columns
    normalised. The latency's column is left out: with q = the reference it is exactly
    ``kp`` x the damping column + ``kv`` x the armature column (the latency shows only in the
    tracking error the arm will have), so :attr:`ArmRegression.condition_number` on the
    recorded data is the one that includes it.
    """
    m = twin.model
    kp = m.actuator_gainprm[twin._act, 0]
    nj = len(twin.joint_names)
    blocks = []
    for p in probes:
        traj = twin._reference(np.asarray(reference_start, float), p.times, p.positions,
                               p.velocities)
        t = np.arange(0.0, float(p.times[-1]), 1.0 / rate)
        q, qd = twin._sample(traj, t)
        qdd = np.gradient(qd, t, axis=0)
        _, grav = _inverse_dynamics(twin, q, qd, qdd)
        X = np.zeros((nj, t.size, 3 * nj + 1))
        for j in range(nj):
            X[j, :, 3 * j] = qdd[:, j]
            X[j, :, 3 * j + 1] = qd[:, j]
            X[j, :, 3 * j + 2] = np.tanh(qd[:, j] / friction_eps)
            X[j, :, -1] = -grav[:, j]
        blocks.append(X / kp[:, None, None])
    A = np.concatenate(blocks, axis=1).reshape(-1, 3 * nj + 1)
    norms = np.linalg.norm(A, axis=0)
    return float(np.linalg.cond(A / np.where(norms > 0, norms, 1.0)))
