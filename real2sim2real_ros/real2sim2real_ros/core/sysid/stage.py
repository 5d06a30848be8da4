"""The identification stage, ROS-free: probes -> fits -> ``identify_NNN/`` folder.

One code path for the system_identification node (probes through the executor action, bags),
the evaluation harness (probes on an in-process emulated cell) and offline bags:

* :func:`arm_probes`: the multisine arm probes about a centre (core/sysid/probes.py);
* :func:`object_setup`: the scene's twin and the object parameters the identification config
  declares for its boxes and cylinders (``objects:``);
* :func:`run_strikes`: strike probes on a :class:`StrikeCell` (what executes a strike and
  reports tracked poses: the node's executor + tracker topic, the harness's emulated cell +
  depth tracker), each planned from the tracked poses and the friction fitted on the strikes
  before it (friction alone: it is all a plan reads). The objects' full fit on every strike
  but the last is made on a fresh twin with the arm's final values (the arm fit's), on a
  thread beside the last strike: it is the final fit's held-out validation
  (:class:`Validation`), so no fit is made twice and none between strikes but the planning
  fits;
* :class:`ArmFit`: the arm fit (core/sysid/fit.identify) on a thread of its own, started
  as soon as the arm probes are recorded, so it runs while the strikes move the arm (it
  needs nothing the strikes give: with strikes to come, the arm is scored on them later);
* :func:`fit_and_write`: the arm fit (an :class:`ArmFit` started earlier, or run here) and
  the objects' fit on a fresh scene twin with the arm's estimates
  (core/sysid/object_fit.final_object_fits; the validation from the strikes, scored on the
  last one, or made here from bags), then ``<run_dir>/identify_NNN/``
  (parameters.yaml, report.png, objects.png, manifest.json with the per-sub-stage wall
  times: probes, arm fit, object fits, twin builds, report; ``arm_fit`` is the fit's own
  wall time, ``arm_fit_wait`` what the stage waited for it after the strikes).

The servo gains are the identification config's ``known`` values: the lab's controller
configuration (core/controller_config.py), never read from a cell.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from ..parameters import InvalidBoundsError, ParameterSet
from .bags import MissingTopicsError

STAGE = 'identify'

__all__ = ['ArmFit', 'ArmFitCancelled', 'BackgroundFit', 'FitCancelled', 'FitSettings',
           'ProbeExecutionError', 'StageOutput', 'StageTimer', 'StrikeCell', 'Strikes',
           'Validation', 'arm_probes', 'arm_twin', 'arm_values', 'cancel_on_error',
           'fit_and_write', 'mean_tracked_poses', 'object_setup', 'probe_counts', 'run_strikes',
           'split_offline_bags', 'validation_fit']


class ProbeExecutionError(RuntimeError):
    """A probe could not be run or its object left the table / the camera's view."""


@dataclass
class FitSettings:
    """How the fits run (the node's parameters; the harness's per cell)."""
    nthread: int = 2
    max_iter: int = 30
    restarts: int = 3
    method: str = 'auto'
    timestep: float = 0.001


class StageTimer:
    """Wall seconds per sub-stage (summed over repeats) and how often each ran."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        """Context manager: add the time spent inside to stage ``name``'s seconds."""
        t = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t
            self.counts[name] = self.counts.get(name, 0) + 1

    def to_dict(self) -> dict:
        """Seconds and counts per stage, as a dict."""
        return {'seconds': {k: round(v, 4) for k, v in self.seconds.items()},
                'counts': dict(self.counts)}


def _twin(robot, timer: StageTimer | None, **kw):
    from ..twin import Twin
    with (timer or StageTimer())('twin_builds'):
        return Twin(robot, **kw)


# ------------------------------------------------------------------------ arm
def arm_probes(robot, center, n: int, *, duration: float, amplitude: float,
               velocity_fraction: float) -> list:
    """``n`` multisine probes (seeds 0..n-1) about ``center``, each joint's predicted torque
    within 80% of its effort limit (``effort_limited_multisine``); ProbeError when
    impossible."""
    from .probes import effort_limited_multisine
    return [effort_limited_multisine(robot, center, duration=duration, amplitude=amplitude,
                                     velocity_fraction=velocity_fraction, seed=s,
                                     name=f'probe_{s}')
            for s in range(n)]


def arm_twin(robot, config, arm_specs, settings: FitSettings | None = None,
             timer: StageTimer | None = None):
    """The arm's twin with the known (controller) values; validates the names of the known
    values and of ``arm_specs`` before any probe moves the arm (UnknownParameterError)."""
    settings = settings or FitSettings()
    twin = _twin(robot, timer, timestep=settings.timestep)
    try:
        twin.validate_names(list(config.known) + [s.name for s in arm_specs])
        twin.set_parameters(config.known)
    except BaseException:
        twin.close()
        raise
    return twin


