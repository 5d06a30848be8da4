"""Fit declared twin parameters to recorded trajectories (ROS-free).

Residual: simulated minus recorded joint positions (rad) at the recorded times, plus object
positions (m, weighted) when recorded. Every evaluation is one batched ``mujoco.rollout`` per
recording, one model copy per parameter vector, so finite-difference Jacobians and CMA-ES
generations run as batches.

* ``least_squares``: ``mujoco.minimize.least_squares`` (the solver ``mujoco.sysid`` drives),
  fed a vectorised residual so each Jacobian is one batched rollout; restarted from random
  points inside the bounds, keeping the lowest cost: the arm's fit has a second minimum
  (command latency too long, armature and damping too small) that a start at the priors
  falls into on some cells (measured: 1 of 5 drawn cells, cost 10% above the truth's);
* ``cmaes``: CMA-ES (``cmaes``) for non-smooth contact parameters, then a least-squares
  polish;
* intervals: ``mujoco.sysid.calculate_intervals`` (Student-t on J^T J and the residual
  variance) at the optimum, with the Jacobian taken by finite differences (the polish: the
  solver's last Jacobian);
* regression (the default for arm parameters, ``method='auto'``): inverse-dynamics
  regression (core/sysid/regression.py) for the linear parameters and the latency, then ONE
  least-squares polish of the rollout fit from that start, kept only where it lowers the
  held-out error (the fitting residual when nothing is held out). No polish when the
  regression's residual has spikes (a contact: the rollouts would fit it) or with
  ``method='regression'``. The result's ``method`` says which produced the estimates:
  ``regression`` or ``regression+least_squares``; the multi-start ``least_squares`` stays
  the reference path (``method='least_squares'``).

Every arm fit is checked (``FitResult.warnings``, ``FitResult.diagnostics``; the node logs the
warnings, the harness records them): estimates pinned at a bound, a fitting residual above
``RESIDUAL_NOISE_RATIO`` x the joint-state noise estimated from the recordings, and residual
spikes of the regression (contact contamination). A pinned estimate, and every estimate of a
contaminated fit, is returned with ``identified=False``: sim_server keeps its prior and
randomisation leaves it out, so it is never used silently.

Optimiser variables are value / scale (ParameterSpec.scale) so all are of order one.
"""
from __future__ import annotations

import dataclasses
import io
import time
from dataclasses import dataclass, field

import numpy as np

from ..parameters import (
    ParameterEstimate,
    ParameterSet,
    ParameterSpec,
    UnknownParameterError,
)
from ..twin import Twin, UnstableTwinError

__all__ = ['FitResult', 'NotConvergedError', 'Recording', 'confidence_half_widths', 'fit_warnings',
           'identify', 'joint_noise', 'rms_error']

NON_SMOOTH_FIELDS = ('friction', 'torsional_friction', 'rolling_friction')
RESIDUAL_NOISE_RATIO = 1.5   # fitting residual / joint-state noise above which a fit is suspect
BOUND_TOLERANCE = 1e-3       # of the bounds' width: an estimate this close sits at a bound
# Levenberg-Marquardt iterations of the rollout polish after the regression (method 'auto').
# Run to convergence (xtol 1e-6) the polish took 3 iterations on the harness's probes (2 x 8 s,
# 500 Hz) and 7 on the node's (2 x 4 s, 100 Hz), plus a finite-difference batch at the end
# point for the intervals: 20 s of the harness's 67 s identify stage. The cost is flat along
# the damping-latency valley, so the iterations after the second move it by < 1e-5 relative.
# Measured on the default cell (arm_id bench recordings): 2 iterations, intervals from the
# last Jacobian the solver took, gave the converged fit's 10/20 within 10% and 20/20 covered
# (live) at 96 rollouts instead of 440; 1 iteration gave 9/20 (damping 15-33% off instead of
# 12-29%); harness probes: 20/20 and 20/20 from 1 iteration on.
POLISH_ITERATIONS = 2


class NotConvergedError(RuntimeError):
    """The optimiser stopped without converging (Identify NOT_CONVERGED)."""


