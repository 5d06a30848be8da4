"""The harness's object observation for identification: strike probes executed on the
in-process emulated cell, the objects observed through the depth tracker (core/object_tracking:
the cell's camera renders with its depth noise, the camera pose with the spec's calibration
error, the arm masked from its URDF at the measured joint states). The strike loop, its
planning and the fits are the identification stage's (core/sysid/stage.py, the
system_identification node's): evaluation/identification.py runs it with these.
"""
from __future__ import annotations

import time

import numpy as np

from ..joint_trajectory import JointTrajectoryCommand
from ..sysid.fit import Recording


def offsets_in_twin_frame(spec, object_id: str, found_id: str,
                          frame_yaw: float | None) -> dict:
    """The cell object's true lateral centre of mass offsets in the twin object's frame (the
    reconstruction may turn the box's axes by a multiple of 90 degrees), named as the twin's."""
    obj = next((o for o in spec.objects if o.id == object_id), None)
    if obj is None or frame_yaw is None:
        return {}
    d = obj.yaw - frame_yaw
    c, s = np.cos(d), np.sin(d)
    x, y = obj.com_offset[0], obj.com_offset[1]
    return {f'body/{found_id}/com_offset_x': float(c * x - s * y),
            f'body/{found_id}/com_offset_y': float(s * x + c * y)}


def episode_frame_yaw(spec, object_id: str, found) -> float:
    """The episodes' object frame (the twin's, from reconstruction) to the cell object's own
    frame, about z: the yaw between the true and the reconstructed object rounded to a
    multiple of 90 degrees (reconstruction orders a box's sides, so it may turn its axes);
    0 for a cylinder, whose yaw no view shows. Evaluator side (reads the spec's truth): what
    CellWorld places the object with, so one episode is one physical placement in both."""
    obj = next((o for o in spec.objects if o.id == object_id), None)
    if obj is None or found.shape == 'cylinder':
        return 0.0
    quarter = np.pi / 2
    return float(round((obj.yaw - found.yaw) / quarter) * quarter)


def tracked_models(objects) -> list:
    """Tracker models (core/object_tracking.TrackedObjectModel) of reconstructed objects, as
    the object_tracker node builds them from the scene (box, cylinder; others as boxes)."""
    from ..object_tracking import TrackedObjectModel
    return [TrackedObjectModel(o.id, tuple(float(e) for e in o.extents),
                               o.shape if o.shape in ('box', 'cylinder') else 'box',
                               tuple(float(v) for v in o.position[:2]), float(o.yaw))
            for o in objects]


class DepthTracker:
    """What the object_tracker node does, on an EmulatedWorld's camera renders."""

    def __init__(self, world, robot, models, table_height: float, camera: str | None = None,
                 rate: float = 10.0, seed: int | None = None):
        from .. import camera_model
        from ..object_tracking import ObjectTracker, RobotGeomMask
        # What the cell's calibration would publish: the true pose with its error drawn once.
        with world.truth.emulation('calibrated camera pose and intrinsics'):
            spec = world.spec
            cam = spec.camera(camera) if camera else spec.cameras[0]
            rng = np.random.default_rng(spec.seed if seed is None else seed)
            rot, pos = camera_model.perturb_pose(cam.rotation_matrix, np.asarray(cam.position),
                                                 cam.calibration_error_translation,
                                                 cam.calibration_error_rotation, rng)
        self.camera = cam.name
        self.T = np.eye(4)
        self.T[:3, :3], self.T[:3, 3] = rot, pos
        self.K = np.array([[cam.fx, 0, cam.cx], [0, cam.fy, cam.cy], [0, 0, 1.0]])
        self.tracker = ObjectTracker(models, table_height)
        self.mask = RobotGeomMask(robot)
        self.rate = float(rate)
        self.frames = 0
        self.cpu = 0.0
        self.last_missing: dict = {}

    def observe(self, world) -> dict:
        """{id: (xyz, yaw)} of the objects found in one new frame."""
        _, _, depth = world.render_with_time(self.camera, rgb=False)   # depth stream only
        t = time.process_time()
        res = self.tracker.update(depth, self.K, self.T,
                                  exclude=self.mask.at(world.joint_positions()))
        self.cpu += time.process_time() - t
        self.frames += 1
        self.last_missing = dict(res.missing)       # id -> why it was not reported
        return {oid: (p.position.copy(), float(p.yaw)) for oid, p in res.poses.items()}


def execute(world, probe, tracker: DepthTracker, joint_period: float = 0.01,
            after: float = 0.3):
    """Run ``probe`` on the cell from where it is; record joint states (100 Hz, noisy) and the
    tracked poses (tracker.rate). Returns (Recording, {id: ObjectTrack})."""
    from ..sysid.object_fit import ObjectTrack
    ref0 = world.controller_state()['reference_positions']
    q0, t0 = world.joint_positions(), world.time
    world.set_trajectory(JointTrajectoryCommand(probe.joint_names, probe.times,
                                                probe.positions, probe.velocities), now=t0)
    ts, qs, obs = [], [], {}
    next_track = 0.0
    while world.time - t0 < probe.duration + after:
        world.step_for(joint_period)
        t = world.time - t0
        ts.append(t)
        qs.append(world.joint_positions())
        if t + 1e-9 >= next_track:
            for oid, (xyz, yaw) in tracker.observe(world).items():
                obs.setdefault(oid, []).append((t, xyz, yaw))
            next_track += 1.0 / tracker.rate
    rec = Recording(np.array(ts), np.array(qs), q0, probe.times, probe.positions,
                    probe.velocities, None, ref0, name=probe.name)
    tracks = {oid: ObjectTrack(np.array([o[0] for o in v]), np.array([o[1] for o in v]),
                               np.array([o[2] for o in v])) for oid, v in obs.items()}
    return rec, tracks


def tracked_now(world, tracker: DepthTracker, frames: int = 3) -> dict:
    """{id: (xyz, yaw)}: the mean of a few frames at rest."""
    seen: dict = {}
    for _ in range(frames):
        for oid, (xyz, yaw) in tracker.observe(world).items():
            seen.setdefault(oid, []).append((xyz, yaw))
        world.step_for(1.0 / tracker.rate)
    return {oid: (np.mean([v[0] for v in vs], axis=0),
                  float(np.arctan2(np.mean([np.sin(v[1]) for v in vs]),
                                   np.mean([np.cos(v[1]) for v in vs]))))
            for oid, vs in seen.items()}