class FitCancelled(RuntimeError):
    """A fit on a thread (:class:`BackgroundFit`) was cancelled before it finished."""


class ArmFitCancelled(FitCancelled):
    """The arm fit was cancelled (:meth:`ArmFit.cancel`) before it finished."""


class BackgroundFit:
    """A fit that runs on its own thread beside the probes (or in line), one pattern for the
    arm fit and the objects' validation fit: :meth:`_work` (a subclass's) runs on a thread
    at nice +``NICE`` (where the OS allows it; its MuJoCo rollout workers inherit it), what
    it raises is kept and re-raised by :meth:`_outcome`; :meth:`cancel` makes its next
    :meth:`_check` raise ``cancelled``; ``background=False``: :meth:`_outcome` runs it in
    line instead (the same code path)."""

    NICE = 5
    cancelled = FitCancelled
    what = 'the fit'

    def _start(self, name: str, background: bool) -> None:
        self._cancel = threading.Event()
        self._error: BaseException | None = None
        self._thread, self._done = None, False
        if background:
            self._thread = threading.Thread(target=self._main, args=(True,), name=name,
                                            daemon=True)
            self._thread.start()

    def _work(self) -> None:
        raise NotImplementedError

    def _main(self, lower_priority: bool = False) -> None:
        if lower_priority:
            _lower_priority(self.NICE)
        try:
            self._work()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller of _outcome()
            self._error = exc
        finally:
            self._done = True

    def _check(self) -> None:
        if self._cancel.is_set():
            raise self.cancelled(f'{self.what} was cancelled')

    def cancel(self) -> None:
        """Stop the fit at its next checkpoint: the stage failed (or changed its plan) before
        it needed the result. The thread ends on its own (:meth:`abandon` waits for it)."""
        self._cancel.set()

    def abandon(self) -> None:
        """Cancel the fit and wait for its thread to end (at its next checkpoint): no
        thread outlives the stage that started it."""
        self.cancel()
        if self._thread is not None:
            self._thread.join()

    def _outcome(self, timer, wait: str) -> None:
        """Run the fit in line, or wait for its thread (timed as ``wait``); raise what it
        raised."""
        if self._thread is None:
            if not self._done:
                self._main()
        else:
            with timer(wait):
                self._thread.join()
        if self._error is not None:
            raise self._error


class ArmFit(BackgroundFit):
    """The arm fit of ``recs`` on ``twin`` (:func:`arm_twin`), started on a thread at once
    (:class:`BackgroundFit`): :meth:`result` waits for it (the stage's ``arm_fit_wait``)
    and re-raises what it raised.

    ``strikes_follow``: strike probes will score the arm (every arm probe is fitted); else
    the last arm probe is held out. The thread runs at a lower CPU priority than the thread
    that drives the strikes. ``background=False`` runs the fit in :meth:`result` instead;
    ``progress(stage, fraction, residual)`` is called from the fitting thread. The same
    thread renders the arm's report (:attr:`report`, PNG bytes of
    core/sysid/report.render_report on :attr:`shown`; the stage's ``arm_report``), so the
    stage only writes it. :meth:`cancel` stops it after the regression or the polish."""

    cancelled, what = ArmFitCancelled, 'the arm fit'

    def __init__(self, twin, arm_specs, recs, *, strikes_follow: bool,
                 settings: FitSettings | None = None, timer: StageTimer | None = None,
                 background: bool = True, progress=None):
        recs = list(recs)
        if not recs:
            raise MissingTopicsError('the arm parameters need arm probe recordings (joint '
                                     'states + commanded trajectory); only strike probes '
                                     'were given')
        self.twin, self.specs = twin, list(arm_specs)
        self.settings = settings or FitSettings()
        self.timer = timer or StageTimer()
        self.fit_recs, self.heldout = recs, []
        if len(recs) > 1 and not strikes_follow:
            self.fit_recs, self.heldout = recs[:-1], recs[-1:]
        self.fit, self._progress, self.report = None, progress, b''
        self._start('arm_fit', background)

    @property
    def shown(self):
        """The recording the report shows: the held-out probe, else the last fitted."""
        return (self.heldout or self.fit_recs)[-1]

    def _work(self) -> None:
        from .fit import identify
        from .report import render_report
        with self.timer('arm_fit'):
            s = self.settings
            self.fit = identify(self.twin, self.specs, self.fit_recs,
                                heldout=self.heldout, nthread=s.nthread,
                                max_iter=s.max_iter, restarts=s.restarts, method=s.method,
                                progress=self._checkpoint)
        with self.timer('arm_report'):
            self.report = render_report(self.twin, self.fit, self.shown,
                                        {p.name: p.prior for p in self.specs})

    def _checkpoint(self, stage, fraction, residual) -> None:
        self._check()
        if self._progress is not None:
            self._progress(stage, fraction, residual)

    def result(self):
        """The FitResult (waits for the thread; raises what the fit raised)."""
        self._outcome(self.timer, 'arm_fit_wait')
        return self.fit