@dataclass
class Recording:
    """One probe execution as recorded on the cell.

    times: sample times (s) from the trajectory start; positions: (n, n_joints) measured
    joint positions; q0 / qd0: the state at t = 0; reference_start: the reference the
    controller held before the trajectory (default q0). object_positions: optional
    {object_id: (n, 3)} measured object positions, object_poses0 {id: (xyz, quat)} at t = 0.
    """

    times: np.ndarray
    positions: np.ndarray
    q0: np.ndarray
    traj_times: np.ndarray
    traj_positions: np.ndarray
    traj_velocities: np.ndarray | None = None
    qd0: np.ndarray | None = None
    reference_start: np.ndarray | None = None
    object_positions: dict = field(default_factory=dict)
    object_poses0: dict = field(default_factory=dict)
    name: str = 'probe'


@dataclass
class FitResult:
    """An arm fit: the estimates, residuals before/after (rad), held-out errors, and fit details."""
    parameters: ParameterSet
    residual_before: float        # RMS over the fitting recordings, prior values
    residual_after: float
    heldout_error_before: float   # RMS over held-out recordings (nan when none)
    heldout_error_after: float
    wall_time: float
    n_rollouts: int
    method: str
    iterations: int
    covariance: np.ndarray
    history: list[float] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)   # degenerate / contaminated fit
    diagnostics: dict = field(default_factory=dict)     # condition number, noise, stages


def rms_error(r: np.ndarray) -> float:
    """Root mean square of ``r`` (nan when empty)."""
    return float(np.sqrt(np.mean(np.square(r)))) if r.size else float('nan')


class _Problem:
    """Residuals of a set of recordings as a function of scaled parameter vectors."""

    def __init__(self, twin: Twin, specs: list[ParameterSpec], recordings: list[Recording],
                 nthread: int, object_weight: float):
        self.twin, self.specs, self.recs = twin, specs, recordings
        self.scale = np.array([s.scale for s in specs])
        self.nthread = nthread
        self.object_weight = object_weight
        self.n_rollouts = 0

    def values(self, x: np.ndarray) -> list[dict]:
        return [{s.name: float(v) for s, v in zip(self.specs, col * self.scale)} for col in x.T]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """x: (n_params, k) scaled -> residuals (m, k)."""
        x = np.asarray(x, float).reshape(len(self.specs), -1)
        samples = self.values(x)
        cols = []
        for rec in self.recs:
            res = self.twin.rollout(
                rec.q0, rec.qd0, rec.traj_times, rec.traj_positions,
                param_samples=samples, nthread=self.nthread,
                traj_velocities=rec.traj_velocities, reference_start=rec.reference_start,
                object_poses=rec.object_poses0 or None, sample_times=rec.times)
            self.n_rollouts += len(samples)
            parts = [(res.positions - rec.positions[None]).reshape(len(samples), -1)]
            for oid, xyz in rec.object_positions.items():
                k = res.object_ids.index(oid)
                d = res.object_poses[:, :, k, :3] - np.asarray(xyz)[None]
                parts.append(self.object_weight * d.reshape(len(samples), -1))
            cols.append(np.concatenate(parts, axis=1))
        return np.concatenate(cols, axis=1).T

    def jacobian(self, x: np.ndarray, step: float = 1e-3) -> tuple[np.ndarray, np.ndarray]:
        """Forward-difference Jacobian (one batch); steps go inward at an upper bound."""
        n = len(self.specs)
        upper = np.array([s.upper for s in self.specs]) / self.scale
        h = np.where(x + step <= upper, step, -step)
        xs = np.column_stack([x] + [x + h[i] * np.eye(n)[i] for i in range(n)])
        r = self(xs)
        return r[:, 0], (r[:, 1:] - r[:, :1]) / h


def confidence_half_widths(residual: np.ndarray, jac: np.ndarray, alpha: float = 0.05):
    """(covariance, half widths) via mujoco.sysid.calculate_intervals (own copy as fallback)."""
    try:
        from mujoco.sysid import calculate_intervals
        return calculate_intervals([residual], jac, alpha=alpha)
    except ImportError:  # mujoco without the sysid extra
        from scipy import stats
        dof = max(1, residual.size - jac.shape[1])
        s2 = residual @ residual / dof
        cov = s2 * np.linalg.pinv(jac.T @ jac)
        return cov, np.sqrt(np.diag(cov)) * stats.t.ppf(1 - alpha / 2, dof)


def _validate(twin: Twin, specs: list[ParameterSpec]) -> None:
    if not specs:
        raise ValueError('no parameters declared to identify')
    for s in specs:
        try:
            twin.validate_names([s.name])
        except UnknownParameterError:
            raise
        if s.name.startswith('global/command_latency') and s.lower < 0:
            raise ValueError(f'{s.name}: lower bound must be >= 0')


