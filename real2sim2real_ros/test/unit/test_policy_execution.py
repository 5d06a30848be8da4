"""Policy execution core (no ROS): checkpoints -> tasks, plans that pass the executor's safety
checks, refusals (bad checkpoint, bad goal, tool out of the workspace, too fast), and whole
episodes on an in-process emulated cell (the ROS-free stand-in of the executor's loop)."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from real2sim2real_ros.core import execution_safety as es
from real2sim2real_ros.core import policy_execution as pe
from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
from real2sim2real_ros.core.emulated_world import EmulatedWorld
from real2sim2real_ros.core.geometry import yaw_quat
from real2sim2real_ros.core.joint_trajectory import JointTrajectoryCommand
from real2sim2real_ros.core.policies import MLPPolicy, save_checkpoint
from real2sim2real_ros.core.tasks import get_task
from real2sim2real_ros.core.tasks.base import ResetSample
from real2sim2real_ros.core.tasks.kinematics import READY_POSE

torch.set_num_threads(1)
# The bringup's executor workspace (config/params.yaml).
WORKSPACE = es.Workspace(np.array([-0.3, -0.9, 0.0]), np.array([1.1, 0.9, 1.3]))
BOX_Z = 0.025
G = 9.81


@pytest.fixture(scope='module')
def limits(robot):
    return es.JointLimits.from_robot(robot)


@pytest.fixture(scope='module')
def gate(robot, limits):
    # As the executor builds it: the FK Lipschitz bound certifies the tip between samples.
    return pe.SafetyGate(limits, robot.fk, WORKSPACE, fk_lipschitz=es.fk_lipschitz_bound(robot))


def test_the_gate_checks_the_cubic_between_the_points(gate, limits):
    """A motion whose points and chords are all inside the limits, but whose cubic runs the
    elbow past its upper limit (pi) after the point at t = 2 s: refused, nothing sent."""
    q0 = np.array(READY_POSE, float)
    q1 = q0.copy()
    q1[2] = 3.0
    v1 = np.zeros(6)
    v1[2] = 1.5
    traj = es.Trajectory(limits.names, np.array([2.0, 3.0]), np.vstack([q1, q1]),
                         np.vstack([v1, np.zeros(6)]))
    assert np.all(traj.positions <= limits.upper) and np.all(np.abs(v1) <= limits.velocity)
    with pytest.raises(pe.ExecutionError) as info:
        gate.validate(traj, q0, 'strike')
    assert info.value.kind == pe.LIMIT_VIOLATION
    assert "'elbow_joint'" in info.value.message and 'cubic' in info.value.message
    assert '3.2222 rad' in info.value.message and 't = 2.333 s' in info.value.message
    # The same points without velocities (linear) pass.
    ok = gate.validate(es.Trajectory(limits.names, traj.times, traj.positions), q0, 'strike')
    assert ok.workspace_bound == 0.001


@pytest.fixture(scope='module')
def slide(robot):
    return get_task('slide_to_target', robot)


@pytest.fixture(scope='module')
def push(robot):
    return get_task('push_to_pose', robot)


def pose(x, y, yaw=0.0, z=BOX_Z, stamp=0.0):
    return pe.ObjectPose.from_xyz_quat([x, y, z], yaw_quat(yaw), stamp)


def demo_speed(friction):
    """The slide demonstrator's rule with a given friction: v = sqrt(2 mu g (d - push))."""
    def policy(obs):
        return np.array([np.sqrt(2 * friction * G * max(obs[0] - 0.02, 0.01)), 0.0])
    return policy


def loaded(task, policy, name='scripted'):
    return pe.LoadedPolicy(Path(name), task, policy, {})


def checkpoint(tmp_path, task, hidden=(8,), name='ckpt'):
    pol = MLPPolicy(task.observation_dim, task.action_low, task.action_high, hidden)
    return save_checkpoint(pol, tmp_path / name, task.config(), {'note': 'test'})