def _lower_priority(nice: int) -> None:
    """This thread (and the MuJoCo rollout workers it starts) at nice +``nice``, where the OS
    allows it: the probes' own motion (a real-time cell, its camera) comes first."""
    if hasattr(os, 'setpriority'):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)


@contextlib.contextmanager
def cancel_on_error(arm_fit: ArmFit | None):
    """Context manager: cancel ``arm_fit`` (None: nothing) when the block raises."""
    try:
        yield
    except BaseException:
        if arm_fit is not None:
            arm_fit.cancel()
        raise


def arm_values(config, arm_specs=(), fit=None, last: dict | None = None) -> dict:
    """What the arm is in an object twin: the known controller values, the declared priors,
    the last identification's estimates (``last``), this one's (``fit``)."""
    values = dict(config.known)
    values.update({s.name: s.prior for s in config.specs})
    values.update(last or {})
    if fit is not None and arm_specs:
        values.update(fit.parameters.values())
    return values


def object_arm_context(config, arm_specs=(), fit=None,
                       last: dict | None = None) -> tuple[dict, dict | None]:
    """(the arm's values in the object twins (:func:`arm_values`), the arm priors the held-out
    strike's 'before' twin uses: None without an arm fit). One definition for the stage's
    object fits and the harness's held-out folds, so both see the same arm."""
    priors = {s.name: s.prior for s in arm_specs} if fit is not None else None
    return arm_values(config, arm_specs, fit, last), priors


def _set_known(twin, values: dict) -> None:
    names = set(twin.parameter_names())
    twin.set_parameters({k: v for k, v in values.items() if k in names or _has(twin, k)})


def _has(twin, name) -> bool:
    try:
        twin.validate_names([name])
        return True
    except Exception:  # noqa: BLE001 - an element this twin lacks
        return False


# ------------------------------------------------------------------------ objects
def object_setup(robot, config, scene: str, *, timestep: float = 0.001, object_ids=None,
                 timer: StageTimer | None = None):
    """(twin of the scene, object specs, note why none). ``object_ids``: only these objects
    (default: every box and cylinder of the scene). TwinError for an unusable scene."""
    from .object_fit import ensure_object_priority, strike_objects
    if not config.object_templates:
        return None, [], ''
    if not scene:
        return None, [], ('no scene (parameter scene_file or the latched scene topic of '
                          'scene_reconstruction): objects not identified')
    twin = _twin(robot, timer, scene=scene, timestep=timestep)
    ensure_object_priority(twin)
    objs = {o.id: o for o in strike_objects(twin, {i: ((0, 0, 0), 0.0)
                                                   for i in twin.object_ids})}
    ids = [i for i in objs if object_ids is None or i in set(object_ids)]
    if not ids:
        return twin, [], f'scene {scene} has no box or cylinder object to identify'
    return twin, config.object_specs(ids, twin.get_parameter,
                                     lambda oid: objs[oid].extents), ''


class StrikeCell(Protocol):
    """What runs strike probes: executes, records, reports tracked poses."""

    def tracked_poses(self, ids) -> dict:
        """{id: (xyz, yaw)} of the objects ``ids`` seen now (at rest)."""

    def current_positions(self) -> np.ndarray:
        """The arm's measured joint positions."""

    def strike(self, plan, index: int, info: dict):
        """Execute ``plan.probe``; the StrikeRecording (joint states + tracked poses)."""


@dataclass
class Validation:
    """The objects' fit on every strike but the last (not yet scored on it): what
    :func:`fit_and_write` reports as the held-out validation. Made once, between the last two
    strikes (its friction plans the last strike), on a fresh twin with the arm's final
    values: the twin :func:`fit_objects` would make it on."""
    fit: object                    # core/sysid/object_fit.ObjectFitResult (scores='none')
    recordings: tuple              # the names of the strike recordings it was fitted on
    values: dict                   # the arm's values in its twin


@dataclass
class Strikes:
    """:func:`run_strikes`' result."""
    recordings: list               # StrikeRecordings, in order
    validation: Validation | None = None


