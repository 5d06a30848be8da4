"""Object tracking from one depth image (core/object_tracking.py) against the emulated cell.

Every frame is the real EmulatedWorld rendering with its depth noise (D435-like: sigma 3-7 mm
at 0.9-1.3 m, edge holes, dropout, 1 mm steps); only the evaluator reads the true poses.
Measured with the true camera poses: default cell, 12 box poses: <= 1.35 mm, <= 0.6 deg;
multiview cell, 4 cameras x 6 poses: <= 0.9 mm, <= 0.9 deg (a wider sweep, 96 random frames
of the 4 cells: <= 1.6 mm, <= 1.9 deg, camera_back at 1.2 m the worst). With the pose the cell
publishes (its 2 mm / 2 mrad calibration error): 3.8 mm, all of it the calibration's. Boxes
behind the arm: tracked down to 30% of their points (<= 0.6 mm), missing when hidden.
CPU per 640x480 frame (one core, arm mask on, 2 objects, a loaded 2-core machine): ~11 ms
tracking, 20-35 ms when an object is (re)acquired.
"""
from __future__ import annotations

import time
from pathlib import Path

import mujoco
import numpy as np
import pytest

from real2sim2real_ros.core import camera_model
from real2sim2real_ros.core import object_tracking as ot
from real2sim2real_ros.core.cell_spec import load_cell_spec
from real2sim2real_ros.core.depth_noise import to_16uc1
from real2sim2real_ros.core.emulated_world import EmulatedWorld
from real2sim2real_ros.core.geometry import yaw_quat

CELLS = Path(__file__).resolve().parents[2] / 'config' / 'cells'
POS_TOL = 0.005                 # m, the requirement
YAW_TOL = np.radians(3.0)
# Box poses on the default table (x 0.2..1.0, y -0.5..0.5), clear of the cylinder at
# (0.62, -0.14): (x, y, yaw).
POSES = [(0.55, 0.12, 0.35), (0.77, 0.08, 1.44), (0.45, 0.20, -0.6), (0.70, 0.22, 2.6),
         (0.48, -0.05, 0.0), (0.80, -0.02, -1.2), (0.60, 0.05, 0.9), (0.42, -0.22, 2.0),
         (0.75, -0.30, -2.8), (0.66, 0.30, 0.2), (0.52, -0.33, 1.2), (0.85, 0.18, -0.3)]


def _models(spec):
    return [ot.TrackedObjectModel(o.id, tuple(o.size) if o.shape == 'box' else
                                  (o.size[0], o.size[0], o.size[1]), o.shape,
                                  tuple(o.xyz[:2]), o.yaw) for o in spec.objects]


def _camera(world, name, pose=None):
    cam = world.camera_spec(name)
    T = np.eye(4)
    T[:3, :3], T[:3, 3] = pose if pose is not None else (cam.rotation_matrix, cam.position)
    return world.intrinsics(name).K, T


def _yaw(quat_wxyz) -> float:
    return float(2 * np.arctan2(quat_wxyz[3], quat_wxyz[0]))


def _errors(world, result):
    """{id: (position error m, yaw error rad modulo the shape's symmetry)} of found objects."""
    truth = world.object_poses()
    out = {}
    for oid, pose in result.poses.items():
        xyz, quat = truth[oid]
        yaw_err = 0.0
        if oid.startswith('box'):
            yaw_err = abs(ot.wrap_to(pose.yaw - _yaw(quat), 0.0, np.pi))
        out[oid] = (float(np.linalg.norm(pose.position - xyz)), yaw_err)
    return out


def _place_box(world, x, y, yaw, z=0.025):
    world.reset_objects(['box_0'], [((x, y, z), yaw_quat(yaw))])


def _pose_arm(world, q):
    """Put the arm at ``q`` without physics (test helper: the objects must not be pushed)."""
    with world.lock:
        world.data.qpos[world._qadr] = q
        mujoco.mj_forward(world.model, world.data)


@pytest.fixture(scope='module')
def robot_mask(robot):
    return ot.RobotGeomMask(robot, margin=0.015)


