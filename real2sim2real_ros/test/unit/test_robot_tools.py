"""The pusher on any arm (core/tools.py) and the tasks on an arm nobody here wrote: the UR5 of
example-robot-data with the default arm's pusher, in config/cells/ur5.yaml, striking the box."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import mujoco
import numpy as np
import pytest

from real2sim2real_ros.core.cell_spec import (
    CellSpecError,
    default_cell_spec_path,
    load_cell_spec,
)
from real2sim2real_ros.core.emulated_world import EmulatedWorld
from real2sim2real_ros.core.joint_trajectory import JointTrajectoryCommand
from real2sim2real_ros.core.robot_description import (
    default_cell_urdf,
    find_package_dir,
    load_robot,
)
from real2sim2real_ros.core.tasks import get_task
from real2sim2real_ros.core.tasks.base import ResetSample
from real2sim2real_ros.core.tasks.kinematics import READY_POSE, READY_TIP, ToolDownIK, ready_pose
from real2sim2real_ros.core.tasks.worlds import CellWorld
from real2sim2real_ros.core.tools import (
    ToolError,
    add_pusher,
    cell_spec_with_robot,
    ur5_with_pusher_urdf,
)

UR5_CELL = default_cell_spec_path().replace('default.yaml', 'ur5.yaml')


@pytest.fixture(scope='module')
def ur5_urdf():
    import collada  # noqa: F401 - pycollada converts the UR5 DAE meshes (a requirement)
    find_package_dir('example-robot-data')      # a requirement: fails loudly when missing
    return ur5_with_pusher_urdf()


@pytest.fixture(scope='module')
def ur5(ur5_urdf):
    return load_robot(ur5_urdf)


def test_generated_ur5_urdf_keeps_package_uris_and_ends_in_tool_tip(ur5_urdf, ur5, tmp_path):
    text = ur5_urdf.read_text()
    uris = [m.get('filename') for m in ET.fromstring(text).iter('mesh')]
    assert uris and all(u.startswith('package://example-robot-data/') for u in uris)
    assert ur5_with_pusher_urdf() == ur5_urdf            # cached: same file, same text
    assert ur5_urdf.read_text() == text
    fresh = ur5_with_pusher_urdf(tmp_path)
    assert fresh == tmp_path / 'ur5_with_pusher.urdf' and fresh.read_text() == text
    assert ur5.tip_link == 'tool_tip' and ur5.n_joints == 6
    model = ur5.compile()
    assert model.nu == 6 and model.body('pusher').mass[0] == pytest.approx(0.2)


def test_tool_tip_is_the_cell_arms_pusher_length_along_the_flange_z(ur5):
    rng = np.random.default_rng(3)
    for q in [np.zeros(6), *rng.uniform(-2, 2, (3, 6))]:
        flange, fq = ur5.fk(q, 'tool0')
        tip, _ = ur5.fk(q)
        rot = np.zeros(9)
        mujoco.mju_quat2Mat(rot, fq)
        np.testing.assert_allclose(tip - flange, 0.10 * rot.reshape(3, 3)[:, 2], atol=1e-9)
    # The same tool as urdf/cell_arm.urdf: shaft r 8 mm to the ball centre, ball r 15 mm.
    model = ur5.compile()
    geoms = [(model.geom_type[g], tuple(model.geom_size[g].round(4)), model.geom_pos[g][2])
             for g in range(model.ngeom) if model.geom_bodyid[g] == model.body('pusher').id
             and model.geom_contype[g]]
    assert sorted((int(t), s[0], round(float(z), 4)) for t, s, z in geoms) == \
        [(2, 0.015, 0.085), (5, 0.008, 0.0425)]


def test_add_pusher_on_another_flange_axis_and_errors(ur5_urdf):
    src = find_package_dir('example-robot-data') / 'robots/ur_description/urdf/ur5_robot.urdf'
    robot = load_robot(add_pusher(src, 'ee_link', axis=(1, 0, 0)))   # ee_link: x out of flange
    q = np.array([0.3, -1.2, 1.0, -0.5, 0.7, 0.2])
    np.testing.assert_allclose(robot.fk(q)[0], load_robot(ur5_urdf).fk(q)[0], atol=1e-6)
    with pytest.raises(ToolError, match="flange link 'nope'"):
        add_pusher(src, 'nope')
    with pytest.raises(ToolError, match='already has'):
        add_pusher(ur5_urdf)
    with pytest.raises(CellSpecError, match=r'robot\.urdf: unknown robot'):
        load_cell_spec({'robot': {'urdf': 'example-robot-data:ur55+pusher'}})


def test_default_arm_ready_pose_is_unchanged(robot):
    assert robot.source == str(default_cell_urdf())
    np.testing.assert_array_equal(ready_pose(robot), READY_POSE)
    np.testing.assert_array_equal(ToolDownIK(robot).q_ready, READY_POSE)
    np.testing.assert_array_equal(get_task('slide_to_target', robot).ik.q_ready, READY_POSE)


def test_ur5_ready_pose_is_tool_down_and_the_ur5_cells_initial_pose(ur5):
    q = ready_pose(ur5)
    ik = ToolDownIK(ur5)
    np.testing.assert_allclose(ik.q_ready, q)
    tip, rot = ik.fk(q)
    np.testing.assert_allclose(tip, READY_TIP, atol=1e-5)
    assert rot[:, 2] @ [0, 0, -1] > 0.99999
    spec = load_cell_spec(UR5_CELL)
    np.testing.assert_allclose(spec.robot.initial_positions, q, atol=1e-4)
    swapped = cell_spec_with_robot(load_cell_spec(default_cell_spec_path()),
                                   'example-robot-data:ur5+pusher')
    np.testing.assert_allclose(swapped.robot.initial_positions, q, atol=1e-6)


def test_ur5_cell_holds_its_pose_and_tracks_a_slide_strike(ur5):
    spec = load_cell_spec(UR5_CELL)
    assert spec.urdf_path() == str(ur5_with_pusher_urdf())
    world = EmulatedWorld(spec)
    try:
        world.step_for(0.5)      # the servo holds the real link masses (97% gravity comp.)
        assert np.abs(world.true_joint_positions() - world.initial_positions).max() < 1e-3
        task = get_task('slide_to_target', ur5)
        xy = np.array([0.48, 0.10])
        reset = ResetSample(xy, 0.0, xy + [0.14, 0.0])
        plan = task.plan(reset, [0.8, 0.0])
        cell = CellWorld(world, 'box_0')
        cell.reset(plan['q_start'], [*xy, task.object_z], 0.0, via=plan['q_above'])
        start_err = np.linalg.norm(ur5.fk(world.true_joint_positions())[0]
                                   - ur5.fk(plan['q_start'])[0])
        world.set_trajectory(JointTrajectoryCommand(world.joint_names, plan['times'],
                                                    plan['positions'], plan['velocities']))
        lag = round(spec.robot.command_latency / world.timestep)
        ref, act = [], []
        for _ in range(int(plan['duration'] / 0.002)):
            world.step_for(0.002)
            ref.append(ur5.fk(world.controller_state()['reference_positions'])[0])
            act.append(ur5.fk(world.true_joint_positions())[0])
        ref, act = np.array(ref), np.array(act)
        k = lag // 2                 # samples every 2 ms: compare with the delayed reference
        track = np.linalg.norm(ref[:len(ref) - k] - act[k:], axis=1)
        moved = world.object_poses()['box_0'][0][:2] - xy
        print(f'UR5 strike 0.8 m/s: tip at start {start_err * 1e3:.2f} mm off, tracking error '
              f'max {track.max() * 1e3:.1f} mm rms {np.sqrt(np.mean(track ** 2)) * 1e3:.2f} mm, '
              f'final {track[-1] * 1e3:.2f} mm; box moved {np.round(moved, 4).tolist()} m '
              f'(target 0.14 m along +x)')
        assert start_err < 2e-3
        assert track.max() < 0.010 and track[-1] < 1e-3
        assert np.all(act[:, 2] > -0.002)                 # the ball skims, never digs in
        assert 0.08 < moved[0] < 0.20 and abs(moved[1]) < 0.02   # towards the target
    finally:
        world.close()