def run_strikes(cell: StrikeCell, robot, twin, specs, config, n: int, *,
                settings: FitSettings, values: dict, progress=None, log=None,
                timer: StageTimer | None = None, before_strike=None, scene: str = '',
                footprints: dict | None = None, final_values=None) -> Strikes:
    """``n`` strike probes on ``cell`` (each strikes every object of ``specs`` once), planned
    from the tracked poses; the friction range of each plan from the friction fitted on the
    strikes before it (:func:`_planning_fit`, on ``twin``). Every other object of the scene
    is kept clear of: a box or cylinder as tracked now, one not tracked (an irregular
    object) by ``footprints`` ({id: (xy, radius)}, e.g. the reconstruction's). ``values``:
    the arm's values in ``twin``; ``final_values()``: the arm's final values (it may wait
    for the arm fit): given, the objects' full fit on every strike but the last is made on a
    fresh twin with them, on a thread (nice +5) while the last strike runs, and is the final
    fit's :class:`Validation` (else fit_and_write makes it); it has ended when this returns
    or raises. Returns :class:`Strikes`. MissingTopicsError (no object tracked),
    ProbeExecutionError (an object lost or off the table, no strike possible),
    InvalidBoundsError (unusable strike / fit options)."""
    from .object_fit import ObjectFitOptions, table_region
    from .object_probes import StrikeConfig
    try:
        scfg = StrikeConfig.from_dict(config.strike)
        options = ObjectFitOptions.from_dict(config.object_fit)
        table = table_region(twin)
    except (TypeError, ValueError) as exc:
        raise InvalidBoundsError(f'object identification config: {exc}') from None
    run = _StrikeRounds(cell, robot, twin, specs, scfg, options, table, settings,
                        timer or StageTimer(), log or (lambda _m: None), progress, scene,
                        footprints, final_values, before_strike)
    _set_known(twin, values)
    try:
        for r in range(n):
            if not run.strike(r, n):
                break
            if r < n - 1:
                run.plan_next(r, n)
    except BaseException:
        if run.validation is not None:
            run.validation.abandon()
        raise
    if run.validation is not None and len(run.recs) < n:
        # Struck fewer times than planned: the validation is not on every strike but the
        # last; fit_objects makes the right one (waiting for this one would be wasted).
        run.validation.abandon()
        return Strikes(run.recs, None)
    return Strikes(run.recs, run.validation.result() if run.validation is not None else None)


class _StrikeRounds:
    """:func:`run_strikes`' state: the strikes so far, the friction ranges they plan with,
    the validation fit's thread once started."""

    def __init__(self, cell, robot, twin, specs, scfg, options, table, settings, timer, log,
                 progress, scene, footprints, final_values, before_strike):
        self.cell, self.robot, self.twin, self.specs = cell, robot, twin, specs
        self.scfg, self.options, self.table, self.settings = scfg, options, table, settings
        self.timer, self.log, self.progress, self.scene = timer, log, progress, scene
        self.footprints, self.final_values = footprints or {}, final_values
        self.before_strike = before_strike
        self.ids = sorted({s.name.split('/')[1] for s in specs})
        self.priors = {oid: (0.2, 0.5, 1.0) for oid in self.ids}
        cap = scfg.plan_friction_upper or float('inf')
        for s in specs:
            if s.name.endswith('/friction'):
                hi = max(min(s.upper, cap), s.prior)
                self.priors[s.name.split('/')[1]] = (s.lower, s.prior, hi)
        self.friction = dict(self.priors)
        self.recs, self.previous, self.seen = [], {}, {}
        self.validation: _ValidationThread | None = None

    def _say(self, stage: str, fraction: float) -> None:
        if self.progress is not None:
            self.progress(stage, fraction)

    def _objects(self, r: int):
        """(objects to strike, obstacles) as tracked now; raises when one was lost."""
        from .object_fit import strike_objects
        with self.timer('tracked_poses'):
            tracked = self.cell.tracked_poses(sorted(set(self.ids) | set(self.twin.object_ids)))
            poses = {k: v for k, v in tracked.items() if k in self.ids}
        table = self.table
        for oid, (xyz, _) in self.seen.items():
            if oid not in poses:
                raise ProbeExecutionError(
                    f'object {oid!r} is lost: no tracked pose after strike probe {r} (last '
                    f'seen at {np.round(xyz, 3).tolist()}; off the table or out of view). '
                    f'Put it back and run identify again')
            if poses[oid][0][2] < table.height - 0.02 or not table.inside(
                    poses[oid][0][:2], 0.0)[0]:
                raise ProbeExecutionError(f'object {oid!r} is off the table at '
                                          f'{np.round(poses[oid][0], 3).tolist()} after '
                                          f'strike probe {r}')
        self.seen.update(poses)
        objs = strike_objects(self.twin, poses)
        others = strike_objects(self.twin, {k: v for k, v in tracked.items()
                                            if k not in self.ids})
        shown = set(self.ids) | {o.id for o in others}
        others += [(np.asarray(xy, float)[:2], float(rad))
                   for oid, (xy, rad) in self.footprints.items() if oid not in shown]
        if not objs:
            raise MissingTopicsError(f'the tracker does not see {self.ids} before strike {r} '
                                     f'(it reports {sorted(poses)})')
        return objs, others

    def strike(self, r: int, n: int) -> bool:
        """Plan and run strike probe ``r`` (its recording appended to :attr:`recs`); False
        when no strike could be planned after the first (the strikes stop)."""
        from .object_probes import plan_strike_probe
        from .probes import ProbeError
        self._say(f'strike {r + 1}/{n}', 0.5 + 0.3 * r / max(n, 1))
        if self.before_strike is not None:
            self.before_strike(r)
        objs, others = self._objects(r)
        scfg = self.scfg.for_round(r)
        with self.timer('strike_planning'):
            try:
                plan = plan_strike_probe(self.robot, objs, self.table,
                                         self.cell.current_positions(), self.friction,
                                         scfg, previous=self.previous,
                                         name=f'strike_{r}', obstacles=others)
            except ProbeError as exc:
                if r == 0:
                    raise ProbeExecutionError(f'no strike probe: {exc}') from None
                self.log(f'strike probe {r}: {exc}; stopping strikes')
                return False
        for oid, why in plan.skipped.items():
            self.log(f'strike probe {r}: {oid} not struck: {why}')
        info = {'strikes': [s.to_dict() for s in plan.strikes], 'scene': self.scene,
                'skipped': plan.skipped, 'round': r, 'strike_config': vars(scfg)}
        with self.timer('strike_probes'):
            self.recs.append(self.cell.strike(plan, r, info))
        for s in plan.strikes:
            self.previous.setdefault(s.object_id, []).append(s.heading)
        return True

    def plan_next(self, r: int, n: int) -> None:
        """After strike ``r`` (not the last): the friction ranges the next one is planned
        with; after the last but one, the validation fit's thread is started too."""
        self._say(f'fit objects {r + 1}/{n}', 0.5 + 0.3 * r / n)
        f = _planning_fit(self.twin, self.specs, self.recs, self.options, self.settings,
                          self.timer, self.log)
        if f is not None:
            _friction_update(self.friction, f, self.specs, self.priors)
        if r == n - 2 and self.final_values is not None:
            self.validation = _ValidationThread(
                self.robot, self.scene, self.specs, self.options, list(self.recs),
                self.settings, self.final_values, self.timer, self.log)