def _near_bound(x, lo, hi) -> np.ndarray:
    """Per parameter: within BOUND_TOLERANCE of its bounds' width from a bound."""
    tol = BOUND_TOLERANCE * (np.asarray(hi) - np.asarray(lo))
    return (np.asarray(x) - lo <= tol) | (hi - np.asarray(x) <= tol)


def _least_squares(problem: _Problem, x0, lo, hi, max_iter: int, trace_out=None,
                   final_jac: bool = True):
    """(x, objective history, converged, iterations, solver text); ``trace_out`` (a list)
    receives the solver's IterLog trace, its last entry with a Jacobian: at the end point
    (``final_jac``, one more finite-difference batch) or, without, the last one the solver
    took (at the start of its last iteration; ``candidate`` says where)."""
    from mujoco import minimize
    out = io.StringIO()
    if final_jac:
        x, trace = minimize.least_squares(
            x0, problem, bounds=[lo, hi], eps=1e-3, max_iter=max_iter, xtol=1e-6, gtol=1e-10,
            verbose=minimize.Verbosity.FULLITER, output=out)
    else:
        jacs, bounds = [], [lo[:, None], hi[:, None]]   # the solver's column layout

        def jacobian(x, r):   # the solver's own finite differences, kept
            jac, _ = minimize.jacobian_fd(problem, x, r, 1e-3, 0, bounds)
            jacs.append((x.copy(), jac))
            return jac
        x, trace = minimize.least_squares(
            x0, problem, bounds=[lo, hi], jacobian=jacobian, max_iter=max_iter, xtol=1e-6,
            gtol=1e-10, verbose=minimize.Verbosity.ITER, output=out)
        if jacs:
            trace[-1] = dataclasses.replace(trace[-1], candidate=jacs[-1][0],
                                            jacobian=jacs[-1][1])
    text = out.getvalue()
    if trace_out is not None:
        trace_out.extend(trace)
    history = [float(t.objective) for t in trace]
    converged = 'maximum iterations reached' not in text and 'factorization failed' not in text
    return x, history, converged, len(trace) - 1, text


def _multistart(problem: _Problem, x_start, lo, hi, max_iter: int, restarts: int,
                seed: int, progress=None):
    """Least squares from ``x_start`` and up to ``restarts`` random starts in the middle 60%
    of the bounds; the lowest converged cost wins. Stops early once the best cost has been
    reached from two starts (the same minimum found twice)."""
    rng = np.random.default_rng(seed)
    starts = [x_start] + [lo + rng.uniform(0.2, 0.8, lo.size) * (hi - lo)
                          for _ in range(restarts)]
    runs = []             # (x, history, converged, iterations, solver text)
    cost = lambda run: run[1][-1]   # noqa: E731
    done = []
    for k, xs in enumerate(starts):
        runs.append(_least_squares(problem, xs, lo, hi, max_iter))
        done = [r for r in runs if r[2]]
        if progress:
            progress('least_squares', (k + 1) / len(starts), min(map(cost, runs)))
        if done:
            best = min(map(cost, done))
            if sum(cost(r) <= best * (1 + 1e-4) for r in done) >= 2:
                break
    return min(done, key=cost) if done else runs[0]


def _cmaes(problem: _Problem, x0, lo, hi, generations: int, seed: int):
    from cmaes import CMA
    width = hi - lo
    opt = CMA(mean=np.clip(x0, lo + 1e-9, hi - 1e-9), sigma=float(np.min(width)) / 4,
              bounds=np.column_stack([lo, hi]), seed=seed,
              population_size=max(8, 4 + int(3 * np.log(len(x0)))))
    best_x, best_f, history = x0, np.inf, []
    for _ in range(generations):
        xs = np.array([opt.ask() for _ in range(opt.population_size)])
        r = problem(xs.T)
        f = 0.5 * np.sum(r * r, axis=0)
        opt.tell(list(zip(xs, f)))
        k = int(np.argmin(f))
        if f[k] < best_f:
            best_x, best_f = xs[k], float(f[k])
        history.append(best_f)
        if opt.should_stop():
            break
    return best_x, history


