"""The emulated cell's gripper over the wire: ``gripper_controller/gripper_cmd`` as
control_msgs ParallelGripperCommand (and GripperCommand where configured) on a cell whose
robot carries a gripper; the jaw in ``joint_states``; a goal outside the jaw's limits is
rejected with one log line naming the field, and the node keeps serving."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from real2sim2real_ros.ros.topic_listener import TopicListener

pytestmark = pytest.mark.integration

CELLS = Path(__file__).resolve().parents[2] / 'config' / 'cells'
JAW = 'left_finger_joint'


def _spec(tmp_path) -> Path:
    spec = yaml.safe_load((CELLS / 'default.yaml').read_text())
    spec['robot']['urdf'] = 'gripper'
    path = tmp_path / 'gripper_cell.yaml'
    path.write_text(yaml.safe_dump(spec))
    return path


def _goal(action, kind, position, effort=0.0):
    from sensor_msgs.msg import JointState
    goal = action.Goal()
    if kind == 'parallel_gripper_command':
        goal.command = JointState(name=[JAW], position=[position],
                                  effort=[effort] if effort else [])
    else:
        goal.command.position, goal.command.max_effort = position, effort
    return goal


def _stop(proc) -> str:
    """SIGINT the cell (kill it after 20 s); its stderr."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=20)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[1]


def _position(kind, result) -> float:
    return result.state.position[0] if kind == 'parallel_gripper_command' else result.position


@pytest.mark.parametrize('kind', ['parallel_gripper_command', 'gripper_command'])
def test_gripper_action_opens_closes_and_rejects_out_of_range(tmp_path, kind):
    from control_msgs.action import GripperCommand, ParallelGripperCommand
    from sensor_msgs.msg import JointState

    from real2sim2real_ros.ros.commander import Commander, CommanderError
    action = ParallelGripperCommand if kind == 'parallel_gripper_command' else GripperCommand
    proc = subprocess.Popen(
        [sys.executable, '-m', 'real2sim2real_ros.nodes.emulated_cell_node', '--ros-args',
         '-p', f'cell_spec:={_spec(tmp_path)}', '-p', 'real_time:=false',
         '-p', 'enable_cameras:=false', '-p', f'gripper_action_type:={kind}'],
        env=dict(os.environ), cwd=tmp_path, text=True, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE)
    joints = TopicListener(JointState, 'joint_states')
    cmd = Commander(node_name='gripper_test')
    try:
        opened = cmd.run_action(action, 'gripper_controller/gripper_cmd',
                                _goal(action, kind, 0.04), timeout=60)
        assert opened.reached_goal and not opened.stalled
        assert _position(kind, opened) == pytest.approx(0.04, abs=0.01)   # goal_tolerance
        # The goal succeeds within goal_tolerance (0.01 m); the jaw goes on to the target.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            last = joints.snapshot()[-1][1] if joints.snapshot() else None
            if last is not None and last.position[-1] > 0.039:
                break
            time.sleep(0.1)
        assert last.name[-1] == JAW and len(last.name) == 7 == len(last.effort)
        assert last.position[-1] == pytest.approx(0.04, abs=0.001)
        with pytest.raises(CommanderError, match='rejected'):
            cmd.run_action(action, 'gripper_controller/gripper_cmd', _goal(action, kind, 0.2),
                           timeout=30)
        closed = cmd.run_action(action, 'gripper_controller/gripper_cmd',
                                _goal(action, kind, 0.0, effort=5.0), timeout=60)
        assert closed.reached_goal and _position(kind, closed) < 0.01
        assert proc.poll() is None
    finally:
        cmd.close()
        joints.close()
        err = _stop(proc)
    rejected = [ln for ln in err.splitlines() if 'goal rejected' in ln]
    field = 'command.position[0]' if kind == 'parallel_gripper_command' else 'command.position'
    assert len(rejected) == 1 and field in rejected[0] and 'outside' in rejected[0], err