def _planning_fit(twin, specs, recs, options, settings, timer, log):
    """The friction of the strikes so far, the others at their priors (what plans the next
    strike: its speed and the room its slide needs); None (logged) without a usable strike.
    A third of the full fit's rollouts: the mass, the centre of mass offsets and the
    friction's refit given them are left to the validation and final fits."""
    from .object_fit import identify_objects
    friction = [s for s in specs if s.name.endswith('/friction')]
    if not friction:
        return None
    with timer('object_fit_intermediate'):
        try:
            return identify_objects(twin, friction, recs, options=options,
                                    nthread=settings.nthread, scores='none')
        except ValueError as exc:
            log(f'intermediate object fit: {exc}')
            return None


def _friction_update(friction: dict, fit, specs, priors: dict) -> None:
    """The friction ranges strikes are planned with ({id: (low, value, high)}) from an
    object fit: its 95% interval where identified, else the planning prior's bounds about
    its value (the upper one raised to the value where the fit left the planning range:
    ``StrikeConfig.plan_friction_upper``)."""
    for s in specs:
        if s.name.endswith('/friction'):
            oid = s.name.split('/')[1]
            e = fit.parameters[s.name]
            lo, _, hi = priors[oid]
            friction[oid] = ((e.lower_95, e.value, e.upper_95) if e.identified
                             else (lo, e.value, max(hi, e.value)))


class ObjectFitCancelled(FitCancelled):
    """The objects' validation fit was cancelled (the strikes failed or stopped early)."""


class _ValidationThread(BackgroundFit):
    """The :class:`Validation` fit on ``recs`` with the arm's final values
    (``final_values()``, which may wait for the arm fit) on a thread at nice +5, beside the
    last strike (:class:`BackgroundFit`). :meth:`result`: the Validation, None (logged) when
    none of its strikes is usable or it was cancelled; raises what the fit raised otherwise.
    :meth:`cancel` stops it at its next object."""

    cancelled, what = ObjectFitCancelled, "the objects' validation fit"

    def __init__(self, robot, scene, specs, options, recs, settings, final_values, timer, log):
        self._args = (robot, scene, specs, options, recs, settings)
        self._final_values, self._timer, self._log = final_values, timer, log
        self._value = None
        self._start('object_validation_fit', True)

    def _work(self) -> None:
        robot, scene, specs, options, recs, settings = self._args
        try:
            values = self._final_values()
            with self._timer('object_fit_validation'):
                fit = validation_fit(robot, scene, specs, options, recs, settings=settings,
                                     values=values, timer=self._timer,
                                     progress=lambda *_a: self._check())
            self._value = Validation(fit, tuple(x.name for x in recs), values)
        except ValueError as exc:
            self._log(f'validation object fit: {exc}')
        except FitCancelled:
            pass

    def result(self):
        """The Validation (waits for the thread; the wait is the stage's
        ``object_fit_validation_wait``)."""
        self._outcome(self._timer, 'object_fit_validation_wait')
        return self._value