def _estimates(specs, x, scale, half) -> ParameterSet:
    out = ParameterSet()
    for i, s in enumerate(specs):
        v = float(x[i] * scale[i])
        hw = float(half[i] * scale[i])
        identified = bool(np.isfinite(hw) and hw < 0.25 * (s.upper - s.lower))
        lo95 = max(s.lower, v - hw) if np.isfinite(hw) else s.lower
        hi95 = min(s.upper, v + hw) if np.isfinite(hw) else s.upper
        out.add(ParameterEstimate(s.name, v, lo95, hi95, s.prior, s.unit, identified))
    return out


def _unidentify(result_set: ParameterSet, names) -> ParameterSet:
    """``result_set`` with ``names`` marked not identified (sim_server then keeps their
    priors, randomisation leaves them out)."""
    out = ParameterSet()
    for e in result_set:
        out.add(ParameterEstimate(e.name, e.value, e.lower_95, e.upper_95, e.prior, e.unit,
                                  e.identified and e.name not in names))
    return out


def fit_warnings(specs, values: dict, residual: float, noise: float | None,
                 spikes=()) -> tuple[list[str], list[str]]:
    """(warnings, names at a bound) for a fit: estimates pinned at a bound, a residual above
    RESIDUAL_NOISE_RATIO x the joint-state noise, residual spikes (contact)."""
    warns, pinned = [], []
    for s in specs:
        v, tol = values[s.name], BOUND_TOLERANCE * (s.upper - s.lower)
        side = 'lower' if v <= s.lower + tol else 'upper' if v >= s.upper - tol else ''
        if side:
            pinned.append(s.name)
            warns.append(f'{s.name} = {v:.4g} is pinned at its {side} bound '
                         f'({s.lower:g}..{s.upper:g}): not identified by these probes, or '
                         f'the model cannot explain them (contact, wrong bounds)')
    if noise and np.isfinite(residual) and residual > RESIDUAL_NOISE_RATIO * noise:
        warns.append(f'fit residual {residual:.3g} rad is {residual / noise:.1f} x the '
                     f'joint-state noise {noise:.3g} rad (test: <= {RESIDUAL_NOISE_RATIO:g} x):'
                     f' the twin does not explain the motion (contact, model error)')
    if spikes:
        where = sorted({f"{sp['recording']}:{sp['joint']}@{sp['t_start']:.2f}s" for sp in spikes})
        warns.append(f'{len(spikes)} residual spike(s) in the torque regression, '
                     f'{", ".join(where[:6])}{" ..." if len(where) > 6 else ""}: '
                     f'contact during the probes? (rollout polish skipped)')
    return warns, pinned


def joint_noise(recordings) -> float:
    """RMS joint-state noise (rad) of ``recordings`` (regression.py's filter residual)."""
    from .regression import RegressionOptions, _filtered
    vals = []
    for r in recordings:
        try:
            vals.append(_filtered(r, RegressionOptions())[6])
        except ValueError:
            continue
    return float(np.sqrt(np.mean(np.square(vals)))) if vals else float('nan')