@pytest.fixture(scope='module')
def default_world():
    world = EmulatedWorld(load_cell_spec(CELLS / 'default.yaml'))
    yield world
    world.close()


@pytest.fixture(scope='module')
def multiview_world():
    world = EmulatedWorld(load_cell_spec(CELLS / 'multiview.yaml'))
    yield world
    world.close()


def _track_poses(world, camera, robot_mask, poses, tracker=None):
    tracker = tracker or ot.ObjectTracker(_models(world.spec), world.spec.table.height)
    K, T = _camera(world, camera)
    q = world.joint_positions()
    worst, cpu = np.zeros(2), []
    for x, y, yaw in poses:
        _place_box(world, x, y, yaw)
        _, depth = world.render(camera)
        result = tracker.update(depth, K, T, exclude=robot_mask.at(q))
        assert not result.missing, (camera, (x, y, yaw), result.missing)
        for oid, (e_pos, e_yaw) in _errors(world, result).items():
            assert e_pos <= POS_TOL and e_yaw <= YAW_TOL, (camera, (x, y, yaw), oid, e_pos,
                                                           np.degrees(e_yaw))
            worst = np.maximum(worst, (e_pos, e_yaw))
        cpu.append(result.timings['cpu'])
    return worst, cpu


def test_default_cell_box_poses(default_world, robot_mask):
    worst, cpu = _track_poses(default_world, 'camera', robot_mask, POSES)
    print(f'default cell, 12 poses: worst {worst[0] * 1e3:.2f} mm, '
          f'{np.degrees(worst[1]):.2f} deg; CPU per frame median {np.median(cpu) * 1e3:.1f} ms')
    assert worst[0] <= 0.0025 and worst[1] <= np.radians(2.0)   # measured 1.35 mm, 0.6 deg


@pytest.mark.parametrize('camera', ['camera', 'camera_left', 'camera_front', 'camera_back'])
def test_multiview_cell_every_camera(multiview_world, robot_mask, camera):
    worst, _ = _track_poses(multiview_world, camera, robot_mask, POSES[:6])
    print(f'multiview {camera}: worst {worst[0] * 1e3:.2f} mm, {np.degrees(worst[1]):.2f} deg')


def test_uint16_millimetres_and_float_metres_agree(multiview_world):
    """camera_front publishes 16UC1: the same frame as uint16 mm gives the same poses."""
    world = multiview_world
    world.reset_objects()
    K, T = _camera(world, 'camera_front')
    _, depth = world.render('camera_front')
    a = ot.ObjectTracker(_models(world.spec), 0.0).update(depth, K, T)
    b = ot.ObjectTracker(_models(world.spec), 0.0).update(to_16uc1(depth), K, T)
    assert set(a.poses) == set(b.poses) == {'box_0', 'cylinder_0'}
    for oid in a.poses:
        assert np.linalg.norm(a.poses[oid].position - b.poses[oid].position) < 5e-4
    with pytest.raises(ValueError, match='uint16'):
        ot.depth_in_metres(np.zeros((4, 4), np.int32))


def test_calibrated_extrinsics_as_the_cell_publishes_them(default_world):
    """The cell publishes its camera pose with the spec's calibration error (2 mm / 2 mrad
    1-sigma, drawn from the spec seed): that error, not the tracker, dominates."""
    world = default_world
    world.reset_objects()
    spec = world.spec
    rng = np.random.default_rng(np.random.SeedSequence([spec.seed, 3]))   # as the node draws
    cam = spec.cameras[0]
    pose = camera_model.perturb_pose(cam.rotation_matrix, cam.position,
                                     cam.calibration_error_translation,
                                     cam.calibration_error_rotation, rng)
    K, T = _camera(world, 'camera', pose)
    result = ot.ObjectTracker(_models(spec), 0.0).update(world.render('camera')[1], K, T)
    errors = _errors(world, result)
    print('published extrinsics:', {k: f'{v[0] * 1e3:.2f} mm' for k, v in errors.items()})
    assert set(errors) == {'box_0', 'cylinder_0'}
    assert all(e <= POS_TOL and y <= YAW_TOL for e, y in errors.values())  # measured 3.75 mm


