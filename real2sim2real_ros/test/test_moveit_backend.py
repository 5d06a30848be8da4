"""The robot executor's ``moveit`` backend over the wire: moveit_msgs (the real package or
the stand-in) and move_group_double.py, a TEST DOUBLE of move_group's execute_trajectory
action that forwards to the emulated cell's follow_joint_trajectory, as move_group's
TrajectoryExecutionManager does. What this does not test: MoveIt itself (planning scene,
its start-state and collision checks, its controller manager configuration)."""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

pytestmark = pytest.mark.integration

from conftest import joint_positions as _q  # noqa: E402
from conftest import two_point_goal as _points  # noqa: E402

from real2sim2real_msgs.action import ExecuteTrajectory  # noqa: E402

R = ExecuteTrajectory.Result


@pytest.fixture(scope='module')
def cell(share_dir, tmp_path_factory):
    from conftest import launch_file
    from move_group_double import MoveGroupDouble

    from real2sim2real_ros.launch_runner import LaunchedGraph
    from real2sim2real_ros.ros.commander import Commander
    tmp = tmp_path_factory.mktemp('moveit')
    double = MoveGroupDouble()
    graph = LaunchedGraph(launch_file('cell_emulated.launch.xml'), {
        'executor_backend': 'moveit', 'run_dir': str(tmp / 'runs')},
        env=dict(os.environ, R2S2R_RUN_DIR=str(tmp / 'runs')), log_dir=tmp / 'logs').start()
    cmd = Commander(node_name='moveit_test_commander')
    try:
        joints = list(cmd.joint_state(timeout=60).name)
        double.wait_ready(timeout=30)
        resp = cmd.arm(wait=30)
        assert resp.success, resp.message
        yield cmd, joints, double
    finally:
        cmd.close()
        graph.stop(timeout=30)
        double.close()


def test_moveit_backend_executes_through_move_group(cell):
    cmd, joints, double = cell
    q0 = _q(cmd)
    before = double.goals
    delta = [0.35, 0.15, -0.2, 0.1, 0.2, 0.3]
    result = cmd.execute_trajectory(joints, _points(q0, delta, 2.5), record=False, timeout=30)
    assert result.error_code == R.NONE, result.error_msg
    print(f'moveit backend: max tracking error {result.max_tracking_error:.4f} rad, rms '
          f'{result.rms_tracking_error:.4f} rad, final error {result.final_error:.4f} rad, '
          f'duration {result.duration:.2f} s')
    assert 0.0 < result.max_tracking_error < 0.1 and result.final_error < 0.02
    assert 2.4 < result.duration < 5.0
    np.testing.assert_allclose(_q(cmd), q0 + delta, atol=0.02)
    assert double.goals == before + 1


def test_limits_are_refused_before_move_group_gets_a_goal(cell):
    cmd, joints, double = cell
    q0 = _q(cmd)
    before = double.goals
    bad = list(q0)
    bad[2] = 3.5
    result = cmd.execute_trajectory(joints, [(1.0, list(q0)), (2.0, bad)], timeout=20)
    assert result.error_code == R.JOINT_LIMIT_VIOLATION
    assert double.goals == before and cmd.executor_status().armed


def test_a_controller_abort_through_move_group_is_a_clear_error_and_disarms(cell):
    from test_fjt_integration import _set_cell
    cmd, joints, _ = cell
    _set_cell(cmd, **{f'constraints__{joints[0]}__trajectory': 0.002})
    try:
        q0 = _q(cmd)
        result = cmd.execute_trajectory(joints, _points(q0, [0.3, 0, 0, 0, 0, 0], 2.0),
                                        record=False, timeout=20)
    finally:
        _set_cell(cmd, **{f'constraints__{joints[0]}__trajectory': 0.0})
    assert result.error_code == R.BACKEND_UNAVAILABLE
    assert 'CONTROL_FAILED (-4)' in result.error_msg and joints[0] in result.error_msg
    assert not cmd.executor_status().armed


def test_estop_through_move_group_holds_the_arm(cell):
    cmd, joints, double = cell
    resp = cmd.arm(wait=15)
    assert resp.success, resp.message
    q0 = _q(cmd)
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault('result', cmd.execute_trajectory(
        joints, _points(q0, [0.6, 0, 0, 0, 0, 0], 2.0), record=False, timeout=30)))
    worker.start()
    time.sleep(1.2)
    t_call = time.monotonic()
    resp = cmd.stop()
    worker.join(timeout=15)
    t_done = time.monotonic()
    assert resp.success, resp.message
    assert out['result'].error_code == R.STOPPED
    assert not cmd.executor_status().armed
    time.sleep(0.4)
    q_a = _q(cmd)
    time.sleep(0.4)
    assert np.max(np.abs(_q(cmd) - q_a)) < 0.005, 'the arm holds'
    assert 0.05 < abs(q_a[0] - q0[0]) < 0.55, 'it stopped part way'
    print(f'moveit e-stop: goal ended {1e3 * (t_done - t_call):.0f} ms after the stop call')
