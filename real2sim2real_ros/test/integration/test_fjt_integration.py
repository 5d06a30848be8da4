"""The lab path over the wire: the emulated cell serves
``joint_trajectory_controller/follow_joint_trajectory`` (control_msgs: the real package or
the stand-in) and the robot executor runs with ``backend: follow_joint_trajectory``.

The cell and the executor come from cell_emulated.launch.xml (``executor_backend:=
follow_joint_trajectory``), started as two supervised groups so one test can kill the cell
mid-goal while the executor lives on. Same checks as the topic backend's
(test_cell_integration.py): tracking, limits refused before anything is sent, e-stop timing;
plus the controller's own semantics and faults (reject, abort, the controller going away).
"""
from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from real2sim2real_ros.ros.topic_listener import TopicListener

pytestmark = pytest.mark.integration

from control_msgs.action import FollowJointTrajectory  # noqa: E402
from helpers.cell_params import set_cell as _set_cell  # noqa: E402
from helpers.estop import stop_figures  # noqa: E402
from helpers.graph import arm_or_fail as _arm  # noqa: E402
from helpers.graph import joint_positions as _q  # noqa: E402
from helpers.graph import two_point_goal as _points  # noqa: E402

from real2sim2real_msgs.action import ExecuteTrajectory  # noqa: E402
from real2sim2real_ros.nodes.cell_messages import seconds  # noqa: E402

TrajResult = ExecuteTrajectory.Result
FjtResult = FollowJointTrajectory.Result
CTRL = 'joint_trajectory_controller'
ACTION = f'{CTRL}/follow_joint_trajectory'


@pytest.fixture(scope='module')
def cell(share_dir, tmp_path_factory):
    """(cell graph, executor graph, commander, joint names)."""
    from helpers.graph import launch_file

    from real2sim2real_ros.launch_runner import LaunchedGraph
    from real2sim2real_ros.launch_runner.parser import parse_launch_file
    from real2sim2real_ros.launch_runner.plan import LaunchPlan
    from real2sim2real_ros.ros.commander import Commander
    tmp = tmp_path_factory.mktemp('fjt')
    plan = parse_launch_file(launch_file('cell_emulated.launch.xml'), {
        'executor_backend': 'follow_joint_trajectory', 'run_dir': str(tmp / 'runs')})
    env = dict(os.environ, R2S2R_RUN_DIR=str(tmp / 'runs'))
    graphs = [LaunchedGraph(LaunchPlan(plan.file, plan.launch_arguments, [n]), env=env,
                            log_dir=tmp / f'logs_{n.name}') for n in plan.nodes]
    by_name = dict(zip((n.name for n in plan.nodes), graphs))
    for g in graphs:
        g.start()
    cmd = Commander(node_name='fjt_test_commander')
    try:
        joints = list(cmd.joint_state(timeout=60).name)
        resp = cmd.arm(wait=30)
        assert resp.success, resp.message
        yield by_name['emulated_cell'], by_name['robot_executor'], cmd, joints
    finally:
        cmd.close()
        for g in graphs:
            g.stop(timeout=30)


def _fjt_goal(joints, points, stamp=None):
    from builtin_interfaces.msg import Duration
    from trajectory_msgs.msg import JointTrajectoryPoint
    goal = FollowJointTrajectory.Goal()
    goal.trajectory.joint_names = list(joints)
    if stamp is not None:
        goal.trajectory.header.stamp.sec = int(stamp)
        goal.trajectory.header.stamp.nanosec = int((stamp % 1) * 1e9)
    for t, q in points:
        goal.trajectory.points.append(JointTrajectoryPoint(
            positions=[float(x) for x in q],
            time_from_start=Duration(sec=int(t), nanosec=int((t % 1) * 1e9))))
    return goal