def _object_options(config):
    from .object_fit import ObjectFitOptions
    try:
        return ObjectFitOptions.from_dict(config.object_fit)
    except (TypeError, ValueError) as exc:
        raise InvalidBoundsError(f'object fit options: {exc}') from None


@contextlib.contextmanager
def _object_twin(robot, scene: str, settings: FitSettings, values: dict, timer):
    """A fresh twin of the scene with the arm's ``values``: live and offline fits start from
    the same state (a twin that ran other fits differs in its last bits, which contact
    outcomes amplify). Closed on exit."""
    from .object_fit import ensure_object_priority
    twin = _twin(robot, timer, scene=scene, timestep=settings.timestep)
    try:
        ensure_object_priority(twin)
        _set_known(twin, values)
        yield twin
    finally:
        twin.close()


def validation_fit(robot, scene: str, specs, options, recs, *, settings: FitSettings,
                   values: dict, timer=None, progress=None):
    """The objects' fit on ``recs`` (every strike but the held-out last) on a fresh twin
    with the arm's final ``values``, unscored (object_fit.identify_objects, scores='none');
    ``options``: object_fit.ObjectFitOptions; ``progress(stage, fraction, residual)``
    before each object."""
    from .object_fit import identify_objects
    with _object_twin(robot, scene, settings, values, timer) as twin:
        return identify_objects(twin, specs, recs, options=options,
                                nthread=settings.nthread, scores='none', progress=progress)


def heldout_folds(robot, conf, scene: str, specs, recs, settings, *, arm_fit, reference: dict,
                  last) -> list[dict]:
    """Every strike held out in turn (the evaluation harness's scoring; the stage holds out
    the last only): for each strike k but the last, the objects' fit on the others
    (:func:`validation_fit`, on a fresh twin with the arm as ``arm_fit``, the stage's arm
    FitResult, left it: :func:`object_arm_context`) scored on k
    (:func:`object_fit.score_heldout`, ``reference`` the true values: the floor); the last is
    the final fit ``last``'s own validation. One held-out rest says little where it lies
    within millimetres of the prior's (wide_5: 1.5 mm before); three say more, at no extra
    motion. Returns [{'strike', 'before', 'after', 'floor', 'observable_floor'}] (m); a
    strike whose fold cannot be made (no usable strike left to fit) gets {'strike',
    'error'} instead."""
    from .object_fit import score_heldout
    options = _object_options(conf)
    values, arm_priors = object_arm_context(conf, conf.specs, arm_fit)
    out = []
    for k, rec in enumerate(recs[:-1]):
        rest = [r for i, r in enumerate(recs) if i != k]
        try:
            fit = validation_fit(robot, scene, specs, options, rest, settings=settings,
                                 values=values)
            with _object_twin(robot, scene, settings, values, None) as twin:
                scored = score_heldout(twin, specs, fit, [rec], options=options,
                                       nthread=settings.nthread, arm_priors=arm_priors,
                                       reference=reference)
        except ValueError as exc:      # identify_objects: no usable strike
            out.append({'strike': k, 'error': str(exc)})
            continue
        out.append(_fold(k, scored))
    out.append(_fold(len(recs) - 1, last))
    return out


def _fold(k: int, fit) -> dict:
    return {'strike': k, 'before': fit.heldout_error_before,
            'after': fit.heldout_error_after, 'floor': fit.heldout_error_reference,
            'observable_floor': fit.heldout_error_observable}


def fit_objects(robot, scene: str, specs, config, recs, *, settings: FitSettings,
                values: dict, arm_priors=None, reference=None, timer=None, progress=None,
                validation: Validation | None = None):
    """The objects' final fit and its held-out validation, each on a fresh twin of the scene
    with the arm's ``values``. ``validation``: made during the strikes (:func:`run_strikes`);
    used when it was fitted on these recordings but the last with these values, else made
    here."""
    from .object_fit import final_object_fits
    timer = timer or StageTimer()
    if not recs:
        raise MissingTopicsError('object parameters declared but no strike probe recordings '
                                 '(tracked object poses and a strike plan) among the inputs')
    options = _object_options(config)
    made = None
    if validation is not None and validation.recordings == tuple(
            r.name for r in recs[:-1]) and validation.values == values:
        made = validation.fit
    try:
        if made is None and len(recs) > 1:
            with timer('object_fit_validation'):
                made = validation_fit(robot, scene, specs, options, recs[:-1],
                                      settings=settings, values=values, timer=timer)
        with _object_twin(robot, scene, settings, values, timer) as twin, \
                timer('object_fit'):
            ofit, _ = final_object_fits(twin, specs, recs, options=options,
                                        nthread=settings.nthread, arm_priors=arm_priors,
                                        reference=reference, progress=progress,
                                        validation=made)
    except ValueError as exc:
        raise MissingTopicsError(str(exc)) from None
    return ofit


