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
  variance) at the optimum, with the Jacobian taken by finite differences.

Optimiser variables are value / scale (ParameterSpec.scale) so all are of order one.
"""
from __future__ import annotations

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

__all__ = ['FitResult', 'NotConvergedError', 'Recording', 'confidence_half_widths',
           'identify', 'rms_error']

NON_SMOOTH_FIELDS = ('friction', 'torsional_friction', 'rolling_friction')


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


def rms_error(r: np.ndarray) -> float:
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


def _least_squares(problem: _Problem, x0, lo, hi, max_iter: int):
    from mujoco import minimize
    out = io.StringIO()
    x, trace = minimize.least_squares(
        x0, problem, bounds=[lo, hi], eps=1e-3, max_iter=max_iter, xtol=1e-6, gtol=1e-10,
        verbose=minimize.Verbosity.FULLITER, output=out)
    text = out.getvalue()
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


def identify(twin: Twin, specs: list[ParameterSpec], recordings: list[Recording],
             heldout: list[Recording] | None = None, *, method: str = 'auto',
             nthread: int = 1, max_iter: int = 30, cma_generations: int = 30,
             object_weight: float = 10.0, seed: int = 0, restarts: int = 3,
             progress=None) -> FitResult:
    """Fit ``specs`` (start at their priors) to ``recordings``; evaluate on ``heldout``.

    restarts: extra least-squares starts drawn inside the bounds (0: the priors only).

    method: 'least_squares', 'cmaes' (then a least-squares polish) or 'auto' (CMA-ES first
    when any contact friction is declared). The twin keeps the fitted values on success.
    Raises UnknownParameterError, InvalidBoundsError (from ParameterSpec),
    NotConvergedError, UnstableTwinError.
    """
    t0 = time.perf_counter()
    _validate(twin, specs)
    if not recordings:
        raise ValueError('no recordings to fit')
    if method not in ('auto', 'least_squares', 'cmaes'):
        raise ValueError(f"method {method!r}: expected 'auto', 'least_squares' or 'cmaes'")
    problem = _Problem(twin, specs, recordings, nthread, object_weight)
    scale = problem.scale
    lo = np.array([s.lower for s in specs]) / scale
    hi = np.array([s.upper for s in specs]) / scale
    x0 = np.array([s.prior for s in specs]) / scale
    try:
        r0 = problem(x0[:, None])[:, 0]
    except UnstableTwinError as exc:
        raise UnstableTwinError(f'the twin is unstable at the priors: {exc}') from None
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
    result_set = ParameterSet()
    for i, s in enumerate(specs):
        v = float(x[i] * scale[i])
        hw = float(half[i] * scale[i])
        identified = bool(np.isfinite(hw) and hw < 0.25 * (s.upper - s.lower))
        lo95 = max(s.lower, v - hw) if np.isfinite(hw) else s.lower
        hi95 = min(s.upper, v + hw) if np.isfinite(hw) else s.upper
        result_set.add(ParameterEstimate(s.name, v, lo95, hi95, s.prior, s.unit, identified))
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
                     history)
