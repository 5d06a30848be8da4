"""pick_and_place on the robot (core/policy_execution.PickEpisode, no ROS): a checkpoint's
pick plan becomes four validated motions with the jaw between them, and, sent as the executor
sends them (jaw goal, then the trajectory) to an in-process emulated gripper cell observed by
its true pose (a perfect tracker), it carries the cell's 8 x 6 cm box into the target square."""
from pathlib import Path

import numpy as np
import pytest

from real2sim2real_ros.core import execution_safety as es
from real2sim2real_ros.core import policy_execution as pe
from real2sim2real_ros.core.cell_spec import load_cell_spec
from real2sim2real_ros.core.emulated_world import EmulatedWorld
from real2sim2real_ros.core.joint_trajectory import JointTrajectoryCommand
from real2sim2real_ros.core.robot_description import gripper_cell_urdf, load_robot
from real2sim2real_ros.core.tasks import get_task

CELLS_DIR = Path(__file__).resolve().parents[2] / 'config' / 'cells'
# The bringup's executor workspace (config/params.yaml).
WORKSPACE = es.Workspace(np.array([-0.3, -0.9, 0.0]), np.array([1.1, 0.9, 1.3]))


@pytest.fixture(scope='module')
def robot():
    return load_robot(gripper_cell_urdf())


@pytest.fixture(scope='module')
def gate(robot):
    return pe.SafetyGate(es.JointLimits.from_robot(robot), robot.fk, WORKSPACE,
                         fk_lipschitz=es.fk_lipschitz_bound(robot))


def _episode(robot, gate, goal, size=(0.08, 0.06, 0.05)):
    task = get_task('pick_and_place', robot, {'object_size': size})
    return pe.make_episode(pe.LoadedPolicy(Path('scripted'), task, lambda obs: np.zeros(4),
                                           {}), gate, goal)


def test_the_pick_plan_is_validated_motions_with_the_jaw_between(robot, gate):
    ep = _episode(robot, gate, [0.55, 0.30])
    pose = pe.ObjectPose.from_xyz_quat([0.55, 0.12, 0.025], [np.cos(0.175), 0, 0,
                                                             np.sin(0.175)])
    q0 = ep.task.ik.q_ready.copy()
    motions = ep.start(q0, pose)
    assert [m.label for m in motions] == ['approach', 'descend', 'carry', 'retreat', 'home']
    jaw = ep.task.jaw
    assert [m.grip for m in motions] == [None, (jaw.upper, 20.0), (jaw.lower, 20.0),
                                         (jaw.upper, 20.0), None]
    assert all(m.validated is not None for m in motions)
    # the approach ends where the descent starts: the wrist already turned
    np.testing.assert_allclose(motions[0].trajectory.positions[-1], ep.plan['q_above'],
                               atol=1e-6)
    assert motions[3].settle == pytest.approx(ep.task.cfg.settle_time)
    # home: from the retreat's end back to where the episode started
    np.testing.assert_allclose(motions[4].trajectory.positions[-1], q0, atol=1e-6)


def test_refusals_name_the_goal(robot, gate):
    with pytest.raises(pe.ExecutionError, match='outside the workspace'):
        _episode(robot, gate, [2.0, 0.0])
    stack = get_task('stack', robot)
    ep = pe.make_episode(pe.LoadedPolicy(Path('s'), stack, lambda obs: np.zeros(4), {}), gate,
                         [])
    box = pe.ObjectPose.from_xyz_quat([0.45, -0.10, 0.025], [1.0, 0, 0, 0])
    with pytest.raises(pe.ExecutionError, match="no fresh tracked pose of the base 'box_1'") \
            as err:
        ep.start(ep.task.ik.q_ready.copy(), box)     # nothing tracked besides the box
    assert err.value.kind == pe.OBSERVATION_UNAVAILABLE
    ep.other_pose = {'box_1': pe.ObjectPose.from_xyz_quat([2.0, 0.1, 0.02],
                                                          [1.0, 0, 0, 0])}.get
    with pytest.raises(pe.ExecutionError, match="tracked base 'box_1'.*outside the workspace"):
        ep.start(ep.task.ik.q_ready.copy(), box)


def test_the_pose_buffer_keeps_the_other_objects_fresh_or_not():
    buf = pe.PoseBuffer('box_0')
    p0 = pe.ObjectPose.from_xyz_quat([0.5, 0.1, 0.02], [1.0, 0, 0, 0], 10.0)
    p1 = pe.ObjectPose.from_xyz_quat([0.4, 0.2, 0.02], [1.0, 0, 0, 0], 10.0)
    assert not buf.add(['box_1'], [p1], 10.0, 10.0)          # not this object
    assert buf.add(['box_0', 'box_1'], [p0, p1], 10.0, 10.0)
    assert buf.fresh_other('box_1', 10.5, 1.0) is p1
    assert buf.fresh_other('box_1', 11.5, 1.0) is None        # older than max_age
    assert buf.fresh_other('box_0', 10.5, 1.0) is None        # the task's own: .fresh()
    assert buf.fresh_other('box_9', 10.5, 1.0) is None