def _latest_jaw(joints, ok, timeout: float = 30.0):
    """The latest joint state once its jaw position satisfies ``ok`` (or at ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        snap = joints.snapshot()
        last = snap[-1][1] if snap else None
        if (last is not None and ok(last.position[-1])) or time.monotonic() > deadline:
            assert last is not None, 'no joint_states within the timeout'
            return last
        time.sleep(0.05)


def _finger_goal(position, seconds, joint=JAW, goal_bound=0.0):
    from builtin_interfaces.msg import Duration
    from control_msgs.action import FollowJointTrajectory
    from control_msgs.msg import JointTolerance
    from trajectory_msgs.msg import JointTrajectoryPoint
    goal = FollowJointTrajectory.Goal()
    goal.trajectory.joint_names = [joint]
    goal.trajectory.points = [JointTrajectoryPoint(
        positions=[position], time_from_start=Duration(sec=int(seconds),
                                                       nanosec=int(seconds % 1 * 1e9)))]
    if goal_bound:
        goal.goal_tolerance = [JointTolerance(name=joint, position=goal_bound)]
    return goal


def test_the_finger_under_a_jtc_follows_its_trajectory_and_rejects_other_joints(tmp_path):
    """gripper_action_type follow_joint_trajectory: ``gripper_controller/
    follow_joint_trajectory`` drives the finger joint at the trajectory's pace (JTC's
    error_code and bounds); a goal naming an arm joint is rejected with one log line naming
    the joint; a goal bound the jaw cannot meet in time ends GOAL_TOLERANCE_VIOLATED."""
    from control_msgs.action import FollowJointTrajectory
    from sensor_msgs.msg import JointState

    from real2sim2real_ros.ros.commander import Commander, CommanderError
    name = 'gripper_controller/follow_joint_trajectory'
    proc = subprocess.Popen(
        [sys.executable, '-m', 'real2sim2real_ros.nodes.emulated_cell_node', '--ros-args',
         '-p', f'cell_spec:={_spec(tmp_path)}', '-p', 'real_time:=true',
         '-p', 'enable_cameras:=false', '-p', 'gripper_action_type:=follow_joint_trajectory',
         '-p', 'gripper.constraints.goal_time:=0.2'],
        env=dict(os.environ), cwd=tmp_path, text=True, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE)
    joints = TopicListener(JointState, 'joint_states')
    cmd = Commander(node_name='finger_jtc_test')
    try:
        start = time.monotonic()
        opened = cmd.run_action(FollowJointTrajectory, name, _finger_goal(0.04, 1.0),
                                timeout=60)
        assert opened.error_code == 0, opened.error_string
        # The listener's discovery is its own: wait for a joint state (the jaw settles at the
        # target; the goal succeeded once stopped within the default, unchecked, goal bound).
        last = _latest_jaw(joints, lambda x: abs(x - 0.04) < 0.002)
        assert last.name[-1] == JAW and last.position[-1] == pytest.approx(0.04, abs=0.002)
        # 4 cm shut over 2 s: the jaw's speed follows the trajectory (the cell in real time:
        # about 40 feedback messages at the 20 Hz monitor rate).
        seen = []
        closed = cmd.run_action(FollowJointTrajectory, name, _finger_goal(0.0, 2.0),
                                feedback=lambda fb: seen.append(
                                    (fb.actual.positions[0], fb.desired.positions[0])),
                                timeout=60)
        assert closed.error_code == 0, closed.error_string
        assert _latest_jaw(joints, lambda x: x < 0.002).position[-1] < 0.002
        mid = [a for a, d in seen if 0.01 < d < 0.03]
        assert mid and max(abs(a - d) for a, d in seen if 0.01 < d < 0.03) < 0.005, seen
        with pytest.raises(CommanderError, match='rejected'):
            cmd.run_action(FollowJointTrajectory, name,
                           _finger_goal(0.02, 1.0, joint='shoulder_pan_joint'), timeout=30)
        # Open 4 cm in 0.05 s with a 1 mm goal bound: the jaw (0.2 m/s at most) cannot.
        late = cmd.run_action(FollowJointTrajectory, name, _finger_goal(0.04, 0.05,
                                                                        goal_bound=0.001),
                              timeout=60)
        assert late.error_code == FollowJointTrajectory.Result.GOAL_TOLERANCE_VIOLATED, \
            late.error_string
        assert proc.poll() is None and time.monotonic() - start < 120
    finally:
        cmd.close()
        joints.close()
        err = _stop(proc)
    rejected = [ln for ln in err.splitlines() if 'goal rejected' in ln]
    assert len(rejected) == 1 and 'INVALID_JOINTS' in rejected[0], err
    assert "['shoulder_pan_joint'] are not controller joints" in rejected[0], rejected
    assert "controller joints: ['left_finger_joint']" in rejected[0], rejected
    assert "position error +0.0" in err and "m outside the tolerance 0.0010 m" in err
