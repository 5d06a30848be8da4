"""The loop's plan (ROS-free): which stages run, which are skipped, and from which artifacts.

The loop is capture -> reconstruct -> identify -> train -> execute -> evaluate. Each stage
leaves an artifact in the run directory (core/artifacts.py: a ``<folder>_NNN`` stage folder
whose ``manifest.json`` is written last, so a folder without one is incomplete and ignored):

============  =====================  ==========================================================
stage         folder                 artifact (what the next stages consume)
============  =====================  ==========================================================
capture       ``capture_NNN``        its ``manifest.json`` (the capture set)
reconstruct   ``reconstruct_NNN``    the scene MJCF (``outputs.scene``, ``scene.xml``)
identify      ``identify_NNN``       ``parameters.yaml``
train         ``train_NNN``          ``checkpoint/`` of a policy for the goal's task
execute       ``execute_trials_NNN`` ``manifest.json`` (cell trials of that task; written by
                                     the loop coordinator; ``execute_NNN`` is the executor's
                                     own per-trajectory folder)
evaluate      ``evaluate_NNN``       ``manifest.json`` (twin evaluation of that task)
============  =====================  ==========================================================

Rules (:func:`plan_loop`):

* ``skip_stages`` names stages to skip; an unknown name, or a named stage whose artifact does
  not exist, is a :class:`PlanError` (the action's INVALID_GOAL) naming it.
* ``resume`` skips the leading stages whose artifacts exist. Once a stage has to run, every
  later stage runs too (unless named in ``skip_stages``): their existing artifacts were made
  from older inputs.
* A skipped stage uses the newest complete artifact of its kind.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .artifacts import MANIFEST, RunDirectory
from .geometry import angle_gap

STAGES = ('capture', 'reconstruct', 'identify', 'train', 'execute', 'evaluate')
# Run-directory folder prefix of each stage's artifact.
FOLDERS = {'capture': 'capture', 'reconstruct': 'reconstruct', 'identify': 'identify',
           'train': 'train', 'execute': 'execute_trials', 'evaluate': 'evaluate'}
# What each stage's artifact is, for messages.
ARTIFACT_TEXT = {
    'capture': 'capture_*/manifest.json', 'reconstruct': 'reconstruct_*/scene.xml',
    'identify': 'identify_*/parameters.yaml', 'train': 'train_*/checkpoint',
    'execute': 'execute_trials_*/manifest.json', 'evaluate': 'evaluate_*/manifest.json'}
# Share of the loop's overall progress per stage (rough wall-time shares of a default run).
WEIGHTS = {'capture': 0.04, 'reconstruct': 0.06, 'identify': 0.2, 'train': 0.4,
           'execute': 0.25, 'evaluate': 0.05}
TASK_SPECIFIC = ('train', 'execute', 'evaluate')


class PlanError(ValueError):
    """The goal cannot be planned (the RunLoop action's INVALID_GOAL)."""


@dataclass
class Artifact:
    """A stage's output: stage name, its folder, the path the next stages consume and
    its manifest."""
    stage: str                 # loop stage name
    folder: Path               # the stage folder
    path: Path                 # what the next stages consume
    manifest: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The artifact as a JSON-ready dict (stage, folder, path)."""
        return {'stage': self.stage, 'folder': str(self.folder), 'path': str(self.path)}


@dataclass
class StagePlan:
    """One stage's decision in a loop plan: run or skip, the artifact a skip reuses, and why."""
    stage: str
    skip: bool
    artifact: Artifact | None  # the artifact a skipped stage uses
    reason: str                # why it runs / is skipped


# ---------------------------------------------------------------------------- artifacts
def _manifests(run_dir: Path, folder: str):
    """(folder, manifest dict) of completed ``folder_NNN`` stages, newest first."""
    for path in reversed(RunDirectory(run_dir).completed(folder)):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue             # an unreadable manifest: not a complete stage
        if isinstance(data, dict):
            yield path.parent, data


def _output(folder: Path, manifest: dict, key: str, default: str) -> Path:
    """A stage output's path: the file in the stage folder (a moved or copied run directory
    keeps its layout and must not point back at the original), else the path the manifest
    recorded."""
    local = folder / default
    if local.exists():
        return local
    rec = manifest.get('outputs', {}).get(key) or {}
    p = Path(rec['path']) if isinstance(rec, dict) and rec.get('path') else None
    return p if p is not None and p.exists() else local


def find_artifact(run_dir: str | Path, stage: str, task: str = '') -> Artifact | None:
    """The newest complete artifact of ``stage`` in ``run_dir`` (for ``task`` where the
    artifact is task-specific), or None."""
    if stage not in STAGES:
        raise PlanError(f'unknown stage {stage!r}; stages: {list(STAGES)}')
    root = Path(run_dir).expanduser()
    if not root.is_dir():
        return None
    for folder, m in _manifests(root, FOLDERS[stage]):
        if stage == 'capture':
            path = folder / MANIFEST
        elif stage == 'reconstruct':
            path = _output(folder, m, 'scene', 'scene.xml')
        elif stage == 'identify':
            path = _output(folder, m, 'parameters', 'parameters.yaml')
        elif stage == 'train':
            if task and m.get('inputs', {}).get('task') != task:
                continue
            path = folder / 'checkpoint'
        else:
            if task and m.get('inputs', {}).get('task') != task:
                continue
            path = folder / MANIFEST
        if path.exists():
            return Artifact(stage, folder, path, m)
    return None


def plan_loop(run_dir: str | Path, task: str, skip_stages: Sequence[str] = (),
              resume: bool = False) -> list[StagePlan]:
    """The stages in order, each run or skipped (see the module docstring)."""
    unknown = [s for s in skip_stages if s not in STAGES]
    if unknown:
        raise PlanError(f'unknown stage(s) in skip_stages: {unknown}; stages: {list(STAGES)}')
    found = {s: find_artifact(run_dir, s, task) for s in STAGES}
    missing = [s for s in STAGES if s in skip_stages and found[s] is None]
    if missing:
        what = ', '.join(f'{s} ({ARTIFACT_TEXT[s]}'
                         + (f' for task {task}' if s in TASK_SPECIFIC and task else '') + ')'
                         for s in missing)
        raise PlanError(f'skip_stages: no artifact to skip {what} in {run_dir}')
    plan, running = [], False
    for s in STAGES:
        art = found[s]
        if s in skip_stages:
            plan.append(StagePlan(s, True, art, f'skip_stages: using {art.folder.name}'))
        elif resume and not running and art is not None:
            plan.append(StagePlan(s, True, art, f'resume: {art.folder.name} exists'))
        else:
            why = ('resume: no artifact' if resume and art is None and not running else
                   'resume: an earlier stage runs' if resume and running else 'requested')
            plan.append(StagePlan(s, False, None, why))
            running = True
    return plan


def overall_progress(stage: str, fraction: float, done: Sequence[str]) -> float:
    """The loop's progress 0..1: finished (or skipped) stages plus a share of the current."""
    total = sum(WEIGHTS[s] for s in done if s != stage)
    if stage in WEIGHTS:
        total += WEIGHTS[stage] * min(max(float(fraction), 0.0), 1.0)
    return min(max(total / sum(WEIGHTS.values()), 0.0), 1.0)


# ---------------------------------------------------------------------------- cell goals
def sample_goal(task, rng: np.random.Generator, object_xy, object_yaw: float, *,
                yaw_tolerance: float = 0.05, max_draws: int = 2000,
                symmetric_yaw: float = math.pi) -> tuple[float, float, float]:
    """A cell trial's goal (x, y, yaw), drawn like the task's reset distribution
    (``task.sample_reset``) for the object where it is.

    The cell puts the object back where it was, so its pose is not drawn: among the task's
    reset draws, the first whose object yaw is within ``yaw_tolerance`` of the observed one
    (modulo ``symmetric_yaw``: a box looks the same turned by pi) is taken (else the closest
    of ``max_draws``), and its goal is carried over relative to the object (translation; the
    goal yaw keeps its offset from the object's yaw). The policy's observation (goal relative
    to the object, the object's yaw relative to the goal heading) is then one the task's
    training distribution produces."""
    obj = np.asarray(object_xy, float).reshape(2)
    best, best_gap = None, math.inf
    for _ in range(max(1, int(max_draws))):
        reset = task.sample_reset(rng)
        gap = angle_gap(float(reset.object_yaw), float(object_yaw), symmetric_yaw)
        if gap < best_gap:
            best, best_gap = reset, gap
        if gap <= yaw_tolerance:
            break
    offset = np.asarray(best.goal_xy, float) - np.asarray(best.object_xy, float)
    goal = obj + offset
    # The goal yaw's offset from the object's yaw, on the observed yaw (the tracker's
    # branch, which the task's success rule compares it with).
    goal_yaw = float(object_yaw) + float(best.goal_yaw) - float(best.object_yaw)
    goal_yaw = (goal_yaw + math.pi) % (2 * math.pi) - math.pi
    return float(goal[0]), float(goal[1]), float(goal_yaw)


def tracked_goal(task) -> str:
    """The id of the object whose tracked pose IS a trial's goal (stack: its base box), ''
    when the goal is drawn: the coordinator then sends no goal and the executor takes that
    object's tracked centre."""
    return str(getattr(task.cfg, 'base_id', '') or '')


def given_goals(values: Sequence[float]) -> list[tuple[float, float, float]]:
    """Goals from a flat [x, y, yaw, x, y, yaw, ...] list (the ``execute_goals`` parameter)."""
    vals = [float(v) for v in values]
    if len(vals) % 3:
        raise PlanError(f'execute_goals needs x y yaw triples, got {len(vals)} values')
    if not all(math.isfinite(v) for v in vals):
        raise PlanError('execute_goals holds a non-finite value')
    return [tuple(vals[i:i + 3]) for i in range(0, len(vals), 3)]


# ---------------------------------------------------------------------------- results
@dataclass
class SuccessCount:
    """Successes out of trials, with a 95% interval."""
    trials: int
    successes: int

    @property
    def rate(self) -> float:
        """Successes / trials (nan with no trials)."""
        return self.successes / self.trials if self.trials else math.nan

    def interval(self, z: float = 1.96) -> tuple[float, float]:
        """Wilson score interval of the success rate (95% by default)."""
        n = self.trials
        if not n:
            return math.nan, math.nan
        p = self.successes / n
        den = 1 + z * z / n
        mid = (p + z * z / (2 * n)) / den
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
        return max(0.0, mid - half), min(1.0, mid + half)

    def to_dict(self) -> dict:
        """The count as a JSON-ready dict: trials, successes, success_rate, interval_95."""
        lo, hi = self.interval()
        return {'trials': self.trials, 'successes': self.successes, 'success_rate': self.rate,
                'interval_95': [lo, hi]}


def cell_result(trials: list[dict]) -> dict:
    """Cell success over the trials whose outcome was observed (``observed``: a trial the
    executor ran but whose final object pose never came is neither success nor failure; a
    trial the executor refused or aborted for safety is a failure of the policy)."""
    seen = [t for t in trials if t.get('observed', True)]
    count = SuccessCount(len(seen), sum(bool(t['task_success']) for t in seen))
    return {**count.to_dict(), 'attempted': len(trials),
            'unobserved': len(trials) - len(seen), 'per_trial': list(trials)}


def load_parameters(path: str | Path) -> list[dict]:
    """The identified parameters of a ``parameters.yaml`` as plain dicts (name, value,
    lower_95, upper_95, prior, unit, identified)."""
    from .parameters import ParameterSet
    return [dict(vars(e)) for e in ParameterSet.load(Path(path))]


def skipped_stage_results(stage: str, manifest: dict) -> dict:
    """What a skipped stage's artifact gives the loop's summary: ``train_twin`` (train: its
    twin evaluation as a SuccessCount dict), ``cell`` (execute) or ``twin`` (evaluate); {}
    for the other stages and for an artifact without them."""
    results = manifest.get('results', {})
    if stage == 'train':
        res = results.get('twin_eval') or {}
        return ({'train_twin': SuccessCount(int(res['n_trials']),
                                            int(res['successes'])).to_dict()}
                if res.get('n_trials') else {})
    if stage == 'execute':
        return {'cell': results.get('cell') or None}
    if stage == 'evaluate':
        return {'twin': results.get('twin') or None}
    return {}


def reconstructed_pose(manifest: dict, object_id: str) -> tuple[float, float, float] | None:
    """(x, y, yaw) of ``object_id`` in a reconstruct stage's manifest; None when absent."""
    for o in manifest.get('results', {}).get('objects', []):
        if o.get('id') == object_id:
            return float(o['position'][0]), float(o['position'][1]), float(o.get('yaw', 0.0))
    return None


def task_success_at(task, xyz, quat_wxyz, goal) -> bool:
    """The task's own success rule (as the executor applies it) for the object at ``xyz``,
    ``quat_wxyz`` and the trial's ``goal`` (x, y[, yaw]; no yaw: the object's own)."""
    from .policy_execution import ObjectPose
    pose = ObjectPose.from_xyz_quat(xyz, quat_wxyz, 0.0)
    state = {'object_xy': pose.xy, 'object_z': pose.z, 'object_yaw': pose.yaw,
             'object_up_z': pose.up_z, 'goal_xy': np.asarray(goal[:2], float),
             'goal_yaw': float(goal[2]) if len(goal) > 2 else pose.yaw, 'tip_xy': None}
    jaw = getattr(task, 'jaw', None)
    if jaw is not None:   # a grasping task's episode ran to its end: its last grip opened
        state = task.outcome_state(state['goal_xy'], xyz, quat_wxyz, jaw.upper, 0.0)
    return bool(task.success(state))