# ------------------------------------------------------------------------ checkpoints
def test_checkpoint_loads_with_its_task(tmp_path, robot, slide, push):
    lp = pe.load_policy(checkpoint(tmp_path, slide), robot)
    assert lp.task_name == 'slide_to_target'
    assert json.loads(json.dumps(lp.task.config())) == json.loads(json.dumps(slide.config()))
    a = lp.policy(np.array([0.12, 0.1, 0.0]))
    assert a.shape == (2,) and np.all(a >= slide.action_low) and np.all(a <= slide.action_high)
    lp = pe.load_policy(checkpoint(tmp_path, push, name='push'), robot, 'push_to_pose')
    assert lp.task_name == 'push_to_pose'
    # The task config travels with the checkpoint (JSON lists back into the dataclass).
    task = get_task('slide_to_target', robot, {'success_radius': 0.07, 'start_xy': (0.5, 0.0)})
    lp = pe.load_policy(checkpoint(tmp_path, task, name='custom'), robot)
    assert lp.task.cfg.success_radius == 0.07 and list(lp.task.cfg.start_xy) == [0.5, 0.0]


def _expect(kind, fn, *names):
    with pytest.raises(pe.ExecutionError) as info:
        fn()
    assert info.value.kind == kind, info.value.message
    for n in names:
        assert str(n) in info.value.message, info.value.message
    return info.value.message


def test_bad_checkpoints_raise_a_clear_error_naming_the_file(tmp_path, robot, slide, push):
    load = pe.load_policy
    bad = pe.INVALID_CHECKPOINT
    _expect(bad, lambda: load('', robot), 'no checkpoint_path')
    _expect(bad, lambda: load(tmp_path / 'nope', robot), tmp_path / 'nope', 'not a directory')
    empty = tmp_path / 'empty'
    empty.mkdir()
    _expect(bad, lambda: load(empty, robot), empty, 'policy.json is missing')
    ck = checkpoint(tmp_path, slide, name='broken_json')
    (ck / 'policy.json').write_text('{not json')
    _expect(bad, lambda: load(ck, robot), ck / 'policy.json', 'not valid JSON')
    ck = checkpoint(tmp_path, slide, name='broken_weights')
    (ck / 'policy.pt').write_bytes(b'garbage')
    _expect(bad, lambda: load(ck, robot), ck)
    ck = checkpoint(tmp_path, slide, name='no_task')
    cfg = json.loads((ck / 'policy.json').read_text())
    cfg['task'] = {}
    (ck / 'policy.json').write_text(json.dumps(cfg))
    _expect(bad, lambda: load(ck, robot), ck / 'policy.json', 'names no task')
    cfg['task'] = {'task': 'stack_blocks'}
    (ck / 'policy.json').write_text(json.dumps(cfg))
    _expect(bad, lambda: load(ck, robot), ck / 'policy.json', 'stack_blocks')
    cfg['task'] = {'task': 'slide_to_target', 'speed_range': [1.0, 0.5]}
    (ck / 'policy.json').write_text(json.dumps(cfg))
    _expect(bad, lambda: load(ck, robot), ck / 'policy.json', 'speed_range')
    # A push_to_pose network (12 inputs) filed as a slide_to_target policy.
    ck = checkpoint(tmp_path, push, name='wrong_dims')
    cfg = json.loads((ck / 'policy.json').read_text())
    cfg['task'] = slide.config()
    (ck / 'policy.json').write_text(json.dumps(cfg))
    _expect(bad, lambda: load(ck, robot), ck, f'{push.observation_dim} observations')
    # Task mismatch: the goal asks for another task than the checkpoint was trained for.
    ck = checkpoint(tmp_path, slide, name='slide')
    _expect(bad, lambda: load(ck, robot, 'push_to_pose'), ck, 'task mismatch',
            'slide_to_target', 'push_to_pose')