def _regression_fit(twin, specs, recordings, heldout, problem, lo, hi, x0, max_iter,
                    nthread, object_weight, progress, polish: bool):
    """The regression path of :func:`identify` (see the module docstring)."""
    from .regression import regress_arm
    scale = problem.scale
    stages = {}
    t = time.perf_counter()
    reg = regress_arm(twin, specs, recordings)
    stages['regression_s'] = time.perf_counter() - t
    if progress:
        progress('regression', 0.3, float('nan'))
    x_reg = np.clip(np.array([reg.values[s.name] for s in specs]) / scale, lo, hi)
    hp = _Problem(twin, specs, heldout, nthread, object_weight) if heldout else None
    t = time.perf_counter()
    r_reg = problem(x_reg[:, None])[:, 0]
    held_reg = rms_error(hp(x_reg[:, None])[:, 0]) if hp else float('nan')
    stages['regression_rollouts_s'] = time.perf_counter() - t
    noise = float(np.sqrt(np.mean(reg.joint_noise ** 2)))
    score = (lambda r, h: h if hp else rms_error(r))   # noqa: E731
    x, r, history, iters, method, note = x_reg, r_reg, [], 0, 'regression', ''
    polished = None
    if reg.spikes:
        note = 'skipped: residual spikes (contact?)'
    elif not polish:
        note = "skipped: method 'regression'"
    else:
        t = time.perf_counter()
        trace = []
        limit = min(max_iter, POLISH_ITERATIONS)
        xp, hist, converged, it, text = _least_squares(
            problem, x_reg, lo, hi, limit, trace, final_jac=False)
        if not converged and it < max_iter and _near_bound(xp, lo, hi).any():
            # An estimate still at its bound after the short polish (the 100 Hz regression
            # leaves dampings there; 2 iterations left shoulder_pan damping at 0 in a live
            # run): polish on to convergence, as the reference fit does.
            more = []
            xp, hist2, converged, it2, text = _least_squares(
                problem, xp, lo, hi, max_iter - it, more, final_jac=False)
            hist, it, limit = hist + hist2, it + it2, max_iter
            trace.extend(more)
        stages['polish_s'] = time.perf_counter() - t
        rp = problem(xp[:, None])[:, 0]
        held_p = rms_error(hp(xp[:, None])[:, 0]) if hp else float('nan')
        polished = {'residual': rms_error(rp), 'heldout': held_p, 'converged': converged,
                    'iterations': it}
        if progress:
            progress('least_squares', 0.8, hist[-1] if hist else float('nan'))
        if score(rp, held_p) < score(r_reg, held_reg):
            x, r, history, iters = xp, rp, hist, it
            method = 'regression+least_squares'
            note = 'kept: lower ' + ('held-out error' if hp else 'fitting residual')
            if not converged:
                note += f' ({it} of at most {limit} iterations)'
        else:
            note = 'discarded: no lower ' + ('held-out error' if hp else 'fitting residual')
    t = time.perf_counter()
    if method == 'regression':
        half = np.array([reg.half_widths[s.name] for s in specs]) / scale
        cov = reg.covariance
    else:
        # The solver's last Jacobian (forward differences, the same step as
        # _Problem.jacobian): at the start of the polish's last iteration, one step from x
        # (the regression left the polish a step or two of fine tuning; the curvature does
        # not change over it: see POLISH_ITERATIONS).
        last = trace[-1] if trace else None
        if last is not None and last.jacobian is not None:
            rj, jac = r, np.asarray(last.jacobian)
        else:
            rj, jac = problem.jacobian(x)
        cov_scaled, half = confidence_half_widths(rj, jac)
        cov = cov_scaled * np.outer(scale, scale)
    stages['intervals_s'] = time.perf_counter() - t
    result_set = _estimates(specs, x, scale, half)
    values = result_set.values()
    warns, pinned = fit_warnings(specs, values, rms_error(r), noise, reg.spikes)
    result_set = _unidentify(result_set, values if reg.spikes else pinned)
    held_before = held_after = float('nan')
    if hp:
        rh = hp(np.column_stack([x0, x]))
        held_before, held_after = rms_error(rh[:, 0]), rms_error(rh[:, 1])
        problem.n_rollouts += hp.n_rollouts
    diagnostics = {
        'condition_number': reg.condition_number, 'joint_noise': noise,
        'joint_noise_per_joint': reg.joint_noise.tolist(),
        'torque_residual_rms': reg.torque_residual_rms.tolist(), 'spikes': reg.spikes,
        'at_bound': pinned, 'regression': {'values': reg.values, 'residual': rms_error(r_reg),
                                           'heldout': held_reg, **reg.timings},
        'polish': {'note': note, **(polished or {})}, 'stages_s': stages}
    return x, r, history, iters, method, cov, result_set, warns, diagnostics, \
        held_before, held_after


