"""The harness's identification stage: the identification stage of the system_identification
node (core/sysid/stage.py: probes, strike loop, fits, the ``identify_NNN`` folder), its probes
executed on an in-process emulated cell.

Arm: ``arm_probes`` multisine probes about the ready pose (the node's defaults: 0.35 rad,
half the velocity limits). Objects: ``object_strikes`` strikes on the task's object plus one
held out (core/sysid/object_*), observed through the depth tracker; the held-out strike also
scores the arm fit (its joint states). Probe executions in all: ``arm_probes +
object_strikes + 1`` (5 with the defaults).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..joint_trajectory import JointTrajectoryCommand
from ..sysid.config import load_identification_config
from ..sysid.fit import Recording
from ..sysid.object_probes import footprint_radius
from ..sysid.probes import effort_limited_multisine, predicted_torques
from ..sysid.stage import FitSettings


def identification_config_path() -> Path:
    """Path of config/identification.yaml: the source tree's, else the installed package share's."""
    here = Path(__file__).resolve().parents[3] / 'config' / 'identification.yaml'
    if here.exists():
        return here
    from ament_index_python.packages import get_package_share_directory
    return Path(get_package_share_directory('real2sim2real_ros')) / 'config' / \
        'identification.yaml'


def record_probe(world, probe, period: float = 0.002, settle: float = 0.3) -> Recording:
    """Execute ``probe`` on the emulated cell from rest; record its noisy joint positions (what
    the executor's bag holds, at 500 Hz)."""
    world.step_for(settle)
    ref0 = world.controller_state()['reference_positions']
    q0, t0 = world.joint_positions(), world.time
    world.set_trajectory(JointTrajectoryCommand(probe.joint_names, probe.times,
                                                probe.positions, probe.velocities), now=t0)
    ts, qs = [], []
    for _ in range(int(round((probe.duration + 0.2) / period))):
        world.step_for(period)
        ts.append(world.time - t0)
        qs.append(world.joint_positions())
    return Recording(np.array(ts), np.array(qs), q0, probe.times, probe.positions,
                     probe.velocities, None, ref0, name=probe.name)


class CellStrikes:
    """core/sysid/stage.StrikeCell on the in-process emulated cell: the strike executed on the
    world, the object observed through the depth tracker (what the object_tracker node does
    on the cell's camera)."""

    def __init__(self, world, tracker, object_id: str, track_id: str | None = None):
        self.world, self.tracker, self.object_id = world, tracker, object_id
        self.track_id = track_id or object_id     # the tracker's (reconstruction's) name
        # Scoring only: the struck object's true (xy before, xy after) per strike, for the
        # tracker's displacement error (never handed to the fit).
        self.true_xy: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def before_strike(self, _index: int) -> None:
        """Put the struck object back at its spec pose before strike ``_index``."""
        # The evaluator puts the box back where the cell spec has it before each strike (an
        # operator would; the live node instead alternates headings so the box comes back).
        self.world.reset_objects([self.object_id])
        self.world.step_for(0.2)

    def tracked_poses(self, ids) -> dict:
        """Object id -> tracked pose for the ids in ``ids`` that the tracker sees now."""
        from .object_identification import tracked_now
        return {k: v for k, v in tracked_now(self.world, self.tracker).items() if k in ids}

    def current_positions(self):
        """The arm's measured joint positions (rad)."""
        return self.world.joint_positions()

    def strike(self, plan, index: int, info: dict):
        """Execute strike ``index`` of ``plan`` on the cell and return its StrikeRecording (joints
        and object tracks)."""
        from ..sysid.object_fit import StrikeRecording
        from .object_identification import execute
        before = self._true_xy()
        rec, tracks = execute(self.world, plan.probe, self.tracker)
        self.true_xy[f'strike_{index}'] = (before, self._true_xy())
        return StrikeRecording(rec, tracks, plan.strikes, f'strike_{index}', info)

    def _true_xy(self) -> np.ndarray:
        with self.world.truth.scoring():
            return np.asarray(self.world.object_poses()[self.object_id][0][:2], float).copy()

    def displacement_error(self, rec, frames: int = 5) -> float:
        """Scoring: how far the tracked displacement of the struck object over the strike
        recording ``rec`` (the mean of the track's first and last ``frames`` frames, both at
        rest) is from the true one (m); nan without a track."""
        track = rec.tracks.get(self.track_id)
        if track is None or len(track.times) < 2 * frames or rec.name not in self.true_xy:
            return float('nan')
        tracked = track.positions[-frames:, :2].mean(0) - track.positions[:frames, :2].mean(0)
        t0, t1 = self.true_xy[rec.name]
        return float(np.linalg.norm(tracked - (t1 - t0)))


def fit_settings(cfg) -> FitSettings:
    """The harness's fit settings: the node's defaults, ``cfg.nthread`` threads."""
    return FitSettings(nthread=max(1, int(getattr(cfg, 'nthread', 1) or 1)))


PROBE_CLEARANCE = 0.03      # m: every arm link this far from every object and the table
PROBE_DEEPEN = 0.005        # m: a link already that near at rest may come this much nearer
PROBE_AMPLITUDES = (0.35, 0.25, 0.18, 0.12)   # rad, tried in turn until a probe is clear
PROBE_SEEDS_PER_AMPLITUDE = 3


def pair_distances(scene_twin, qs, margin: float = PROBE_CLEARANCE) -> dict:
    """{(robot geom, scene geom): smallest distance (m)} over joint positions ``qs`` (N, J)
    for the pairs nearer than ``margin`` (MuJoCo's collision with that margin): the robot is
    every body but the world (the table) and the scene's ``object/`` bodies."""
    import mujoco
    m = scene_twin.model
    d = mujoco.MjData(m)
    robot = {b for b in range(1, m.nbody) if not m.body(b).name.startswith('object/')}
    saved = m.geom_margin.copy()
    m.geom_margin[:] = margin
    out: dict = {}
    try:
        for qk in np.atleast_2d(np.asarray(qs, float)):
            d.qpos[:] = m.qpos0
            d.qpos[scene_twin._qadr] = qk
            mujoco.mj_forward(m, d)
            for c in d.contact[:d.ncon]:
                g1, g2 = int(c.geom1), int(c.geom2)
                r1, r2 = int(m.geom_bodyid[g1]) in robot, int(m.geom_bodyid[g2]) in robot
                if r1 == r2:
                    continue
                key = (g1, g2) if r1 else (g2, g1)
                out[key] = min(out.get(key, margin), float(c.dist))
        return out
    finally:
        m.geom_margin[:] = saved


def probe_clearance(scene_twin, probe, q_start, rest: dict | None = None,
                    margin: float = PROBE_CLEARANCE, rate: float = 50.0) -> float:
    """The probe's slack (m; >= 0: clear) along its reference from ``q_start``, sampled at
    ``rate``, against the reconstructed scene (its table and every object): every
    robot-to-scene pair stays ``margin`` apart, or, a pair already nearer at rest (``rest``:
    :func:`pair_distances` at the start; e.g. a base link beside a high table's edge), comes
    at most PROBE_DEEPEN nearer than there."""
    traj = scene_twin._reference(np.asarray(q_start, float), probe.times, probe.positions,
                                 probe.velocities)
    t = np.arange(0.0, float(probe.times[-1]) + 1e-9, 1.0 / rate)
    q, _ = scene_twin._sample(traj, t)
    rest = rest or {}
    slack = margin
    for key, dist in pair_distances(scene_twin, q, margin).items():
        need = margin if key not in rest else min(margin, rest[key] - PROBE_DEEPEN)
        slack = min(slack, dist - need)
    return slack


def plan_arm_probes(robot, center, n: int, duration: float, scene_path: str | None):
    """``n`` multisine probes about ``center``, each planned clear of every reconstructed
    object and the table (:func:`probe_clearance`; smaller amplitudes, other seeds, until
    clear). Returns (probes, record). CellEnded ARM_PROBES_BLOCKED when no probe is clear."""
    scene = rest = None
    if scene_path:
        from ..twin import Twin
        scene = Twin(robot, scene_path)
        rest = pair_distances(scene, center)
    try:
        return _plan_arm_probes(robot, center, n, duration, scene, rest)
    finally:
        if scene is not None:
            scene.close()


def _plan_arm_probes(robot, center, n, duration, scene, rest):
    from .reasons import CellEnded
    probes, record, seed = [], [], 0
    for _ in range(n):
        chosen = None
        for amp in PROBE_AMPLITUDES:
            for _ in range(PROBE_SEEDS_PER_AMPLITUDE):
                # Each joint's excursion scaled so its predicted torque (gravity + inertia,
                # MuJoCo inverse dynamics) stays within 80% of its effort limit.
                p = effort_limited_multisine(robot, center, duration=duration, amplitude=amp,
                                             velocity_fraction=0.5, seed=seed,
                                             name=f'probe_{seed}')
                seed += 1
                slack = PROBE_CLEARANCE if scene is None else probe_clearance(scene, p, center,
                                                                              rest)
                if slack >= 0.0:
                    chosen = (p, amp, slack)
                    break
                record.append({'probe': p.name, 'amplitude_rad': amp, 'rejected': True,
                               'slack_m': slack})
            if chosen:
                break
        if chosen is None:
            raise CellEnded('ARM_PROBES_BLOCKED',
                            f'no multisine arm probe about the ready pose (amplitudes '
                            f'{PROBE_AMPLITUDES} rad) keeps the arm {100 * PROBE_CLEARANCE:.0f}'
                            f' cm clear of the reconstructed table and objects: clear the '
                            f'space under the ready pose')
        probes.append(chosen[0])
        peak = np.abs(predicted_torques(robot, chosen[0])).max(axis=0)
        record.append({'probe': chosen[0].name, 'amplitude_rad': chosen[1], 'rejected': False,
                       'slack_m': chosen[2], 'checked': scene is not None,
                       'near_at_rest': len(rest or {}),
                       'predicted_peak_torque_fraction': [
                           round(float(x), 3) for x in peak / robot.effort_limits]})
    return probes, record


def identify_cell(world, robot, cfg, found, table_height: float, out_dir,
                  recon_objects=None, scene_path: str | None = None,
                  controller_config: str | None = None) -> dict:
    """Arm + object identification on ``world`` through the identification stage
    (core/sysid/stage.py, as the node runs it): the config is ``cfg.identification_config``
    (default config/identification.yaml), the servo gains the cell's controller
    configuration ``controller_config`` (a ros2_control YAML, core/controller_config.py).
    Writes ``out_dir/identify_NNN``; returns the record the harness reports (with the
    stage's per-sub-stage ``profile``)."""
    from ..sysid import stage as ident
    from .object_identification import DepthTracker, offsets_in_twin_frame, tracked_models
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    conf = load_identification_config(
        cfg.identification_config or identification_config_path(), robot,
        controller_config=controller_config)
    settings = fit_settings(cfg)
    timer = ident.StageTimer()
    # Arm probes about the ready pose (executed and recorded as the executor's bag holds).
    world.reset()
    center = world.joint_positions()
    with timer('arm_probe_planning'):    # clear of the reconstructed table and objects
        probes, probe_plan = plan_arm_probes(robot, center, cfg.arm_probes,
                                             cfg.arm_probe_duration, scene_path)
    with timer('arm_probes'):
        arm_recs = [record_probe(world, p) for p in probes]
    # Objects: the task's object of the reconstructed scene (every object in the twin, so the
    # planner keeps strikes clear of the others).
    obj_twin, obj_specs, note = ident.object_setup(robot, conf, scene_path or '',
                                                   object_ids=[found.id], timer=timer)
    if not obj_specs:
        raise RuntimeError(f'object identification: {note}')
    from ..sysid.object_fit import object_frame_yaw
    frame_yaw = object_frame_yaw(obj_twin, found.id)
    models = tracked_models(o for o in (recon_objects or [found]) if o.id in obj_twin.object_ids)
    tracker = DepthTracker(world, robot, models, table_height)   # calibration: the spec's seed
    cell = CellStrikes(world, tracker, cfg.object_id, found.id)
    world.reset()
    world.step_for(0.3)
    # The arm fit in line (the strikes' simulation has no core to spare), when the objects'
    # validation fit needs its values: before the last strike.
    arm_fit = ident.ArmFit(ident.arm_twin(robot, conf, conf.specs, settings, timer), conf.specs,
                           arm_recs, strikes_follow=True, settings=settings, timer=timer,
                           background=False)
    try:
        strikes = ident.run_strikes(
            cell, robot, obj_twin, obj_specs, conf, cfg.object_strikes + 1,  # the last held out
            settings=settings, values=ident.arm_values(conf), timer=timer,
            final_values=lambda: ident.arm_values(conf, conf.specs, arm_fit.result()),
            before_strike=cell.before_strike, scene=scene_path or '',
            footprints={o.id: (np.asarray(o.position[:2], float),
                               footprint_radius(o.shape, o.extents))
                        for o in (recon_objects or []) if o.id != found.id})
    except BaseException:
        arm_fit.twin.close()    # fit_and_write closes it otherwise
        raise
    finally:
        obj_twin.close()
    strike_recs = strikes.recordings
    # The objects' true values in the twin's names and frame: the held-out floor (scoring).
    names = {s.name.rsplit('/', 1)[-1]: s.name for s in obj_specs}
    with world.truth.scoring():
        truth = world.hidden_truth()
        reference = {names['friction']: truth[f'geom/{cfg.object_id}/friction'],
                     names['mass']: truth[f'body/{cfg.object_id}/mass'],
                     **offsets_in_twin_frame(world.spec, cfg.object_id, found.id, frame_yaw)}
    out = ident.fit_and_write(
        robot, conf, out_dir, arm_specs=conf.specs, object_specs=obj_specs,
        scene=scene_path or '', arm_recs=arm_recs, strike_recs=strike_recs,
        settings=settings, reference=reference, timer=timer, arm_fit=arm_fit,
        validation=strikes.validation,
        inputs={'cell': 'in-process emulated cell', 'live_probes':
                [p.name for p in probes] + [r.name for r in strike_recs],
                'scene': scene_path or ''},
        parameters={'arm_probe_duration': cfg.arm_probe_duration,
                    'object_strikes': cfg.object_strikes})
    fit, ofit = out.fit, out.object_fit
    profile = out.timings['seconds']
    t_folds = time.perf_counter()
    folds = ident.heldout_folds(robot, conf, scene_path or '', obj_specs, strike_recs,
                                settings, arm_fit=fit, reference=reference, last=ofit)
    record = {'arm_probes': len(probes), 'arm_residual_before': fit.residual_before,
              'arm_residual_after': fit.residual_after, 'arm_fit_s': fit.wall_time,
              'arm_fit_method': fit.method, 'arm_fit_warnings': fit.warnings,
              'arm_condition_number': fit.diagnostics.get('condition_number'),
              'arm_fit_at_bound': list(fit.diagnostics.get('at_bound') or []),
              'arm_fit_spikes': len(fit.diagnostics.get('spikes') or []),
              'arm_probe_plan': probe_plan,
              'object_frame_yaw': frame_yaw, 'strikes': len(strike_recs),
              # What each strike probe did to the task's object (its plan) and, for the
              # fitted ones, the free slide the tracker saw (m past the push).
              'strike_plan': [{'probe': r.name, 'speed': float(s.speed),
                               'heading': float(s.heading),
                               'push_length': float(s.push_length), 'gentle': bool(s.gentle)}
                              for r in strike_recs for s in r.strikes
                              if s.object_id == found.id],
              'object_fit_slides': {k: ofit.per_object.get(found.id, {}).get(k) for k in (
                  'speeds_m_s', 'slides_m')},
              'object_heldout_error_before': ofit.heldout_error_before,
              'object_heldout_error_after': ofit.heldout_error_after,
              'object_heldout_error_true_parameters': ofit.heldout_error_reference,
              'object_heldout_error_observable_true': ofit.heldout_error_observable,
              'object_heldout_folds': folds,
              'object_heldout_folds_s': time.perf_counter() - t_folds,
              'tracker_displacement_error': [cell.displacement_error(r)
                                             for r in strike_recs],
              'object_heldout_along_before': ofit.heldout_along_before,
              'object_heldout_along_after': ofit.heldout_along_after,
              'arm_heldout_joint_error_before': ofit.heldout_joint_before,
              'arm_heldout_joint_error_after': ofit.heldout_joint_after,
              'tracker_frames': tracker.frames,
              'tracker_cpu_ms_per_frame': 1e3 * tracker.cpu / max(tracker.frames, 1),
              'object_wall_s': sum(profile.get(k, 0.0) for k in (
                  'tracked_poses', 'strike_planning', 'strike_probes',
                  'object_fit_intermediate', 'object_fit_validation_wait', 'object_fit')),
              'probes': len(probes) + len(strike_recs),
              'nthread': settings.nthread, 'stage_folder': str(out.folder),
              'controller_config': conf.controller_config,
              'identification_config': conf.source, 'profile': out.timings}
    # The stage's own wall time: the folds are scoring, not identification.
    record['wall_s'] = time.perf_counter() - t0 - record['object_heldout_folds_s']
    return {'parameters': out.estimates, 'start_values': conf.start_values(), **record}


def identify_grip(world, robot, cfg, task, twin, found, table_height: float, frame_yaw: float,
                  models) -> dict:
    """The finger-object friction and the held mass of a grasping ``task``'s object
    (core/grasping/slip.py): the slip probe on the in-process emulated cell (its start drawn
    like an episode's and placed by the evaluator, the grasp planned from the tracked start
    when ``cfg.observation`` is 'tracker'); the held mass from the arm's efforts goes into
    ``twin`` (the identified twin: a core.twin.Twin with the task's scene) before the
    friction fit there, since the slip depends on both. Returns {'estimate':
    ParameterEstimate of the finger friction, 'mass': ParameterEstimate of the object's mass
    from the efforts or None (the box was out before the lift ended), 'cell': SlipRun
    record, 'fit': FrictionFit record, 'held_mass': [kg, residual 95% half-width] or None}."""
    from ..grasping.slip import (
        PARAMETER,
        SlipConfig,
        fit_finger_friction,
        held_mass,
        held_mass_estimate,
        run_slip_probe,
    )
    from ..parameters import ParameterEstimate
    from ..sysid.object_fit import object_parameter_names
    from ..tasks.worlds import CellWorld, TwinWorld
    observer = None
    if cfg.observation == 'tracker':
        from .observation import TrackedObservation
        observer = TrackedObservation(world, robot, models, table_height, found.id,
                                      rate=cfg.tracker_rate, latency=cfg.tracker_latency)
    slip_cfg = SlipConfig()
    reset = task.sample_reset(np.random.default_rng(cfg.seed + 6000))
    cell = CellWorld(world, cfg.object_id, observer, stream=False, frame_yaw=frame_yaw)
    run = run_slip_probe(task, cell, reset, slip_cfg)
    mass = held_mass(robot, run)
    name = object_parameter_names(found.id)[1]
    mass_est = held_mass_estimate(name, mass, twin.get_parameter(name))
    if mass_est is not None:
        twin.set_parameter(name, mass_est.value)
    prior = twin.get_parameter(PARAMETER)
    fit = fit_finger_friction(task, TwinWorld(twin, found.id), run, slip_cfg)
    est = ParameterEstimate(PARAMETER, fit.value, fit.lower_95, fit.upper_95, prior, '1',
                            fit.identified)
    return {'estimate': est, 'mass': mass_est, 'cell': run.to_dict(), 'fit': fit.to_dict(),
            'held_mass': None if mass is None else list(mass)}