def test_unusable_actions_and_goals_are_refused(robot, slide, push, gate):
    ep = pe.make_episode(loaded(slide, lambda obs: np.array([np.nan, 0.0])), gate, [0.65, 0.1])
    _expect(pe.INVALID_CHECKPOINT, lambda: ep.start(READY_POSE, pose(0.55, 0.1)), 'action')
    for task in (slide, push):
        lp = loaded(task, lambda obs: np.zeros(2))
        for goal, kind, text in (([0.5], pe.INVALID_GOAL, 'x y'),
                                 ([0.5, np.inf], pe.INVALID_GOAL, 'x y'),
                                 ([1.5, 0.0], pe.WORKSPACE_VIOLATION, 'outside the workspace')):
            _expect(kind, lambda g=goal, p=lp: pe.make_episode(p, gate, g), text)
    # push_to_pose keeps the box inside the task's own pushing area too.
    _expect(pe.WORKSPACE_VIOLATION,
            lambda: pe.make_episode(loaded(push, lambda o: np.zeros(2)), gate, [0.95, 0.0]),
            'pushing area')


# ------------------------------------------------------------------------ slide plans
@pytest.mark.parametrize('box,yaw,goal,q0', [
    ((0.55, 0.12), 0.35, (0.65, 0.13), READY_POSE),           # the default cell's box
    ((0.48, 0.10), 0.0, (0.62, 0.05), READY_POSE),            # the task's nominal start
    ((0.60, -0.05), -0.4, (0.70, -0.15), READY_POSE),
    ((0.50, 0.20), 1.2, (0.50, 0.32), READY_POSE),            # striking along +y
    # The tool low on the table (after a strike): it lifts first.
    ((0.55, 0.12), 0.35, (0.45, 0.10), 'low'),
    # Low and not tool-down (a wrist left turned): the lift blends the tilt out instead of
    # jumping to the tool-down IK solution in its first segment (the spline the controller
    # follows then reached 3.4 rad/s on wrist_1 in 28 ms, over its 3.2 rad/s limit).
    ((0.55, 0.12), 0.35, (0.45, 0.10), 'tilted'),
])
def test_slide_plans_validate_and_keep_clear_of_the_box(slide, gate, limits, box, yaw, goal, q0):
    q0_kind = q0 if isinstance(q0, str) else ''
    if isinstance(q0, str):
        q0 = slide.ik.solve([0.70, 0.0, 0.012], np.array(READY_POSE))
        if q0_kind == 'tilted':
            q0 = q0 + np.array([0.0, 0.0, 0.0, 0.25, -0.15, 0.1])
    ep = pe.make_episode(loaded(slide, demo_speed(0.4)), gate, goal)
    obs_pose = pose(*box, yaw)
    approach, strike, retreat = ep.start(np.asarray(q0), obs_pose)
    assert ep.steps == 1 and ep.actions[0][0] > 0.5
    # All validated: joint limits, velocity limits, workspace.
    assert approach.validated is not None and strike.validated is not None
    assert approach.validated.workspace_samples > 10 and strike.validated.workspace_samples > 10
    # The retreat starts where the strike ends and lifts the tool straight up to the
    # approach height: out of the box's way.
    assert retreat.validated is not None and retreat.settle == 0.0
    np.testing.assert_allclose(retreat.trajectory.positions[0], strike.trajectory.positions[-1],
                               atol=1e-6)
    tips = np.array([slide.ik.tip_position(q) for q in retreat.trajectory.positions])
    tip0 = slide.ik.tip_position(strike.trajectory.positions[-1])
    assert np.abs(tips[:, :2] - tip0[:2]).max() < 1e-3
    assert tips[-1, 2] == pytest.approx(slide.cfg.table_height + ep.settings.approach_height,
                                        abs=1e-3)
    assert np.all(np.diff(tips[:, 2]) > -1e-4)
    # The approach ends exactly where the task's plan starts, and the strike starts there.
    np.testing.assert_allclose(approach.trajectory.positions[-1], ep.plan['q_start'])
    np.testing.assert_allclose(strike.trajectory.positions[0], ep.plan['q_start'])
    np.testing.assert_allclose(approach.trajectory.velocities[-1], 0.0)
    assert strike.settle == pytest.approx(slide.cfg.settle_time)
    # Well inside the velocity limits on the approach.
    vmax = np.abs(approach.trajectory.velocities).max(axis=0)
    assert np.all(vmax <= 0.3 * limits.velocity + 1e-6)
    # The tool never touches the box before the strike: wherever it is lower than the box
    # top + 2 cm, its axis stays more than the tool radius (+5 mm) from the box's outline.
    tips = np.array([slide.ik.tip_position(q) for q in approach.trajectory.positions])
    low = tips[:, 2] < 2 * BOX_Z + 0.02
    c, s = np.cos(yaw), np.sin(yaw)
    rel = (tips[low, :2] - box) @ np.array([[c, -s], [s, c]])   # in the box frame
    outside = np.maximum(np.abs(rel) - 0.5 * np.array(slide.cfg.object_size[:2]), 0.0)
    assert np.all(np.linalg.norm(outside, axis=1) > slide.cfg.tool_radius + 0.005)
    assert tips[:, 2].min() > slide.cfg.strike_height - 1e-3   # never below the strike height
    # Through the task's own approach pose above q_start.
    assert np.min(np.abs(approach.trajectory.positions - ep.plan['q_above']).max(axis=1)) < 1e-6
    # The same plan the task itself would run (one observation -> one action -> plan()).
    reset = ResetSample(np.array(box), yaw, np.array(goal))
    ref = slide.plan(reset, ep.actions[0])
    np.testing.assert_allclose(strike.trajectory.positions[1:], ref['positions'])


