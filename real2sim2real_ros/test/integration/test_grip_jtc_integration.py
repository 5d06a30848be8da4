"""The executor's gripper through a joint_trajectory_controller on the finger joint, over
the wire: the cell and the executor both with ``gripper_action_type:
follow_joint_trajectory`` (one params YAML, as a lab would set it), started from
cell_emulated.launch.xml. ``robot_executor/grip`` opens and closes the jaw through
``gripper_controller/follow_joint_trajectory`` at the goal's speed; a stop during a slow
close ends the goal STOPPED and the jaw never opens after it."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import yaml

pytestmark = pytest.mark.integration

from helpers.graph import start_graph  # noqa: E402

from real2sim2real_msgs.action import Grip  # noqa: E402
from real2sim2real_msgs.srv import GetStatus  # noqa: E402

Result = Grip.Result
JAW = 'left_finger_joint'


@pytest.fixture(scope='module')
def jtc_gripper_cell(share_dir, tmp_path_factory):
    from real2sim2real_ros.ros.commander import Commander
    tmp = tmp_path_factory.mktemp('grip_jtc')
    params = yaml.safe_load((share_dir / 'config' / 'params.yaml').read_text())
    for node in ('/**/emulated_cell', '/**/robot_executor'):
        params[node]['ros__parameters']['gripper_action_type'] = 'follow_joint_trajectory'
    (tmp / 'params.yaml').write_text(yaml.safe_dump(params))
    graph = start_graph('cell_emulated.launch.xml', {
        'cell_spec': str(share_dir / 'config' / 'cells' / 'gripper.yaml'),
        'params_file': str(tmp / 'params.yaml'), 'run_dir': str(tmp / 'runs')}, tmp)
    cmd = Commander(node_name='grip_jtc_test_commander')
    try:
        assert JAW in cmd.joint_state(timeout=60).name
        yield cmd
    finally:
        cmd.close()
        graph.stop(timeout=30)


def _grip(cmd, command, **kw):
    return cmd.run_action(Grip, 'robot_executor/grip', Grip.Goal(command=command, **kw),
                          timeout=60)


def _jaw(cmd) -> float:
    js = cmd.joint_state()
    return js.position[list(js.name).index(JAW)]


def test_grip_through_the_finger_jtc_opens_closes_and_stops_holding(jtc_gripper_cell):
    from rclpy.action import get_action_names_and_types

    from real2sim2real_ros.ros.commander import Commander
    cmd = jtc_gripper_cell
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        actions = dict(get_action_names_and_types(cmd.node))
        if '/gripper_controller/follow_joint_trajectory' in actions:
            break
        time.sleep(0.2)
    assert actions['/gripper_controller/follow_joint_trajectory'] == [
        'control_msgs/action/FollowJointTrajectory']
    assert '/gripper_controller/gripper_cmd' not in actions
    assert cmd.arm(wait=30).success
    r = _grip(cmd, 'open')
    assert r.error_code == Result.NONE and r.reached_goal, r.error_msg
    assert r.position == pytest.approx(0.04, abs=0.002)
    # A close at 5 mm/s (8 s), stopped once under way: STOPPED, the jaw holds there.
    out = {}
    with Commander(node_name='grip_jtc_stopper') as stopper:
        stopper.call(GetStatus, 'robot_executor/get_status')
        th = threading.Thread(target=lambda: out.update(r=_grip(cmd, 'close', max_speed=0.005)))
        th.start()
        deadline = time.monotonic() + 20.0
        while _jaw(stopper) > 0.035 and time.monotonic() < deadline:
            time.sleep(0.05)
        t_moving = time.monotonic()
        assert stopper.stop().success
        th.join(timeout=30)
    r = out['r']
    assert r.error_code == Result.STOPPED and 'holds' in r.error_msg, r.error_msg
    at_stop = _jaw(cmd)
    assert 0.005 < at_stop < 0.036, at_stop      # it was moving at the asked pace, not 0.2 m/s
    later = []
    for _ in range(10):
        time.sleep(0.1)
        later.append(_jaw(cmd))
    assert np.max(later) <= at_stop + 1e-3 and np.min(later) >= at_stop - 1e-3
    assert time.monotonic() - t_moving < 60
    assert cmd.arm(wait=30).success
    r = _grip(cmd, 'close', max_speed=0.1)
    assert r.error_code == Result.NONE and r.reached_goal and r.position < 0.002, \
        (r.error_msg, r.position)