class _Status:
    """The action's status topic: which goals the controller got, and when."""

    def __init__(self):
        from action_msgs.msg import GoalStatusArray

        from real2sim2real_ros.ros import qos
        self.listener = TopicListener(GoalStatusArray, f'/{ACTION}/_action/status',
                                      qos=qos.ACTION_STATUS)

    def goals(self, accepted_after: float = 0.0) -> dict[bytes, tuple[float, int]]:
        """goal id -> (first time this process saw it, last status), for the goals the
        controller accepted after ``accepted_after`` (wall-clock s, the goal's accept stamp:
        a latched status of an older goal can arrive at any time)."""
        out = {}
        for t, msg in self.listener.snapshot():
            for s in msg.status_list:
                stamp = s.goal_info.stamp.sec + s.goal_info.stamp.nanosec * 1e-9
                if stamp <= accepted_after:
                    continue
                key = bytes(s.goal_info.goal_id.uuid)
                out[key] = (out.get(key, (t, 0))[0], s.status)
        return out

    def accept_stamps(self, accepted_after: float) -> list[float]:
        """The controller's accept stamps (wall-clock s) of the goals accepted after
        ``accepted_after``."""
        stamps = set()
        for _, msg in self.listener.snapshot():
            for s in msg.status_list:
                stamp = seconds(s.goal_info.stamp)
                if stamp > accepted_after:
                    stamps.add(stamp)
        return sorted(stamps)

    def close(self):
        self.listener.close()


def test_executor_runs_through_the_action_with_the_topic_backends_tracking(cell):
    from action_msgs.msg import GoalStatus

    from real2sim2real_ros.core.bag_io import BagReader
    _, _, cmd, joints = cell
    _arm(cmd)
    status = _Status()
    feedback = []
    try:
        q0 = _q(cmd)
        delta = [0.35, 0.15, -0.2, 0.1, 0.2, 0.3]
        result = cmd.execute_trajectory(joints, _points(q0, delta, 2.5), record=True,
                                        feedback=feedback.append, timeout=30)
        # The status topic can lag the executor's result on a loaded machine: wait for the
        # succeeded goal rather than reading once.
        deadline = time.monotonic() + 5.0
        goals = status.goals()
        while (GoalStatus.STATUS_SUCCEEDED not in [s for _, s in goals.values()]
               and time.monotonic() < deadline):
            time.sleep(0.05)
            goals = status.goals()
    finally:
        status.close()
    assert result.error_code == TrajResult.NONE, result.error_msg
    print(f'follow_joint_trajectory backend: max tracking error '
          f'{result.max_tracking_error:.4f} rad, rms {result.rms_tracking_error:.4f} rad, '
          f'final error {result.final_error:.4f} rad, duration {result.duration:.2f} s')
    # The topic backend's bounds (test_cell_integration.py), unchanged.
    assert 0.0 < result.max_tracking_error < 0.1
    assert result.final_error < 0.02
    assert 2.4 < result.duration < 5.0
    assert len(feedback) >= 10
    np.testing.assert_allclose(_q(cmd), q0 + delta, atol=0.02)
    assert [s for _, s in goals.values()].count(GoalStatus.STATUS_SUCCEEDED) >= 1, \
        'the motion went through the controller action and succeeded there'
    reader = BagReader(result.bag_path)
    assert reader.topics[f'/{ACTION}/trajectory'].count >= 1, 'the goal is recorded'


def test_limits_are_refused_before_any_goal_is_sent(cell):
    _, _, cmd, joints = cell
    _arm(cmd)
    status = _Status()
    try:
        assert status.listener.wait_for_publishers(1, timeout=10), 'the controller is matched'
        t_wall = time.time()
        q0 = _q(cmd)
        bad = list(q0)
        bad[2] = 3.5
        result = cmd.execute_trajectory(joints, [(1.0, list(q0)), (2.0, bad)], timeout=20)
        assert result.error_code == TrajResult.JOINT_LIMIT_VIOLATION
        assert 'elbow_joint' in result.error_msg
        fast = list(q0)
        fast[0] += 2.0
        result = cmd.execute_trajectory(joints, [(0.1, fast)], timeout=20)
        assert result.error_code == TrajResult.VELOCITY_LIMIT_VIOLATION
        time.sleep(0.5)
        after = status.goals(accepted_after=t_wall)
    finally:
        status.close()
    assert after == {}, 'no goal reached the controller'
    assert np.max(np.abs(_q(cmd) - q0)) < 0.005
    assert cmd.executor_status().armed