def test_stack_episode_sets_the_box_on_the_tracked_base(robot, gate):
    """stack with no task_goal on config/cells/gripper_stack.yaml: the base (box_1, placed
    0.18 m to the box's left) seen through ``other_pose`` (a perfect tracker) is the goal;
    the box ends on its top face."""
    world = EmulatedWorld(load_cell_spec(CELLS_DIR / 'gripper_stack.yaml'))
    names = list(world.joint_names)

    def pose(oid='box_0'):
        xyz, quat = world.object_poses()[oid]
        return pe.ObjectPose.from_xyz_quat(xyz, quat, world.time)
    start = pose()
    base_xy = start.xy + [0.0, 0.18]
    world.reset_objects(['box_1'], [(np.array([*base_xy, 0.02]), np.array([1.0, 0, 0, 0]))])
    world.step_for(0.3)
    task = get_task('stack', robot, {'object_size': (0.08, 0.06, 0.05)})
    ep = pe.make_episode(pe.LoadedPolicy(Path('s'), task, lambda obs: np.zeros(4), {}), gate,
                         [])
    ep.other_pose = lambda oid: pose(oid)
    for m in ep.start(world.joint_positions(), start):
        if m.grip:
            world.command_gripper(*m.grip)
            world.step_for(0.8)
        t = m.trajectory
        world.set_trajectory(JointTrajectoryCommand(names, t.times, t.positions,
                                                    t.velocities))
        world.step_for(t.duration + m.settle + 0.2)
    ep.jaw_position = world.gripper_state()[0]
    end, base = pose(), pose('box_1')
    print(f'stack on the gripper_stack cell: box {np.round(end.position, 3)}, base '
          f'{np.round(base.position, 3)}')
    np.testing.assert_allclose(ep.goal_xy, base_xy, atol=0.003)
    assert np.linalg.norm(end.xy - base.xy) < 0.01 and end.position[2] > 0.06
    assert ep.success(end)


def test_pick_episode_on_the_emulated_gripper_cell_places_the_box(robot, gate):
    world = EmulatedWorld(load_cell_spec(CELLS_DIR / 'gripper.yaml'))
    names = list(world.joint_names)

    def pose():
        xyz, quat = world.object_poses()['box_0']
        return pe.ObjectPose.from_xyz_quat(xyz, quat, world.time)
    start = pose()
    goal = start.xy + 0.18 * np.array([np.cos(1.57), np.sin(1.57)])
    ep = _episode(robot, gate, goal)
    for m in ep.start(world.joint_positions(), start):
        if m.grip:                       # the executor: the jaw goal to its outcome first
            world.command_gripper(*m.grip)
            world.step_for(0.8)
        gate.validate(m.trajectory, world.joint_positions(), m.label)
        t = m.trajectory
        world.set_trajectory(JointTrajectoryCommand(names, t.times, t.positions,
                                                    t.velocities))
        world.step_for(t.duration + m.settle + 0.2)
    ep.jaw_position = world.gripper_state()[0]
    end = pose()
    err = float(np.linalg.norm(end.xy - goal))
    print(f'pick on the gripper cell: box {np.round(start.xy, 3)} -> {np.round(end.xy, 3)}, '
          f'target error {err * 1e3:.1f} mm, up_z {end.up_z:.3f}, jaw {ep.jaw_position:.4f} m')
    assert err < 0.015 and end.up_z > 0.99
    assert ep.success(end)
    ep.jaw_position = 0.0                # a jaw left closed is no release
    assert not ep.success(end)


def test_the_loop_judges_a_late_pick_outcome_by_the_task_rule(robot):
    """The loop coordinator's late outcome (a tracked pose after the executor's window) on a
    grasping task: the episode ran to its end, so its last grip opened the jaw; the box's
    pose decides (inside the square and upright, or not)."""
    from real2sim2real_ros.core import loop_plan as lp
    task = get_task('pick_and_place', robot)
    up = [1.0, 0.0, 0.0, 0.0]
    assert lp.task_success_at(task, [0.50, 0.30, task.object_z], up, [0.52, 0.28])
    assert not lp.task_success_at(task, [0.50, 0.30, task.object_z], up, [0.57, 0.28])
    tipped = [np.cos(0.4), np.sin(0.4), 0.0, 0.0]
    assert not lp.task_success_at(task, [0.50, 0.30, task.object_z], tipped, [0.52, 0.28])