# ------------------------------------------------------------------------ the stage
@dataclass
class StageOutput:
    """The identification stage's outputs: folder, manifest, estimates and the arm / object fits."""
    folder: Path
    manifest_path: Path
    estimates: ParameterSet
    fit: object = None             # core/sysid/fit.FitResult (arm) or None
    object_fit: object = None      # core/sysid/object_fit.ObjectFitResult or None
    report_path: str = ''
    heldout_arm: bool = False      # the arm scored on its own held-out probe
    timings: dict = field(default_factory=dict)


def fit_and_write(robot, config, run_dir, *, arm_specs, object_specs, scene: str = '',
                  arm_recs=(), strike_recs=(), settings: FitSettings | None = None,
                  inputs: dict | None = None, parameters: dict | None = None,
                  last_arm_values: dict | None = None, reference: dict | None = None,
                  timer: StageTimer | None = None, progress=None, log=None,
                  twin=None, arm_fit: ArmFit | None = None,
                  validation: Validation | None = None) -> StageOutput:
    """Fit the arm on ``arm_recs`` (the last held out unless strikes score it), the objects
    on ``strike_recs``; write ``run_dir/identify_NNN``. ``reference``: the objects' true
    values (an evaluator's, for the held-out floor only). ``progress(stage, fraction,
    residual)``. ``twin``: the arm's (:func:`arm_twin`, built here when None); closed here.
    ``arm_fit``: an :class:`ArmFit` already running on ``arm_recs`` (its twin is ``twin``).
    ``validation``: the objects' validation fit made during the strikes (:class:`Strikes`)."""
    from .report import write_object_report
    settings = settings or FitSettings()
    timer = timer or StageTimer()
    log = log or (lambda _m: None)
    say = progress or (lambda *_a: None)
    t0 = time.perf_counter()
    fit, heldout = None, []
    if arm_fit is not None:
        twin = arm_fit.twin
    try:
        if arm_specs:
            if arm_fit is None:     # ArmFit refuses no recordings (MissingTopicsError)
                if twin is None:
                    twin = arm_twin(robot, config, arm_specs, settings, timer)
                # With strike probes the arm is scored on them (held out from its fit);
                # without, the last arm probe is held out.
                arm_fit = ArmFit(twin, arm_specs, arm_recs, settings=settings, timer=timer,
                                 strikes_follow=bool(object_specs and strike_recs),
                                 background=False,
                                 progress=lambda _s, p, r: say('fit', p, r))
            say('fit', 0.0, float('nan'))
            fit = arm_fit.result()
            heldout = arm_fit.heldout
            for w in fit.warnings:   # degenerate / contaminated fit: never silently used
                log(f'arm fit ({fit.method}): {w}')
        ofit = None
        if object_specs:
            say('fit objects', 0.8, float('nan'))
            values, arm_priors = object_arm_context(config, arm_specs, fit, last_arm_values)
            ofit = fit_objects(robot, scene, object_specs, config, list(strike_recs),
                               settings=settings, values=values, arm_priors=arm_priors,
                               reference=reference, timer=timer, validation=validation)
            for key, why in ofit.dropped.items():
                log(f'strike {key} not used: {why}')
        say('report', 0.95, fit.residual_after if fit else ofit.residual_after)
        out = _write(robot, config, run_dir, arm_specs, object_specs, fit, ofit,
                     arm_fit.report if arm_fit is not None else b'', settings, inputs,
                     parameters, timer, t0, write_object_report)
    finally:
        if twin is not None:
            twin.close()
    out.heldout_arm = bool(heldout)
    return out