def test_controller_refuses_bad_goals_with_jtc_codes(cell):
    """Straight to the controller: reject (ros2_control JTC) or abort with the code."""
    from real2sim2real_ros.ros.commander import CommanderError
    _, _, cmd, joints = cell
    q0 = _q(cmd)
    wrong = [joints[1], joints[0], 'no_such_joint'] + joints[2:]
    with pytest.raises(CommanderError, match='rejected'):
        cmd.run_action(FollowJointTrajectory, ACTION,
                       _fjt_goal(wrong, [(1.0, list(q0) + [0.0])]), timeout=10)
    _set_cell(cmd, invalid_goal_response='abort')
    try:
        res = cmd.run_action(FollowJointTrajectory, ACTION,
                             _fjt_goal(wrong, [(1.0, list(q0) + [0.0])]), timeout=10)
        assert res.error_code == FjtResult.INVALID_JOINTS and 'no_such_joint' in res.error_string
        res = cmd.run_action(FollowJointTrajectory, ACTION,
                             _fjt_goal(joints, [(1.0, list(q0))], stamp=5.0), timeout=10)
        assert res.error_code == FjtResult.OLD_HEADER_TIMESTAMP, res.error_string
        res = cmd.run_action(FollowJointTrajectory, ACTION,
                             _fjt_goal(joints, [(1.0, list(q0)), (0.5, list(q0))]), timeout=10)
        assert res.error_code == FjtResult.INVALID_GOAL and 'increasing' in res.error_string
    finally:
        _set_cell(cmd, invalid_goal_response='reject')
    assert np.max(np.abs(_q(cmd) - q0)) < 0.005


def test_path_tolerance_violation_aborts_and_holds_and_cancel_holds(cell):
    from control_msgs.msg import JointTolerance
    _, _, cmd, joints = cell
    q0 = _q(cmd)
    goal = _fjt_goal(joints, _points(q0, [0.4, 0, 0, 0, 0, 0], 2.0))
    goal.path_tolerance = [JointTolerance(name=joints[0], position=0.002)]
    feedback = []
    res = cmd.run_action(FollowJointTrajectory, ACTION, goal, feedback=feedback.append,
                         timeout=10)
    assert res.error_code == FjtResult.PATH_TOLERANCE_VIOLATED, res.error_string
    assert repr(joints[0]) in res.error_string and '0.0020' in res.error_string
    time.sleep(0.4)
    q_a = _q(cmd)
    time.sleep(0.4)
    assert np.max(np.abs(_q(cmd) - q_a)) < 0.005, 'the controller holds after the abort'
    assert abs(q_a[0] - q0[0]) < 0.2, 'it stopped early in the motion'
    # Cancel = hold, with feedback carrying desired / actual / error while it ran.
    q0 = _q(cmd)
    feedback = []
    res = cmd.run_action(FollowJointTrajectory, ACTION,
                         _fjt_goal(joints, _points(q0, [-0.5, 0, 0, 0, 0, 0], 3.0)),
                         feedback=feedback.append, cancel_after=1.0, timeout=10)
    time.sleep(0.4)
    q_a = _q(cmd)
    time.sleep(0.4)
    assert np.max(np.abs(_q(cmd) - q_a)) < 0.005, 'the arm holds after cancel'
    assert 0.02 < abs(q_a[0] - q0[0]) < 0.45
    assert len(feedback) >= 10, 'feedback at ~20 Hz for 1 s'
    fb = feedback[-1]
    assert list(fb.joint_names) == joints
    np.testing.assert_allclose(np.array(fb.desired.positions) - fb.actual.positions,
                               fb.error.positions, atol=1e-9)