def test_tracking_sequence_keeps_yaw_continuous_and_is_fast(default_world, robot_mask):
    """A box turning through +-pi/2 and sliding: the yaw stays continuous (the box's pi
    symmetry is resolved toward the previous estimate); tracking frames are cheap."""
    world = default_world
    world.reset_objects()
    tracker = ot.ObjectTracker(_models(world.spec), 0.0)
    K, T = _camera(world, 'camera')
    mask = robot_mask.at(world.joint_positions())
    yaws, cpu = [], []
    for k in range(12):
        yaw = 1.2 + 0.08 * k                           # crosses pi/2
        _place_box(world, 0.55 + 0.006 * k, 0.12 - 0.004 * k, yaw)
        result = tracker.update(world.render('camera')[1], K, T, exclude=mask)
        pose = result.poses['box_0']
        assert abs(pose.yaw - yaw) <= YAW_TOL, (k, pose.yaw, yaw)   # not yaw - pi
        e_pos, _ = _errors(world, result)['box_0']
        assert e_pos <= POS_TOL
        yaws.append(pose.yaw)
        if k:
            cpu.append(result.timings['cpu'])
    assert np.all(np.diff(yaws) > 0)
    median = float(np.median(cpu))
    print(f'tracking: CPU per 640x480 frame median {median * 1e3:.1f} ms, '
          f'max {max(cpu) * 1e3:.1f} ms')
    assert median < 0.05


def _behind(world, point, z=0.025):
    """Table x, y of a box whose centre (height ``z``) hides behind ``point`` from the camera."""
    cam = np.asarray(world.camera_spec('camera').position)
    s = (cam[2] - z) / (cam[2] - point[2])
    return cam[:2] + s * (np.asarray(point[:2]) - cam[:2])


def test_box_partly_hidden_by_the_arm_is_tracked_or_missing(default_world, robot,
                                                            robot_mask):
    """Boxes behind the tool, from its tip up to the flange (ready pose: tip 0.2 m above the
    table; lowered: a few cm above the box): every pose reported is within tolerance, boxes
    with a third of their points left (the shaft cuts their image in two) are still tracked,
    a box behind the flange and wrist is missing, none is invented. Measured: tracked down to
    30% of the points, <= 0.6 mm, <= 0.5 deg."""
    world = default_world
    world.reset_objects()
    q0 = np.array(world.spec.robot.initial_positions)
    lowered = q0 + [0.0, 0.3, 0.0, -0.3, 0.0, 0.0]
    away = q0 + [1.5, 0.0, 0.0, 0.0, 0.0, 0.0]          # the reference: nothing in front
    K, T = _camera(world, 'camera')
    tracked, missing = [], []
    try:
        for q in (q0, lowered):
            tip, flange = robot.fk(q)[0], robot.fk(q, 'tool0')[0]
            for along in (0.0, 0.5, 0.75, 1.0):
                x, y = _behind(world, (1 - along) * tip + along * flange)
                if not (0.25 < x < 0.95 and -0.45 < y < 0.45):
                    continue                             # off the table
                for yaw in (0.0, 0.8):
                    _place_box(world, x, y, yaw)
                    _pose_arm(world, away)
                    ref = ot.ObjectTracker(_models(world.spec), 0.0).update(
                        world.render('camera')[1], K, T, exclude=robot_mask.at(away))
                    _pose_arm(world, q)
                    result = ot.ObjectTracker(_models(world.spec), 0.0).update(
                        world.render('camera')[1], K, T, exclude=robot_mask.at(q))
                    if 'box_0' in result.missing:
                        missing.append(((round(float(x), 3), round(float(y), 3), yaw),
                                        result.missing['box_0']))
                        continue
                    e_pos, e_yaw = _errors(world, result)['box_0']
                    assert e_pos <= POS_TOL and e_yaw <= YAW_TOL, ((x, y, yaw), e_pos, e_yaw)
                    tracked.append(result.poses['box_0'].num_points
                                   / ref.poses['box_0'].num_points)
    finally:
        _pose_arm(world, q0)
        world.reset_objects()
    print(f'behind the arm: {len(tracked)} tracked with {np.round(tracked, 2).tolist()} of '
          f'their unoccluded points; {len(missing)} missing: {missing}')
    assert sum(f < 0.6 for f in tracked) >= 4          # really occluded, still tracked
    assert missing                                       # behind the flange: not invented