def _write(robot, config, run_dir, arm_specs, object_specs, fit, ofit, arm_report: bytes,
           settings, inputs, parameters, timer, t0, write_object_report) -> StageOutput:
    from ..artifacts import RunDirectory, atomic_write_bytes
    stage = RunDirectory(run_dir).new_stage(STAGE, inputs=dict(inputs or {}), parameters={
        **(parameters or {}), 'identification_config': config.source,
        'controller_config': config.controller_config, 'known': config.known,
        'declared': [vars(s) for s in list(arm_specs) + list(object_specs)],
        'timestep': settings.timestep, 'nthread': settings.nthread,
        'max_iter': settings.max_iter, 'fit_restarts': settings.restarts,
        'fit_method': settings.method, 'strike': config.strike,
        'object_fit': config.object_fit})
    estimates = ParameterSet()
    for part in (fit.parameters if fit else [], ofit.parameters if ofit else []):
        for e in part:
            estimates.add(e)
    stage.add_output('parameters', estimates.save(stage.folder / 'parameters.yaml'))
    report = ''
    with timer('report'):
        if fit is not None:     # rendered by the ArmFit, beside the strikes where live
            report = atomic_write_bytes(stage.folder / 'report.png', arm_report)
            stage.add_output('report', report)
        if ofit is not None:
            oreport = write_object_report(stage.folder / 'objects.png', ofit)
            stage.add_output('object_report', oreport)
            report = report or oreport
    stage.results = {'estimates': estimates.to_dict()['parameters']}
    if fit is not None:
        stage.results.update({
            'residual_before': fit.residual_before, 'residual_after': fit.residual_after,
            'heldout_error_before': fit.heldout_error_before,
            'heldout_error_after': fit.heldout_error_after, 'fit_wall_s': fit.wall_time,
            'rollouts': fit.n_rollouts, 'method': fit.method,
            'iterations': fit.iterations, 'warnings': fit.warnings,
            'diagnostics': fit.diagnostics,
            # The arm estimates' joint covariance (SI units, rows in 'names' order): the
            # intervals are its diagonal; a weak direction shared by several parameters
            # (latency vs armature and damping) shows only here.
            'covariance': {'names': [e.name for e in fit.parameters],
                           'matrix': np.asarray(fit.covariance).tolist()}})
    if ofit is not None:
        stage.results['objects'] = {
            'residual_before': ofit.residual_before, 'residual_after': ofit.residual_after,
            'heldout_error_before_m': ofit.heldout_error_before,
            'heldout_error_after_m': ofit.heldout_error_after,
            'heldout_along_before_m': ofit.heldout_along_before,
            'heldout_along_after_m': ofit.heldout_along_after,
            'heldout_joint_before': ofit.heldout_joint_before,
            'heldout_joint_after': ofit.heldout_joint_after,
            'fit_wall_s': ofit.wall_time, 'fit_cpu_s': ofit.cpu_time,
            'rollouts': ofit.n_rollouts,
            'tracker_noise_m': ofit.tracker_noise, 'dropped': ofit.dropped,
            'unstruck': ofit.unstruck, 'per_object': ofit.per_object}
    timings = timer.to_dict()
    timings['seconds']['fit_and_write'] = round(time.perf_counter() - t0, 4)
    stage.results['profile'] = timings
    manifest = stage.finish()
    return StageOutput(stage.folder, manifest, estimates, fit, ofit, str(report),
                       timings=timings)


def probe_counts(requested: int, default: int, strike_probes: int, max_probes: int, *,
                 arm: bool, objects: bool) -> tuple[int, int]:
    """(arm probes, strike probes) of a live identification: ``requested`` arm probes (0 =
    ``default``) and the config's ``strike_probes`` when objects are identified, together at
    most ``max_probes`` (the arm keeps at least one)."""
    n_arm = int(requested) or int(default)
    n_strike = max(0, int(strike_probes)) if objects else 0
    if n_strike:
        n_arm = max(1, min(n_arm, max_probes - n_strike))
        n_strike = min(n_strike, max_probes - (n_arm if arm else 0))
    return n_arm, n_strike


def split_offline_bags(bags, strike_bags, arm_specs, object_specs, named: bool):
    """(arm bags, strike bags, arm specs) of an offline identification: strike bags count
    only when objects are identified (``object_specs``); strike bags alone with nothing
    ``named`` identify the objects only (no arm specs: the arm as last identified)."""
    arm_bags = [b for b in bags if b not in strike_bags]
    strike_bags = list(strike_bags) if object_specs else []
    if not arm_bags and strike_bags and not named:
        arm_specs = []
    return arm_bags, strike_bags, arm_specs


def mean_tracked_poses(samples, ids) -> dict:
    """{id: (xyz, yaw)}: the mean position and circular-mean yaw of each of ``ids`` over
    ``samples`` ((id, xyz, quat_wxyz) triples; ids without samples are left out)."""
    from ..geometry import quat_yaw
    acc: dict[str, list] = {}
    for oid, xyz, quat_wxyz in samples:
        acc.setdefault(oid, []).append((tuple(xyz), quat_yaw(tuple(quat_wxyz))))
    out = {}
    for oid, items in acc.items():
        if oid in ids:
            yaws = np.array([i[1] for i in items])
            out[oid] = (np.mean([i[0] for i in items], axis=0),
                        float(np.arctan2(np.sin(yaws).mean(), np.cos(yaws).mean())))
    return out