def test_an_observation_that_would_put_the_tool_outside_the_workspace_is_refused(
        robot, slide, limits):
    small = pe.SafetyGate(limits, robot.fk,
                          es.Workspace(np.array([-0.3, -0.9, 0.0]), np.array([0.6, 0.9, 1.3])))
    ep = pe.make_episode(loaded(slide, demo_speed(0.4)), small, [0.45, 0.12])
    # Striking towards -x from a box at x = 0.55 starts the tool at x ~ 0.66 > 0.6.
    msg = _expect(pe.WORKSPACE_VIOLATION, lambda: ep.start(READY_POSE, pose(0.55, 0.12)),
                  'approach', 'out on x')
    assert 'tip' in msg
    # A box beyond the arm's reach: the tool-down IK cannot put the tool behind it.
    wide = pe.SafetyGate(limits, robot.fk,
                         es.Workspace(np.array([-3.0, -3.0, -0.5]), np.array([3.0, 3.0, 2.0])))
    ep = pe.make_episode(loaded(slide, demo_speed(0.4)), wide, [1.75, 0.0])
    _expect(pe.WORKSPACE_VIOLATION, lambda: ep.start(READY_POSE, pose(1.6, 0.0)),
            'cannot get there')
    # A box seen under the table: the strike would drive the tool into it (z < 0).
    gate = pe.SafetyGate(limits, robot.fk, WORKSPACE)
    ep = pe.make_episode(loaded(slide, demo_speed(0.4)), gate, [0.65, 0.12])
    sunk = get_task('slide_to_target', robot, {'table_height': -0.03})
    ep.task = sunk
    _expect(pe.WORKSPACE_VIOLATION, lambda: ep.start(READY_POSE, pose(0.55, 0.12, z=-0.005)),
            'out on z')


def test_a_strike_faster_than_the_joints_allow_is_refused(slide, gate, robot):
    """1.8 m/s needs ~5 rad/s on the elbow; the URDF allows 3.15. A planner that does not
    slow its strike (velocity_margin 2: it scales only past 2 x the limits) is refused; the
    task's own planner slows it to 0.98 x the limits and the executor accepts it."""
    unscaled = get_task('slide_to_target', robot, {'velocity_margin': 2.0})
    ep = pe.make_episode(loaded(unscaled, lambda obs: np.array([1.8, 0.0])), gate,
                         [0.69, 0.15])
    _expect(pe.LIMIT_VIOLATION, lambda: ep.start(READY_POSE, pose(0.55, 0.12, 0.35)),
            'strike', 'elbow_joint', 'rad/s')
    ep = pe.make_episode(loaded(slide, lambda obs: np.array([1.8, 0.0])), gate, [0.69, 0.15])
    motions = ep.start(READY_POSE, pose(0.55, 0.12, 0.35))
    assert [m.label for m in motions] == ['approach', 'strike', 'retreat']
    assert ep.plan['time_scale'] > 1