def test_box_off_the_table_or_out_of_view_is_missing(default_world, robot_mask):
    world = default_world
    world.reset_objects()
    tracker = ot.ObjectTracker(_models(world.spec), 0.0)
    K, T = _camera(world, 'camera')
    mask = robot_mask.at(world.joint_positions())
    assert set(tracker.update(world.render('camera')[1], K, T, exclude=mask).poses) == {
        'box_0', 'cylinder_0'}
    floor = world.spec.table.height - 0.75
    for x, y, z in ((1.15, 0.10, floor + 0.025),        # on the floor beside the table
                    (0.6, 1.4, floor + 0.025)):         # on the floor out of view
        _place_box(world, x, y, 0.3, z)
        result = tracker.update(world.render('camera')[1], K, T, exclude=mask)
        assert 'box_0' in result.missing and 'box_0' not in result.poses, result.poses
        assert set(result.poses) == {'cylinder_0'}       # not mistaken for the box
    _place_box(world, 0.55, 0.12, 0.35)                 # back: found again
    result = tracker.update(world.render('camera')[1], K, T, exclude=mask)
    assert _errors(world, result)['box_0'][0] <= POS_TOL
    world.reset_objects()


def test_robot_masks():
    pts = np.array([[0.0, 0.0, 0.0], [0.05, 0.0, 0.0], [0.2, 0.0, 0.0]])
    assert ot.sphere_mask([[0.0, 0.0, 0.0]], 0.06)(pts).tolist() == [True, True, False]
    box = ot.box_mask([[0.1, 0.0, 0.0]], [np.eye(3)], [[0.06, 0.01, 0.01]])
    assert box(pts).tolist() == [False, True, False]


def test_robot_geom_mask_covers_the_arm(default_world, robot_mask):
    """Without the mask the arm's low points would be candidates; the FK mask removes every
    arm point of the rendered view (the objects' points stay)."""
    world = default_world
    world.reset_objects()
    K, T = _camera(world, 'camera')
    _, depth = world.render('camera', noise=False)
    intr = world.intrinsics('camera')
    pts = camera_model.transform_points(camera_model.depth_to_points(depth, intr, stride=2),
                                        T[:3, :3], T[:3, 3])
    mask = robot_mask.at(world.joint_positions())(pts)
    above = pts[:, 2] > 0.12                            # only the arm is that high
    assert above.sum() > 500 and mask[above].mean() > 0.99
    truth = world.object_poses()
    near_objects = np.zeros(len(pts), bool)
    for xyz, _ in truth.values():
        near_objects |= np.linalg.norm(pts[:, :2] - xyz[:2], axis=1) < 0.05
    assert not mask[near_objects].any()


def test_ray_residual_jacobian_matches_finite_differences():
    rng = np.random.default_rng(1)
    obj = ot.TrackedObjectModel('b', (0.08, 0.06, 0.05))
    pts = np.column_stack([rng.uniform(0.5, 0.6, 500), rng.uniform(0.05, 0.15, 500),
                           rng.uniform(0.0, 0.055, 500)])
    rays = ot._rays(pts, np.array([0.65, -0.55, 0.7]))
    params = np.array([0.55, 0.1, 0.4])
    r, jac, _, _ = ot.ray_residual(obj, pts, params, rays)
    eps = 1e-7
    num = np.column_stack([(ot.ray_residual(obj, pts, params + eps * np.eye(3)[k], rays)[0]
                            - r) / eps for k in range(3)])
    assert np.median(np.abs(jac - num).max(axis=1)) < 1e-6