def test_controller_abort_and_reject_are_clear_executor_errors_and_disarm(cell):
    _, _, cmd, joints = cell
    _set_cell(cmd, **{f'constraints__{joints[0]}__trajectory': 0.002})
    try:
        _arm(cmd)
        q0 = _q(cmd)
        result = cmd.execute_trajectory(joints, _points(q0, [0.3, 0, 0, 0, 0, 0], 2.0),
                                        record=False, timeout=20)
    finally:
        _set_cell(cmd, **{f'constraints__{joints[0]}__trajectory': 0.0})
    assert result.error_code == TrajResult.BACKEND_UNAVAILABLE
    assert 'PATH_TOLERANCE_VIOLATED' in result.error_msg and joints[0] in result.error_msg
    assert not cmd.executor_status().armed, 'a controller abort disarms'
    _set_cell(cmd, controller_active=False)
    try:
        _arm(cmd)
        q0 = _q(cmd)
        result = cmd.execute_trajectory(joints, _points(q0, [0.2, 0, 0, 0, 0, 0], 1.0),
                                        record=False, timeout=20)
        time.sleep(0.5)
        assert np.max(np.abs(_q(cmd) - q0)) < 0.005, 'an inactive controller moves nothing'
    finally:
        _set_cell(cmd, controller_active=True)
    assert result.error_code == TrajResult.BACKEND_UNAVAILABLE and 'rejected' in result.error_msg
    assert not cmd.executor_status().armed


def test_estop_mid_motion_preempts_the_goal_and_holds_in_time(cell):
    from control_msgs.msg import JointTrajectoryControllerState
    from sensor_msgs.msg import JointState
    _, _, cmd, joints = cell
    _arm(cmd)
    q0 = _q(cmd)
    listener = TopicListener(JointState, '/joint_states')
    reference = TopicListener(JointTrajectoryControllerState, f'/{CTRL}/controller_state')
    status = _Status()
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault('result', cmd.execute_trajectory(
        joints, _points(q0, [0.6, 0, 0, 0, 0, 0], 2.0), record=False, timeout=30)))
    try:
        assert listener.wait_for(20, timeout=10) and reference.wait_for(1, timeout=10)
        worker.start()
        t_start = time.monotonic()
        deadline = t_start + 10
        while abs(listener.snapshot()[-1][1].position[0] - q0[0]) < 0.005:
            assert time.monotonic() < deadline and worker.is_alive(), 'the arm never moved'
            time.sleep(0.01)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - t_start)))
        t_wall = time.time()
        t_call = time.monotonic()
        resp = cmd.stop()
        t_resp = time.monotonic()
        worker.join(timeout=15)
        # The stop goal's status message can come later than the executor's result on a
        # loaded machine (one fresh-clone run saw none within 0.3 s): wait for it; then for
        # the state stream itself (source timestamps) to reach 0.5 s past the hold.
        deadline = time.monotonic() + 10.0
        accepted = []
        while time.monotonic() < deadline:
            accepted = accepted or status.accept_stamps(accepted_after=t_wall)
            sent = listener.snapshot_sent()
            if accepted and sent and sent[-1][0] >= min(accepted) + 0.5:
                break
            time.sleep(0.05)
    finally:
        listener.close()
        reference.close()
        status.close()
    assert resp.success, resp.message
    assert out['result'].error_code == TrajResult.STOPPED, out['result'].error_msg
    assert not cmd.executor_status().armed
    assert accepted, 'the stop went to the controller as a new (preempting) goal'
    # Times below are on one system clock: the controller's accept stamp of the hold goal
    # (the cell's ROS time is wall time in real-time mode) and the DDS source timestamps of
    # the cell's messages, so how late this process received them is not in the figures.
    t_hold = min(accepted)
    f = stop_figures(listener.snapshot_sent(), reference.snapshot_sent(), t_wall, t_hold)
    ref_still, still, ref_span, arm_span = f.ref_still, f.still, f.ref_span, f.arm_span
    # On the controller's own clock (helpers/estop.py), as test_cell_integration.py's e-stop:
    # last state on the goal -> reference at rest within the hold's 10 ms + one control
    # period + one 1 ms physics chunk; -> measured speeds about zero within 0.12 s.
    print(f'e-stop (follow_joint_trajectory): stop call -> hold goal accepted by the '
          f'controller {1e3 * (t_hold - t_wall):.0f} ms (service answered in '
          f'{1e3 * (t_resp - t_call):.0f} ms); -> controller reference at rest '
          f'{1e3 * (ref_still - t_hold):.0f} ms, -> measured joint speeds < 0.05 rad/s '
          f'{1e3 * (still - t_hold):.0f} ms; on the cell\'s clock: reference moving -> at rest '
          f'{1e3 * ref_span:.0f} ms, -> arm still {1e3 * arm_span:.0f} ms')
    assert ref_span <= 0.010 + 0.01 + 0.001, ref_span
    assert arm_span < 0.12, arm_span
    # End to end: the topic backend's measured bound under load (test_cell_integration.py).
    assert ref_still - t_hold < 0.25
    assert still - t_hold < 0.25
    late = f.smooth[f.times > t_hold + 0.2]
    assert late.size, 'no joint states after the hold'
    assert late.max() < 0.05