def test_pose_buffer_freshness():
    buf = pe.PoseBuffer('box_0')
    assert 'no message' in buf.describe_missing('/tracked_objects', 1.0)
    assert not buf.add(['cyl'], [pose(0.6, 0, stamp=1.0)], 1.0, 1.0)
    assert "ids seen: ['cyl']" in buf.describe_missing('/tracked_objects', 1.0)
    assert buf.add(['cyl', 'box_0'], [None, pose(0.5, 0, stamp=2.0)], 2.0, 2.05)
    assert buf.fresh(2.5, 1.0) is not None
    assert buf.fresh(3.5, 1.0) is None
    assert buf.fresh(2.5, 1.0, after=2.1) is None
    with pytest.raises(pe.ExecutionError):
        pe.ObjectPose.from_xyz_quat([0, 0, np.nan], [1, 0, 0, 0])


# ------------------------------------------------------------------------ whole episodes
class CellLoop:
    """What the executor does, without ROS: send each validated motion to an in-process
    emulated cell, observe the TRUE object pose (a perfect tracker), step the closed loop."""

    def __init__(self):
        self.world = EmulatedWorld(load_cell_spec(default_cell_spec_path()))
        self.names = list(self.world.joint_names)

    def q(self):
        return self.world.joint_positions()

    def pose(self, object_id='box_0'):
        xyz, quat = self.world.object_poses()[object_id]
        return pe.ObjectPose.from_xyz_quat(xyz, quat, self.world.time)

    def send(self, gate, motion, run_for):
        gate.validate(motion.trajectory, self.q(), motion.label)   # as the executor does
        t = motion.trajectory
        self.world.set_trajectory(JointTrajectoryCommand(self.names, t.times, t.positions,
                                                         t.velocities))
        self.world.step_for(run_for)


def test_slide_episode_on_the_emulated_cell_moves_the_box_to_the_goal(slide, gate):
    cell = CellLoop()
    start = cell.pose()
    goal = start.xy + 0.11 * np.array([np.cos(0.1), np.sin(0.1)])
    # The cell's box has friction 0.55, but the servo launches it ~30% faster than the
    # commanded speed (the twin reproduces that; this analytic rule does not): aim softer.
    ep = pe.make_episode(loaded(slide, demo_speed(0.35)), gate, goal)
    approach, strike, retreat = ep.start(cell.q(), start)
    cell.send(gate, approach, approach.duration + 0.5)
    # The approach does not touch the box.
    assert np.linalg.norm(cell.pose().xy - start.xy) < 1e-3
    np.testing.assert_allclose(cell.q(), ep.plan['q_start'], atol=0.02)
    cell.send(gate, strike, strike.duration + strike.settle)
    slid = cell.pose()
    cell.send(gate, retreat, retreat.duration + 0.3)
    end = cell.pose()
    assert np.linalg.norm(end.xy - slid.xy) < 1e-3, 'the retreat does not touch the box'
    before, after = np.linalg.norm(goal - start.xy), np.linalg.norm(goal - end.xy)
    print(f'slide on the cell: box moved {np.linalg.norm(end.xy - start.xy) * 1e3:.1f} mm, '
          f'goal error {before * 1e3:.1f} -> {after * 1e3:.1f} mm, success {ep.success(end)}')
    assert after < 0.5 * before
    assert ep.success(end) == (after <= slide.cfg.success_radius and end.up_z > 0.95)


