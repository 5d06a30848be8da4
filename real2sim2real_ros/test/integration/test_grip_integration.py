"""The executor's gripper over the wire: ``robot_executor/grip`` on the emulated gripper cell
(config/cells/gripper.yaml, its ``gripper_controller/gripper_cmd``), started from
cell_emulated.launch.xml. Refused unless armed and within the executor's limits; open and
close reach the jaw's limits; a stop during a close ends the goal STOPPED and the jaw never
opens after it; ``r2s2r grip`` prints the outcome; ``robot_executor/execute_policy`` runs a
pick_and_place checkpoint, the jaw driven through the same action between its motions."""
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
        'cell_spec': str(share_dir / 'config' / 'cells' / 'gripper.yaml'),
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
                               timeout=180)
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

