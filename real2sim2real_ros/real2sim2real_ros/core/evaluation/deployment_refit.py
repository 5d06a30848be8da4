"""Refit the twin's object contact from a policy's own deployments on the cell (ROS-free).

The loop's second pass. Identification strikes the object with probes; a policy then uses
the object at other speeds, where a real contact (a Drake cell's compliant one) and the
twin's can part (docs/model_gap.md). Deploying the trained policy on the cell gives strikes
exactly where the task lives. :func:`deploy` runs ``trials`` episodes of a policy on a cell
backend (tasks/worlds.CellWorld with a tracker) and keeps what the live graph would: the
object's tracked start pose, the action sent, the tracked rest pose after the episode (None:
the tracker does not see it upright, e.g. it tipped over). The task scores each episode as
in any evaluation (a scoring read of the true pose); the deployment does not keep it.

:func:`refit` then searches the twin's object parameters -- the friction, and the linear and
angular damping of the object's free joint (a loss that grows with speed) -- on a grid, for
the twin whose predicted rest positions of those deployments (``task.twin_outcomes``: the
same plan from the same tracked start) match the tracked ones. Per deployment the residual is
the distance from the predicted to the tracked rest (``along_only``: its part along the
strike, what friction and damping decide), capped at ``cap`` (a miss by more is a miss),
``cap`` where one says upright and the other does not, 0 where neither does. The grid: friction
log-spaced over its bounds, damping ``k x mass`` (1/s) on ``damping_rates``, angular damping
on ``angular_dampings``; then a finer friction grid around the best cell. With
``rest_offset`` (off by default: docs/model_gap.md, stop 53, measured it hurting a cell whose
policy changed its aim), then the rest offset: what a contact model with these parameters
still leaves, e.g. a heavy cylinder that drifts 40 mm sideways on a Drake cell and on none of
the twin's. The tracked minus predicted rests of the deployments seen upright (and predicted
so), along and across each strike; a component's mean is kept (slide_to_target's
``twin_rest_offset``, added to a twin's rests, never a cell's) when it exceeds
``offset_sigmas`` standard errors, else 0.

:func:`rest_residuals` is what a twin still leaves unexplained in the deployments (tracked
minus predicted rest along and across each strike, and the rests the cell lost where the twin
did not); :func:`residual_success` turns a twin evaluation into a prediction of the cell's
success with those residuals as the model error (docs/model_gap.md, stop 54): a twin that
fits its mean response still predicts the spread it cannot model.

Contract: deployments hold tracked quantities only; the twin keeps its values on return; a
refit with no deployment seen at its start raises ValueError.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

__all__ = ['Deployment', 'RefitOptions', 'RefitResult', 'RestResiduals', 'deploy',
           'miss_per_deployment', 'miss_rms', 'paired_p_worse', 'refit', 'residual_success',
           'rest_residuals']


@dataclass
class Deployment:
    """One episode of a policy on the cell as the tracker saw it (task's episode frame)."""

    view: object                 # ResetSample with the tracked start (what the policy saw)
    action: np.ndarray
    end_xy: np.ndarray | None    # tracked rest position; None: not seen upright

    def to_dict(self) -> dict:
        """JSON-ready: start, goal, action, tracked end (None when not seen)."""
        return {'start_xy': [float(v) for v in self.view.object_xy],
                'start_yaw': float(self.view.object_yaw),
                'goal_xy': [float(v) for v in self.view.goal_xy],
                'action': [float(v) for v in self.action],
                'end_xy': None if self.end_xy is None else [float(v) for v in self.end_xy]}


class _Recorder:
    """A cell backend that also observes the rest pose after each ``execute``."""

    def __init__(self, cell):
        self._cell = cell
        self.start = None
        self.end = None

    def __getattr__(self, name):
        return getattr(self._cell, name)

    def observe_start(self, object_xyz, object_yaw: float, arrange=None):
        self.start = self._cell.observe_start(object_xyz, object_yaw, arrange)
        self.end = None
        return self.start

    def execute(self, times, positions, velocities=None, duration: float | None = None):
        self._cell.execute(times, positions, velocities, duration)
        # The object at rest after the settle time: the tracker's frames, as at a start.
        self.end = self._cell.observer.begin(self._cell.world)


def deploy(task, cell, policy, trials: int, seed: int) -> list[Deployment]:
    """``trials`` episodes of ``policy`` on ``cell`` (a CellWorld with an observer), resets
    drawn from ``seed``. Episodes whose start the tracker missed are skipped (the policy
    did not act)."""
    from ..tasks.base import check_action
    if getattr(cell, 'observer', None) is None:
        raise ValueError('deploy needs a cell with a tracker (observation: tracker): the '
                         'rest pose after an episode is what the refit reads')
    if trials < 1:
        raise ValueError(f'trials must be >= 1, got {trials}')
    rng = np.random.default_rng(seed)
    rec = _Recorder(cell)
    acted: list = []

    def acting(obs):
        acted.append(check_action(task, policy(obs)))
        return acted[-1]
    out = []
    for _ in range(trials):
        reset = task.sample_reset(rng)
        acted.clear()
        task.run_episode(rec, reset, acting)
        if rec.start is None or not acted:
            continue
        view = replace(reset, object_xy=np.asarray(rec.start[0][:2], float),
                       object_yaw=float(rec.start[1]))
        end = None if rec.end is None else np.asarray(rec.end[0][:2], float)
        out.append(Deployment(view, acted[0], end))
    return out


@dataclass
class RefitOptions:
    """Grid and residual settings of :func:`refit`."""

    friction_grid: int = 10               # log-spaced over the friction's bounds
    damping_rates: tuple = (0.0, 1.0, 2.0, 4.0, 8.0)   # 1/s: linear damping = rate x mass
    angular_dampings: tuple = (0.0, 0.005)             # N m s/rad
    refine: int = 7                       # friction values between the best's neighbours
    cap: float = 0.10                     # m: a residual's most
    upright_cos: float = 0.9              # the twin's object z axis . world z for upright
    along_only: bool = False              # fit the error along the strikes, not the miss
    rest_offset: bool = False             # then a rest offset (both: measured, not default)
    offset_sigmas: float = 2.0            # a rest offset kept above this many std errors


@dataclass
class RefitResult:
    """The refit values (twin parameter names), the RMS residual (m) of the twin before
    (the values it had) and after, and the grid's costs."""

    values: dict
    rms_before: float
    rms_after: float
    friction_interval: tuple[float, float]   # the refined grid's values within 1.5 x best
    evaluations: int
    deployments: int
    rest_offset: tuple[float, float] = (0.0, 0.0)   # m along, across the strike
    miss_rms_before: float = float('nan')   # m, the whole capped miss: the starting twin
    miss_rms_after: float = float('nan')    # m, the refitted twin with the rest offset

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {'values': {k: float(v) for k, v in self.values.items()},
                'rms_before_m': self.rms_before, 'rms_after_m': self.rms_after,
                'friction_interval': [float(v) for v in self.friction_interval],
                'evaluations': self.evaluations,
                'rest_offset_m': [float(v) for v in self.rest_offset],
                'miss_rms_before_m': self.miss_rms_before,
                'miss_rms_after_m': self.miss_rms_after}


def _residuals(task, twin, deployments, samples: list[dict], opt: RefitOptions,
               along_only: bool) -> np.ndarray:
    """(len(samples), len(deployments)) capped residuals along the strikes (or, not
    ``along_only``, the whole predicted-to-tracked distance: the miss)."""
    r = np.zeros((len(samples), len(deployments)))
    for j, d in enumerate(deployments):
        outs = task.twin_outcomes(twin, d.view, d.action, samples)
        u = _strike_frame(d)[0]
        for i, o in enumerate(outs):
            upright = _twin_upright(o, opt.upright_cos)
            if d.end_xy is None:
                r[i, j] = 0.0 if not upright else opt.cap
            elif not upright:
                r[i, j] = opt.cap
            else:
                e = d.end_xy - o['object_xy']
                dist = abs(float(e @ u)) if along_only else float(np.linalg.norm(e))
                r[i, j] = min(dist, opt.cap)
    return r


def _twin_upright(outcome: dict, upright_cos: float) -> bool:
    """A twin outcome (``task.twin_outcomes``) upright and not lost."""
    return outcome['object_up_z'] >= upright_cos and outcome['object_z'] > -0.5


def _strike_frame(d: Deployment) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors along and across (left of) a deployment's strike."""
    g = np.asarray(d.view.goal_xy, float) - np.asarray(d.view.object_xy, float)
    h = float(np.arctan2(g[1], g[0])) + float(d.action[1])
    u = np.array([np.cos(h), np.sin(h)])
    return u, np.array([-u[1], u[0]])


def _rest_offset(task, twin, deployments, values: dict, opt: RefitOptions):
    """(along, across) mean of tracked minus predicted rests where both are upright, each
    kept above ``offset_sigmas`` standard errors (0 otherwise)."""
    r = rest_residuals(task, twin, deployments, values, opt.upright_cos).rows
    if len(r) < 3:
        return (0.0, 0.0)
    mean, se = r.mean(axis=0), r.std(axis=0, ddof=1) / np.sqrt(len(r))
    kept = np.where(np.abs(mean) > opt.offset_sigmas * se, mean, 0.0)
    return float(kept[0]), float(kept[1])


@dataclass
class RestResiduals:
    """What a twin leaves unexplained in a set of deployments: ``rows`` (k, 2), tracked
    minus predicted rest (m) along and across (left of) each strike where both are upright;
    ``lost``: deployments the twin keeps upright and the cell does not (not seen upright);
    ``twin_down``: the twin tips or loses the object (not used by the prediction)."""

    rows: np.ndarray
    lost: int
    twin_down: int
    deployments: int

    def to_dict(self) -> dict:
        """JSON-ready: counts and the rows' mean and standard deviation (m)."""
        r = self.rows
        stat = (lambda f: [float(v) for v in f(r, axis=0)]) if len(r) else (lambda f: None)
        return {'deployments': self.deployments, 'upright_both': int(len(r)),
                'lost_on_cell': self.lost, 'down_in_twin': self.twin_down,
                'mean_along_across_m': stat(np.mean), 'std_along_across_m': stat(np.std)}


def rest_residuals(task, twin, deployments: list[Deployment], values: dict | None = None,
                   upright_cos: float = 0.9) -> RestResiduals:
    """The tracked rests of ``deployments`` against ``twin``'s predictions (with ``values``
    applied; ``task.twin_outcomes``, so a task's ``twin_rest_offset`` is included)."""
    rows, lost, down = [], 0, 0
    for d in deployments:
        o = task.twin_outcomes(twin, d.view, d.action, [values or {}])[0]
        if not _twin_upright(o, upright_cos):
            down += 1
        elif d.end_xy is None:
            lost += 1
        else:
            u, n = _strike_frame(d)
            e = d.end_xy - o['object_xy']
            rows.append((float(e @ u), float(e @ n)))
    return RestResiduals(np.asarray(rows, float).reshape(-1, 2), lost, down, len(deployments))


def residual_success(task, evaluation, residuals: RestResiduals) -> float:
    """A twin evaluation's success rate with the deployments' residuals as the model error:
    each episode the twin ends upright succeeds with the share of residuals that, added to
    its rest along and across its strike, land it within the goal (``task.success``), times
    the share of deployments the cell kept upright where the twin did. An episode the twin
    failed upright-wise stays 0. No residual and no loss: the plain success rate."""
    r = residuals.rows
    seen = len(r) + residuals.lost
    if seen == 0:
        return float(evaluation.success_rate)
    p = []
    for reset, res in evaluation.episodes:
        if not res.info.get('upright', False) or res.info.get('not_seen', False):
            p.append(0.0)
            continue
        h = float(res.info['strike_heading'])
        u, n = np.array([np.cos(h), np.sin(h)]), np.array([-np.sin(h), np.cos(h)])
        ends = np.asarray(res.final_object_xy, float) + np.outer(r[:, 0], u) + \
            np.outer(r[:, 1], n)
        hits = [task.success({'object_xy': e, 'object_z': task.object_z, 'object_up_z': 1.0,
                              'object_yaw': res.final_object_yaw, 'goal_xy': reset.goal_xy})
                for e in ends]
        p.append(len(r) / seen * (float(np.mean(hits)) if hits else 0.0))
    return float(np.mean(p))


def _rms(r: np.ndarray) -> np.ndarray:
    return np.sqrt(np.mean(r ** 2, axis=-1))


def miss_per_deployment(task, twin, deployments: list[Deployment],
                        options: RefitOptions | None = None) -> np.ndarray:
    """The capped miss (m) of ``twin``'s prediction of each deployment, in order: the
    distance from its predicted to the tracked rest, ``cap`` where one is upright and the
    other not, 0 where neither is (paired tests of two twins on the same deployments)."""
    if not deployments:
        raise ValueError('no deployment to score')
    return _residuals(task, twin, deployments, [{}], options or RefitOptions(), False)[0]


def miss_rms(task, twin, deployments: list[Deployment], options: RefitOptions | None = None
             ) -> float:
    """The RMS of the capped misses (m) of ``twin``'s predictions of ``deployments``, the
    refit's measure: e.g. a twin's error on deployments it was not fitted to."""
    return float(_rms(miss_per_deployment(task, twin, deployments, options)))


def paired_p_worse(worse, better) -> float:
    """One-sided paired Wilcoxon signed-rank p of "``worse`` misses by more than ``better``"
    (two twins' :func:`miss_per_deployment` on the same deployments); 1.0 where they never
    differ by more than 1e-12 m."""
    from scipy.stats import wilcoxon
    a, b = np.asarray(worse, float), np.asarray(better, float)
    if not np.any(np.abs(a - b) > 1e-12):
        return 1.0
    return float(wilcoxon(a, b, alternative='greater').pvalue)


def refit(task, twin, deployments: list[Deployment], object_id: str, mass: float,
          friction_bounds: tuple[float, float], options: RefitOptions | None = None
          ) -> RefitResult:
    """The grid search above in ``twin`` (its other values as they are). ``mass``: the
    object's mass in the twin (kg), which scales the linear damping grid."""
    opt = options or RefitOptions()
    if not deployments:
        raise ValueError('no deployment to refit on (the tracker saw no episode start)')
    lo, hi = (float(v) for v in friction_bounds)
    if not 0 < lo < hi:
        raise ValueError(f'friction bounds {friction_bounds}: 0 < lower < upper expected')
    fname = f'geom/{object_id}/friction'
    lname = f'body/{object_id}/linear_damping'
    aname = f'body/{object_id}/angular_damping'
    current = twin.get_parameters([fname, lname, aname])
    along = opt.along_only
    before = float(_rms(_residuals(task, twin, deployments, [{}], opt, along))[0])
    miss_before = float(_rms(_residuals(task, twin, deployments, [{}], opt, False))[0]) \
        if along else before
    frictions = np.geomspace(lo, hi, opt.friction_grid)
    grid = [{fname: f, lname: k * mass, aname: a} for f in frictions
            for k in opt.damping_rates for a in opt.angular_dampings]
    costs = _rms(_residuals(task, twin, deployments, grid, opt, along))
    n = len(grid)
    best = grid[int(np.argmin(costs))]
    i = int(np.argmin(np.abs(frictions - best[fname])))
    fine = np.geomspace(frictions[max(i - 1, 0)], frictions[min(i + 1, len(frictions) - 1)],
                        opt.refine)
    fine_grid = [{**best, fname: f} for f in fine]
    fine_costs = _rms(_residuals(task, twin, deployments, fine_grid, opt, along))
    n += len(fine_grid)
    k = int(np.argmin(fine_costs))
    if fine_costs[k] <= costs.min():
        best = fine_grid[k]
    after = float(min(fine_costs[k], costs.min()))
    if before <= after:       # the starting values beat the grid: keep them
        best, after = dict(current), before
    near = [*fine[fine_costs <= 1.5 * max(after, 1e-4)], best[fname]]
    interval = (float(min(near)), float(max(near)))
    offset = _rest_offset(task, twin, deployments, best, opt) if opt.rest_offset \
        else (0.0, 0.0)
    miss_after = after          # the whole miss with no offset: what the search minimised
    if along or offset != (0.0, 0.0):
        shifted = [d if d.end_xy is None else
                   Deployment(d.view, d.action, d.end_xy - np.array(offset) @ _strike_frame(d))
                   for d in deployments]
        miss_after = float(_rms(_residuals(task, twin, shifted, [best], opt, False))[0])
    twin.set_parameters(current)
    return RefitResult(dict(best), before, after, interval, n, len(deployments), offset,
                       miss_before, miss_after)