def test_goal_tolerance_timeout_and_topic_preemption(cell):
    """GOAL_TOLERANCE_VIOLATED once goal_time_tolerance has passed outside an unreachable goal
    bound (the cell's measurement noise alone exceeds 1e-6 rad); a trajectory on the topic
    preempts a running goal."""
    from control_msgs.msg import JointTolerance
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    from real2sim2real_ros.ros import qos
    _, _, cmd, joints = cell
    q0 = _q(cmd)
    goal = _fjt_goal(joints, [(0.5, list(q0))])
    goal.goal_tolerance = [JointTolerance(name=j, position=1e-6) for j in joints]
    goal.goal_time_tolerance.nanosec = 300_000_000
    t0 = time.monotonic()
    res = cmd.run_action(FollowJointTrajectory, ACTION, goal, timeout=10)
    took = time.monotonic() - t0
    assert res.error_code == FjtResult.GOAL_TOLERANCE_VIOLATED, res.error_string
    assert 'goal_time_tolerance 0.300 s' in res.error_string
    assert 0.8 - 0.05 < took < 2.0, took
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault('result', cmd.run_action(
        FollowJointTrajectory, ACTION, _fjt_goal(joints, _points(q0, [0.2, 0, 0, 0, 0, 0],
                                                                  3.0)), timeout=10)))
    worker.start()
    time.sleep(0.8)
    node = cmd.node
    pub = node.create_publisher(JointTrajectory, f'/{CTRL}/joint_trajectory', qos.COMMAND)
    try:
        hold = JointTrajectory(joint_names=list(joints))
        hold.points.append(JointTrajectoryPoint(positions=list(_q(cmd))))
        hold.points[0].time_from_start.nanosec = 100_000_000
        deadline = time.monotonic() + 5
        while worker.is_alive() and time.monotonic() < deadline:   # until it is matched
            pub.publish(hold)
            time.sleep(0.1)
        worker.join(timeout=5)
    finally:
        node.destroy_publisher(pub)
    res = out['result']
    assert res.error_code == FjtResult.INVALID_GOAL and 'joint_trajectory topic' in res.error_string


def test_controller_going_away_mid_goal_is_a_clear_error_and_disarms(cell):
    cell_graph, executor_graph, cmd, joints = cell
    _arm(cmd)
    q0 = _q(cmd)
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault('result', cmd.execute_trajectory(
        joints, _points(q0, [0.5, 0, 0, 0, 0, 0], 3.0), record=False, timeout=30)))
    worker.start()
    time.sleep(1.0)
    t_kill = time.monotonic()
    os.kill(cell_graph.pids()['emulated_cell'], signal.SIGKILL)
    worker.join(timeout=20)
    t_end = time.monotonic()
    result = out['result']
    print(f'controller killed mid-goal: executor result after {t_end - t_kill:.2f} s: '
          f'{result.error_msg}')
    assert result.error_code == TrajResult.BACKEND_UNAVAILABLE
    assert ('joint_states stopped arriving' in result.error_msg
            or 'went away' in result.error_msg), result.error_msg
    assert 'disarmed' in result.error_msg
    status = cmd.executor_status()
    assert not status.armed and executor_graph.alive('robot_executor'), 'alive, disarmed'
    assert t_end - t_kill < 3.0