def identify(twin: Twin, specs: list[ParameterSpec], recordings: list[Recording],
             heldout: list[Recording] | None = None, *, method: str = 'auto',
             nthread: int = 1, max_iter: int = 30, cma_generations: int = 30,
             object_weight: float = 10.0, seed: int = 0, restarts: int = 3,
             progress=None) -> FitResult:
    """Fit ``specs`` (start at their priors) to ``recordings``; evaluate on ``heldout``.

    This is the one arm-fit entry point (the system_identification node and the evaluation
    harness call it). restarts: extra least-squares starts drawn inside the bounds (0: the
    priors only; the rollout path only).

    method: 'auto' (regression + one polish when every spec is an arm parameter the
    regression fits, else as 'least_squares', or CMA-ES first when any contact friction is
    declared), 'regression' (the regression alone, no polish), 'least_squares' (multi-start
    rollout fit, the reference) or 'cmaes' (then a least-squares polish). The twin keeps
    the fitted values on success.
    Raises UnknownParameterError, InvalidBoundsError (from ParameterSpec),
    NotConvergedError (rollout paths), UnstableTwinError.
    """
    from .regression import RegressionNotPossible, regression_supported
    t0, cpu0 = time.perf_counter(), time.process_time()
    _validate(twin, specs)
    if not recordings:
        raise ValueError('no recordings to fit')
    if method not in ('auto', 'regression', 'least_squares', 'cmaes'):
        raise ValueError(f"method {method!r}: expected 'auto', 'regression', "
                         f"'least_squares' or 'cmaes'")
    problem = _Problem(twin, specs, recordings, nthread, object_weight)
    scale = problem.scale
    lo = np.array([s.lower for s in specs]) / scale
    hi = np.array([s.upper for s in specs]) / scale
    x0 = np.array([s.prior for s in specs]) / scale
    try:
        r0 = problem(x0[:, None])[:, 0]
    except UnstableTwinError as exc:
        raise UnstableTwinError(f'the twin is unstable at the priors: {exc}') from None
    supported = regression_supported(twin, specs)
    if method == 'regression' and not supported:
        raise ValueError('method regression fits only arm joint damping / armature / '
                         'frictionloss, command latency and gravity compensation')
    fallback = ''
    if method == 'regression' or (method == 'auto' and supported):
        try:
            (x, r, history, iters, used, cov, result_set, warns, diag, held_before,
             held_after) = _regression_fit(twin, specs, recordings, heldout, problem, lo, hi,
                                           x0, max_iter, nthread, object_weight, progress,
                                           polish=method == 'auto')
        except RegressionNotPossible as exc:   # e.g. recordings shorter than the filter needs
            if method == 'regression':
                raise
            fallback = f'regression not possible ({exc}): the least-squares rollout fit'
    if not fallback and (method == 'regression' or (method == 'auto' and supported)):
        twin.set_parameters(result_set.values())
        diag['cpu_s'] = time.process_time() - cpu0
        if progress:
            progress('done', 1.0, rms_error(r))
        return FitResult(result_set, rms_error(r0), rms_error(r), held_before, held_after,
                         time.perf_counter() - t0, problem.n_rollouts, used, iters, cov,
                         history, warns, diag)
    use_cma = method == 'cmaes' or (method == 'auto' and any(
        s.name.rsplit('/', 1)[-1] in NON_SMOOTH_FIELDS and s.name.startswith('geom/')
        for s in specs))
    history: list[float] = []
    x_start = x0
    if use_cma:
        x_start, history = _cmaes(problem, x0, lo, hi, cma_generations, seed)
        if progress:
            progress('cmaes', 0.5, history[-1])
    x, ls_hist, converged, iters, text = _multistart(
        problem, x_start, lo, hi, max_iter, 0 if use_cma else restarts, seed, progress)
    history += ls_hist
    if not converged:
        raise NotConvergedError(
            f'least squares did not converge in {max_iter} iterations '
            f'(cost {ls_hist[0]:.4g} -> {ls_hist[-1]:.4g}); {text.strip().splitlines()[-2:]}')
    r, jac = problem.jacobian(x)
    cov_scaled, half = confidence_half_widths(r, jac)
    cov = cov_scaled * np.outer(scale, scale)
    result_set = _estimates(specs, x, scale, half)
    noise = joint_noise(recordings) if supported else None
    warns, pinned = fit_warnings(specs, result_set.values(), rms_error(r), noise)
    warns = ([fallback] if fallback else []) + warns
    result_set = _unidentify(result_set, pinned)
    held_before = held_after = float('nan')
    if heldout:
        hp = _Problem(twin, specs, heldout, nthread, object_weight)
        rh = hp(np.column_stack([x0, x]))
        held_before, held_after = rms_error(rh[:, 0]), rms_error(rh[:, 1])
        problem.n_rollouts += hp.n_rollouts
    twin.set_parameters(result_set.values())
    if progress:
        progress('done', 1.0, rms_error(r))
    return FitResult(result_set, rms_error(r0), rms_error(r), held_before, held_after,
                     time.perf_counter() - t0, problem.n_rollouts,
                     'cmaes+least_squares' if use_cma else 'least_squares', iters, cov,
                     history, warns, {'joint_noise': noise, 'at_bound': pinned,
                                      'cpu_s': time.process_time() - cpu0})