def test_push_episode_closes_the_loop_on_the_emulated_cell(push, gate):
    """The task's scripted pushing controller as the policy: approach behind the box, then
    one validated one-point segment per control period until the task says success."""
    cell = CellLoop()
    start = cell.pose()
    goal = start.xy + np.array([0.06, 0.03])
    rng = np.random.default_rng(0)
    reset = ResetSample(start.xy, start.yaw, goal, start.yaw)
    ep = pe.make_episode(loaded(push, push.scripted_demo_policy(reset, rng)), gate, goal)
    assert not ep.one_shot and ep.period == pytest.approx(0.1)
    (approach,) = ep.start(cell.q(), start)
    cell.send(gate, approach, approach.duration + 0.3)
    while (m := ep.step(cell.pose())) is not None:
        assert len(m.trajectory.times) == 1 and m.trajectory.times[0] == pytest.approx(0.1)
        cell.send(gate, m, ep.period)
    end = cell.pose()
    print(f'push on the cell: {ep.steps} steps ({ep.done_reason}), goal error '
          f'{np.linalg.norm(goal - start.xy) * 1e3:.1f} -> '
          f'{np.linalg.norm(goal - end.xy) * 1e3:.1f} mm')
    assert np.linalg.norm(goal - end.xy) < 0.5 * np.linalg.norm(goal - start.xy)
    assert ep.done_reason == 'success' and ep.success(end)
    assert 3 <= ep.steps <= push.cfg.max_steps


@pytest.mark.parametrize('cell', ['default', 'panda'])
def test_after_a_slide_the_object_can_be_put_back(cell):
    """The strike ends with the tool where the box started (a push of a few cm from behind
    it), which is where the emulated cell's reset (and an operator) puts the box back. The
    retreat lifts the tool clear first: the reset box rests at its spec pose. Left low (the
    episode without its retreat), the Panda's tool launched the reset box 25-124 mm away
    (``make demo CELL=panda``: trials 3-10 refused for a box at (0.26, 0.02)); the default
    arm's thin pusher nudged it 3 mm."""
    from real2sim2real_ros.core.robot_description import default_cell_urdf, load_robot
    from real2sim2real_ros.core.tools import resolve_robot_urdf
    spec = load_cell_spec(default_cell_spec_path().replace('default.yaml', f'{cell}.yaml'))
    robot = load_robot(default_cell_urdf() if cell == 'default' else
                       resolve_robot_urdf('example-robot-data:panda+pusher'))
    task = get_task('slide_to_target', robot)
    gate = pe.SafetyGate(es.JointLimits.from_robot(robot), robot.fk, WORKSPACE,
                         fk_lipschitz=es.fk_lipschitz_bound(robot))
    home = np.array(spec.object('box_0').xyz[:2])
    off = {}
    for retreat in (True, False):
        world = EmulatedWorld(spec)
        world.reset()
        world.step_for(0.3)
        xyz, quat = world.object_poses()['box_0']
        ep = pe.make_episode(loaded(task, demo_speed(0.35)), gate, [0.647, 0.143])
        motions = ep.start(world.joint_positions(), pe.ObjectPose.from_xyz_quat(xyz, quat, 0.0))
        assert [m.label for m in motions] == ['approach', 'strike', 'retreat']
        for m in motions if retreat else motions[:2]:
            gate.validate(m.trajectory, world.joint_positions(), m.label)
            t = m.trajectory
            world.set_trajectory(JointTrajectoryCommand(list(world.joint_names), t.times,
                                                        t.positions, t.velocities))
            world.step_for(t.duration + m.settle + 0.3)
        world.reset_objects()
        world.step_for(1.0)
        off[retreat] = float(np.linalg.norm(world.object_poses()['box_0'][0][:2] - home))
    print(f'{cell}: reset box off its pose by {1e3 * off[True]:.1f} mm after the retreat, '
          f'{1e3 * off[False]:.1f} mm with the tool left low')
    assert off[True] < 5e-4
    assert off[False] > (0.02 if cell == 'panda' else 0.002)
