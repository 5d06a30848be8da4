"""Views of an emulated cell as a calibrated camera rig gives them (RealSense-like depth,
the spec's extrinsic calibration error on the published poses), and the check that a
reconstructed scene's MJCF rests under gravity with the robot attached."""
from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np

from real2sim2real_ros.core import camera_model
from real2sim2real_ros.core.emulated_world import EmulatedWorld, load_robot_model
from real2sim2real_ros.core.reconstruction import CameraIntrinsics, CaptureView
from real2sim2real_ros.core.reconstruction.robot_mask import mujoco_robot_mask
from real2sim2real_ros.core.reconstruction.views import pose_matrix

CELLS = Path(__file__).resolve().parents[2] / 'config' / 'cells'


def capture(spec, calibration_error: bool = True):
    """(views, robot mask, world) from every camera of ``spec``."""
    world = EmulatedWorld(spec)
    rng = np.random.default_rng(spec.seed)
    views = []
    for cam in spec.cameras:
        rgb, depth = world.render(cam.name)
        rot, pos = cam.rotation_matrix, np.asarray(cam.position)
        if calibration_error:     # the pose a real calibration would publish
            rot, pos = camera_model.perturb_pose(rot, pos, cam.calibration_error_translation,
                                                 cam.calibration_error_rotation, rng)
        intr = CameraIntrinsics(cam.fx, cam.fy, cam.cx, cam.cy, cam.width, cam.height)
        views.append(CaptureView(rgb, depth, intr, pose_matrix(rot, pos), cam.name))
    mask = mujoco_robot_mask(world.model, world.data)
    world.close()
    return views, mask, world


def check_scene_rests(result, spec):
    """The MJCF loads with the robot attached; objects settle <= 1 mm and drift <= 1 mm / 2 s."""
    scene = mujoco.MjSpec.from_file(result.mjcf_path)
    robot = load_robot_model(spec.urdf_path())
    scene.attach(robot.spec, frame=scene.worldbody.add_frame(), prefix='robot/')
    for body in scene.bodies:
        if body.name.startswith('robot/'):
            body.gravcomp = 1.0        # the arm holds still; only the objects are under test
    model = scene.compile()
    data = mujoco.MjData(model)
    for k, name in enumerate(robot.joint_names):
        data.joint('robot/' + name).qpos = spec.robot.initial_positions[k]
        actuator = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, 'robot/' + name)
        if actuator >= 0:      # position servos hold the ready pose (ctrl 0 would swing it)
            data.ctrl[actuator] = spec.robot.initial_positions[k]
    mujoco.mj_forward(model, data)
    ids = [o.id for o in result.objects]
    start = {i: data.body('object/' + i).xpos.copy() for i in ids}
    object_bodies = {data.body('object/' + i).id for i in ids}
    worst_pen = 0.0
    for _ in range(int(2.0 / model.opt.timestep)):
        mujoco.mj_step(model, data)
        for c in data.contact[:data.ncon]:
            if {model.geom_bodyid[c.geom1], model.geom_bodyid[c.geom2]} & object_bodies:
                worst_pen = max(worst_pen, -c.dist)
    drift = max(np.linalg.norm(data.body('object/' + i).xpos - start[i]) for i in ids)
    assert worst_pen <= 0.001, worst_pen
    assert drift <= 0.001, drift
