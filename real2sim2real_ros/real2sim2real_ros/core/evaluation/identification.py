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
from ..sysid.stage import FitSettings


def identification_config_path() -> Path:
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

    def __init__(self, world, tracker, object_id: str):
        self.world, self.tracker, self.object_id = world, tracker, object_id

    def before_strike(self, _index: int) -> None:
        # The evaluator puts the box back where the cell spec has it before each strike (an
        # operator would; the live node instead alternates headings so the box comes back).
        self.world.reset_objects([self.object_id])
        self.world.step_for(0.2)

    def tracked_poses(self, ids) -> dict:
        from .object_identification import tracked_now
        return {k: v for k, v in tracked_now(self.world, self.tracker).items() if k in ids}

    def current_positions(self):
        return self.world.joint_positions()

    def strike(self, plan, index: int, info: dict):
        from ..sysid.object_fit import StrikeRecording
        from .object_identification import execute
        rec, tracks = execute(self.world, plan.probe, self.tracker)
        return StrikeRecording(rec, tracks, plan.strikes, f'strike_{index}', info)


def fit_settings(cfg) -> FitSettings:
    """The harness's fit settings: the node's defaults, ``cfg.nthread`` threads."""
    return FitSettings(nthread=max(1, int(getattr(cfg, 'nthread', 1) or 1)))


def identify_cell(world, robot, cfg, found, table_height: float, out_dir,
                  recon_objects=None, scene_path: str | None = None,
                  controller_config: str | None = None) -> dict:
    """Arm + object identification on ``world`` through the identification stage
    (core/sysid/stage.py, as the node runs it): the config is config/identification.yaml,
    the servo gains the cell's controller configuration ``controller_config`` (a ros2_control
    YAML, core/controller_config.py). Writes ``out_dir/identify_NNN``; returns the record
    the harness reports (with the stage's per-sub-stage ``profile``)."""
    from ..sysid import stage as ident
    from .object_identification import DepthTracker, offsets_in_twin_frame, tracked_models
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    conf = load_identification_config(identification_config_path(), robot,
                                      controller_config=controller_config)
    settings = fit_settings(cfg)
    timer = ident.StageTimer()
    # Arm probes about the ready pose (executed and recorded as the executor's bag holds).
    world.reset()
    center = world.joint_positions()
    with timer('arm_probes'):
        probes = ident.arm_probes(robot, center, cfg.arm_probes,
                                  duration=cfg.arm_probe_duration, amplitude=0.35,
                                  velocity_fraction=0.5)
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
    cell = CellStrikes(world, tracker, cfg.object_id)
    world.reset()
    world.step_for(0.3)
    try:
        strike_recs = ident.run_strikes(
            cell, robot, obj_twin, obj_specs, conf, cfg.object_strikes + 1,  # the last held out
            settings=settings, values=ident.arm_values(conf), timer=timer,
            before_strike=cell.before_strike, scene=scene_path or '')
    finally:
        obj_twin.close()
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
        settings=settings, reference=reference, timer=timer,
        inputs={'cell': 'in-process emulated cell', 'live_probes':
                [p.name for p in probes] + [r.name for r in strike_recs],
                'scene': scene_path or ''},
        parameters={'arm_probe_duration': cfg.arm_probe_duration,
                    'object_strikes': cfg.object_strikes})
    fit, ofit = out.fit, out.object_fit
    profile = out.timings['seconds']
    record = {'arm_probes': len(probes), 'arm_residual_before': fit.residual_before,
              'arm_residual_after': fit.residual_after, 'arm_fit_s': fit.wall_time,
              'arm_fit_method': fit.method, 'arm_fit_warnings': fit.warnings,
              'arm_condition_number': fit.diagnostics.get('condition_number'),
              'object_frame_yaw': frame_yaw, 'strikes': len(strike_recs),
              'object_heldout_error_before': ofit.heldout_error_before,
              'object_heldout_error_after': ofit.heldout_error_after,
              'object_heldout_error_true_parameters': ofit.heldout_error_reference,
              'object_heldout_along_before': ofit.heldout_along_before,
              'object_heldout_along_after': ofit.heldout_along_after,
              'arm_heldout_joint_error_before': ofit.heldout_joint_before,
              'arm_heldout_joint_error_after': ofit.heldout_joint_after,
              'tracker_frames': tracker.frames,
              'tracker_cpu_ms_per_frame': 1e3 * tracker.cpu / max(tracker.frames, 1),
              'object_wall_s': sum(profile.get(k, 0.0) for k in (
                  'tracked_poses', 'strike_planning', 'strike_probes',
                  'object_fit_intermediate', 'object_fit')),
              'probes': len(probes) + len(strike_recs),
              'nthread': settings.nthread, 'stage_folder': str(out.folder),
              'controller_config': conf.controller_config,
              'profile': out.timings}
    record['wall_s'] = time.perf_counter() - t0
    return {'parameters': out.estimates, 'start_values': conf.start_values(), **record}
