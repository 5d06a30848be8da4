"""The executor's gripper over the wire: ``robot_executor/grip`` on the emulated gripper cell
(config/cells/gripper_stack.yaml: gripper.yaml with a base box, its
``gripper_controller/gripper_cmd``), started from
cell_emulated.launch.xml. Refused unless armed and within the executor's limits; open and
close reach the jaw's limits; a stop during a close ends the goal STOPPED and the jaw never
opens after it; ``r2s2r grip`` prints the outcome; ``robot_executor/execute_policy`` runs a
pick_and_place checkpoint, the jaw driven through the same action between its motions, its
bag a demonstration the trainer replays; a stack checkpoint without a goal sets the box on
the base where the tracker sees it."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

pytestmark = pytest.mark.integration

from helpers.graph import start_graph  # noqa: E402

from real2sim2real_msgs.action import Grip  # noqa: E402
from real2sim2real_msgs.srv import GetStatus  # noqa: E402

Result = Grip.Result
JAW = 'left_finger_joint'


@pytest.fixture(scope='module')
def gripper_cell(share_dir, tmp_path_factory):
    from real2sim2real_ros.ros.commander import Commander
    tmp = tmp_path_factory.mktemp('grip')
    graph = start_graph('cell_emulated.launch.xml', {
        'cell_spec': str(share_dir / 'config' / 'cells' / 'gripper_stack.yaml'),
        'run_dir': str(tmp / 'runs')}, tmp)
    cmd = Commander(node_name='grip_test_commander')
    try:
        assert JAW in cmd.joint_state(timeout=60).name
        yield cmd, tmp
    finally:
        cmd.close()
        graph.stop(timeout=30)


def _grip(cmd, command, **kw):
    goal = Grip.Goal(command=command, **kw)
    return cmd.run_action(Grip, 'robot_executor/grip', goal, timeout=60)


def _jaw(cmd) -> float:
    js = cmd.joint_state()
    return js.position[list(js.name).index(JAW)]


def test_grip_is_refused_until_armed_and_within_limits(gripper_cell):
    cmd, _ = gripper_cell
    cmd.disarm()
    r = _grip(cmd, 'open')
    assert r.error_code == Result.NOT_ARMED, r.error_msg
    assert cmd.arm(wait=30).success
    for kw, field in (({'max_effort': 100.0}, 'max_effort'), ({'max_speed': 5.0}, 'max_speed')):
        r = _grip(cmd, 'close', **kw)
        assert r.error_code == Result.INVALID_GOAL and field in r.error_msg, r.error_msg
    r = _grip(cmd, 'position', position=0.3)
    assert r.error_code == Result.INVALID_GOAL and 'outside left_finger_joint' in r.error_msg
    r = _grip(cmd, 'squeeze')
    assert r.error_code == Result.INVALID_GOAL and 'command' in r.error_msg


def test_open_close_and_a_stop_that_never_opens_the_jaw(gripper_cell):
    from real2sim2real_ros.ros.commander import Commander
    cmd, tmp = gripper_cell
    assert cmd.arm(wait=30).success
    r = _grip(cmd, 'open', record=True)
    assert r.error_code == Result.NONE and r.reached_goal, r.error_msg
    assert r.position == pytest.approx(0.04, abs=0.01) and r.bag_path
    # A slow close (8 s at 5 mm/s), stopped once it is under way (the jaw 5 mm in; on a
    # loaded machine the goal can take a while to start): STOPPED, the jaw stays there.
    out = {}
    with Commander(node_name='grip_test_stopper') as stopper:
        stopper.call(GetStatus, 'robot_executor/get_status')   # discovered before the goal
        th = threading.Thread(target=lambda: out.update(r=_grip(cmd, 'close', max_speed=0.005)))
        th.start()
        deadline = time.monotonic() + 20.0
        while _jaw(stopper) > 0.035 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stopper.stop().success
        th.join(timeout=30)
    r = out['r']
    assert r.error_code == Result.STOPPED and 'holds' in r.error_msg, r.error_msg
    at_stop = _jaw(cmd)
    assert 0.005 < at_stop < 0.036
    later = []
    for _ in range(10):
        time.sleep(0.1)
        later.append(_jaw(cmd))
    assert np.max(later) <= at_stop + 1e-3          # never opens after the stop
    assert _grip(cmd, 'close').error_code == Result.NOT_ARMED    # the stop disarmed
    assert cmd.arm(wait=30).success
    r = _grip(cmd, 'close', max_effort=10.0)
    assert r.error_code == Result.NONE and r.position < 0.011, (r.error_msg, r.position)


def test_r2s2r_grip_prints_the_outcome(gripper_cell, capsys):
    from real2sim2real_ros.cli.main import main as r2s2r
    cmd, _ = gripper_cell
    assert cmd.arm(wait=30).success
    assert r2s2r(['grip', 'open', '--no-record']) == 0
    assert 'grip open: reached; jaw' in capsys.readouterr().out
    assert r2s2r(['grip', 'close', '--effort', '500']) == 1
    assert 'INVALID_GOAL: max_effort' in capsys.readouterr().out


def test_execute_policy_picks_and_places_the_box_through_the_jaw(gripper_cell):
    """A pick_and_place checkpoint (the scripted grasp expert; the cell's 8 x 6 x 5 cm box)
    through ``robot_executor/execute_policy``, poses from a perfect tracker (the cell's true
    poses relayed on /tracked_objects): the executor opens, closes (a stall on the box) and
    opens the jaw through gripper_controller/gripper_cmd between the motions, and the box
    rests upright in the 10 x 10 cm target square, released."""
    from helpers.truth_relay import BOX, TruthRelay

    from real2sim2real_msgs.action import ExecutePolicy
    from real2sim2real_ros.core.policy_execution import write_scripted_checkpoint
    cmd, tmp = gripper_cell
    assert cmd.reset_objects([BOX]).success
    relay = TruthRelay()
    try:
        relay.relaying = True
        xy0 = relay.pose(timeout=20.0)[0]
        goal = xy0 + np.array([0.0, 0.18])
        ckpt = write_scripted_checkpoint(tmp / 'pick', 'pick_and_place',
                                         {'object_size': [0.08, 0.06, 0.05]}, seed=0)
        assert cmd.arm(wait=30).success
        r = cmd.execute_policy(ckpt, list(goal), task='pick_and_place', max_duration=90,
                               timeout=180, record=True)
        time.sleep(0.5)
        xy1, _, _, up1, _ = relay.pose()
    finally:
        relay.close()
    err = float(np.linalg.norm(xy1 - goal))
    print(f'execute_policy pick_and_place: box {np.round(xy0, 3)} -> {np.round(xy1, 3)}, '
          f'target error {err * 1e3:.1f} mm, up_z {up1:.3f}, jaw {_jaw(cmd):.4f} m, '
          f'episode {r.duration:.1f} s, task_success {r.task_success}')
    assert r.error_code == ExecutePolicy.Result.NONE, r.error_msg
    assert np.max(np.abs(xy1 - goal)) < 0.05 and up1 > 0.95     # in the square, upright
    assert _jaw(cmd) > 0.035 and r.task_success
    _replay_the_recorded_pick(r.bag_path, goal)


def _replay_the_recorded_pick(bag_path, goal):
    """The episode's bag is a demonstration (core/policies/demo_bags.py): one PolicyStep, its
    start the tracked box and the goal, its action the expert's; replayed in a twin of the
    cell's box (the grasp recipe; a lab's twin from reconstruction has the same box) it
    places the box too, so the trainer would imitate it (record-demos -> BC -> PPO)."""
    from real2sim2real_ros.core.policies.demo_bags import read_demo_bags
    from real2sim2real_ros.core.policies.pipeline import replay_recorded_demos
    from real2sim2real_ros.core.robot_description import gripper_cell_urdf, load_robot
    from real2sim2real_ros.core.tasks import get_task
    from real2sim2real_ros.core.tasks.worlds import TaskObject, TwinWorld, task_scene_xml
    from real2sim2real_ros.core.twin import Twin
    assert bag_path, 'the episode was not recorded'
    task = get_task('pick_and_place', load_robot(gripper_cell_urdf()),
                    {'object_size': [0.08, 0.06, 0.05]})
    demos = read_demo_bags([bag_path], task)
    assert len(demos) == 1 and demos[0].actions.shape == (1, 4)
    np.testing.assert_allclose(demos[0].reset.goal_xy, goal, atol=1e-9)
    twin = Twin(task.robot, task_scene_xml(TaskObject('box_0', (0.08, 0.06, 0.05))))
    try:
        kept = replay_recorded_demos(task, TwinWorld(twin, 'box_0'), demos)
    finally:
        twin.close()
    assert (kept.episodes_tried, kept.episodes_kept) == (1, 1), kept.details


def test_execute_policy_stacks_the_box_on_the_tracked_base(gripper_cell):
    """A stack checkpoint (the scripted expert) with NO task_goal: the executor takes the
    base's centre from /tracked_objects (the checkpoint's base_id, box_1, placed 0.18 m to
    the box's left; poses relayed from the cell as a perfect tracker) and the box ends on
    the base's top face, released."""
    from geometry_msgs.msg import Point, Pose, Quaternion
    from helpers.truth_relay import BOX, TruthRelay

    from real2sim2real_msgs.action import ExecutePolicy
    from real2sim2real_msgs.srv import ResetObjects
    from real2sim2real_ros.core.policy_execution import write_scripted_checkpoint
    cmd, tmp = gripper_cell
    assert cmd.reset_objects([BOX]).success
    relay = TruthRelay()
    try:
        xy0 = relay.pose(timeout=20.0)[0]
        base = xy0 + np.array([0.0, 0.18])
        placed = cmd.call(ResetObjects, 'emulated_cell/reset_objects', ResetObjects.Request(
            object_ids=['box_1'], poses=[Pose(position=Point(x=float(base[0]),
                                                             y=float(base[1]), z=0.02),
                                              orientation=Quaternion(w=1.0))]), resend=True)
        assert placed.success, placed.message
        relay.relaying = True
        ckpt = write_scripted_checkpoint(tmp / 'stack', 'stack',
                                         {'object_size': [0.08, 0.06, 0.05]}, seed=0)
        assert cmd.arm(wait=30).success
        r = cmd.execute_policy(ckpt, [], task='stack', max_duration=90, timeout=180)
        time.sleep(0.5)
        xy1, z1, _, up1, _ = relay.pose()
        base1, _, _, _, _ = relay.pose('box_1')
    finally:
        relay.close()
    print(f'execute_policy stack: box {np.round(xy0, 3)} -> {np.round(xy1, 3)} z {z1:.3f}, '
          f'base at {np.round(base1, 3)}, episode {r.duration:.1f} s, task_success '
          f'{r.task_success}')
    assert r.error_code == ExecutePolicy.Result.NONE, r.error_msg
    assert np.linalg.norm(xy1 - base1) < 0.02 and abs(z1 - 0.065) < 0.01 and up1 > 0.95
    assert _jaw(cmd) > 0.035 and r.task_success