def test_models_and_reset_validation(default_world):
    with pytest.raises(ValueError, match='extents'):
        ot.TrackedObjectModel('a', (0.1, 0.0, 0.1))
    with pytest.raises(ValueError, match='shape'):
        ot.TrackedObjectModel('a', (0.1, 0.1, 0.1), 'sphere')
    with pytest.raises(ValueError, match='unique'):
        ot.ObjectTracker([ot.TrackedObjectModel('a', (0.1, 0.1, 0.1))] * 2, 0.0)
    square = ot.TrackedObjectModel('s', (0.05, 0.05, 0.05))
    assert square.yaw_period == pytest.approx(np.pi / 2)
    # reset: priors back to the given poses (a weak prior: first frame searches everything)
    world = default_world
    world.reset_objects()
    tracker = ot.ObjectTracker(_models(world.spec), 0.0)
    K, T = _camera(world, 'camera')
    t0 = time.perf_counter()
    tracker.update(world.render('camera')[1], K, T)
    assert tracker._priors['box_0'].strong
    tracker.reset()
    assert not tracker._priors['box_0'].strong
    assert tracker._priors['box_0'].xy.tolist() == [0.55, 0.12]
    assert time.perf_counter() - t0 < 5.0


@pytest.fixture
def stack_cell(robot_mask):
    """config/cells/gripper_stack.yaml (box_0 8 x 6 x 5 cm, box_1 7 x 7 x 4 cm), a tracker of
    its boxes and ``track(n)``: n frames from the cell's camera, the last result."""
    world = EmulatedWorld(load_cell_spec(CELLS / 'gripper_stack.yaml'))
    tracker = ot.ObjectTracker(_models(world.spec), world.spec.table.height)
    K, T = _camera(world, 'camera')
    mask = robot_mask.at(world.joint_positions())

    def track(n=1):
        for _ in range(n):
            result = tracker.update(world.render('camera')[1], K, T, exclude=mask)
        return result
    try:
        yield world, track
    finally:
        world.close()


def _within_tolerance(world, result) -> bool:
    return all(e_pos <= POS_TOL and e_yaw <= YAW_TOL
               for e_pos, e_yaw in _errors(world, result).values())


@pytest.mark.parametrize('offset,yaw', [((0.0, 0.0), 0.0), ((0.006, -0.005), 0.3),
                                        ((-0.008, 0.004), -0.5)])
def test_a_box_stacked_on_another_is_tracked_on_it(stack_cell, offset, yaw):
    """box_0 set on box_1: both join one cluster 9 cm tall (no object is); it is cut at the
    base's top: the base tracked on the table, the box on the base (z = the base's top + its
    half height), each within the tracker's tolerances, frame after frame; back on the
    table, the box is tracked there."""
    world, track = stack_cell
    assert not track().missing
    base = np.array(world.object_poses()['box_1'][0])
    on_top = (base[0] + offset[0], base[1] + offset[1], 0.04 + 0.025)
    world.reset_objects(['box_0'], [(on_top, yaw_quat(yaw))])
    world.step_for(0.3)
    for _ in range(3):      # first sight, then tracking
        result = track()
        assert not result.missing, result.missing
        assert _within_tolerance(world, result), _errors(world, result)
    assert result.poses['box_0'].position[2] == pytest.approx(0.065, abs=0.001)
    assert result.poses['box_1'].position[2] == pytest.approx(0.02, abs=0.001)
    _place_box(world, 0.50, 0.15, 0.2)          # off the base again
    world.step_for(0.3)
    result = track()
    assert not result.missing and result.poses['box_0'].position[2] == pytest.approx(
        0.025, abs=0.001)
    assert _within_tolerance(world, result), _errors(world, result)


def test_the_box_seen_standing_there_is_the_base(stack_cell):
    """The other way round (box_1 on box_0, where box_0 stands): the same 9 cm cluster by
    height; the base is the box last seen (here: given) standing where the stack stands."""
    world, track = stack_cell
    box0 = np.array(world.object_poses()['box_0'][0])
    world.reset_objects(['box_1'], [((box0[0], box0[1], 0.05 + 0.02), yaw_quat(0.1))])
    world.step_for(0.3)
    result = track(2)
    assert not result.missing, result.missing
    assert result.poses['box_1'].position[2] == pytest.approx(0.07, abs=0.001)
    assert result.poses['box_0'].position[2] == pytest.approx(0.025, abs=0.001)
    assert _within_tolerance(world, result), _errors(world, result)
