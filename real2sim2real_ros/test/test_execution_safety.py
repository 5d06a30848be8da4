"""Trajectory validation, tracking-monitor maths and stop ramps (core only, no rclpy)."""
import math

import numpy as np
import pytest

from real2sim2real_ros.core import execution_safety as es
from real2sim2real_ros.core.execution_safety import (
    JointLimits,
    ReferenceTrajectory,
    TrackingMonitor,
    Trajectory,
    TrajectoryViolation,
    Workspace,
    stop_ramp,
    validate_trajectory,
)

NAMES = ('shoulder', 'elbow')
LIMITS = JointLimits(NAMES, lower=[-2.0, -2.5], upper=[2.0, 2.5], velocity=[1.0, 2.0])
L1, L2 = 0.5, 0.4


def planar_fk(q):
    """Two-link planar arm in the x-z plane: q = 0 points straight along +x."""
    x = L1 * math.cos(q[0]) + L2 * math.cos(q[0] + q[1])
    z = L1 * math.sin(q[0]) + L2 * math.sin(q[0] + q[1])
    return np.array([x, 0.0, z]), np.array([1.0, 0.0, 0.0, 0.0])


def traj(times, positions, names=NAMES, velocities=None):
    return Trajectory(tuple(names), np.array(times, float), np.array(positions, float),
                      None if velocities is None else np.array(velocities, float))


def violation(kind, *args, **kwargs):
    with pytest.raises(TrajectoryViolation) as info:
        validate_trajectory(*args, **kwargs)
    assert info.value.kind == kind, info.value.message
    return info.value.message


def test_valid_trajectory_is_reordered_to_robot_joint_order():
    t = traj([0.0, 1.0], [[0.0, 0.0], [0.5, 0.2]], names=('elbow', 'shoulder'))
    out = validate_trajectory(t, LIMITS, current_position=[0.0, 0.0])
    assert out.command.joint_names == NAMES
    np.testing.assert_allclose(out.command.positions[1], [0.2, 0.5])
    assert not out.start_prepended


def test_joint_limit_violation_names_joint_point_and_values():
    t = traj([0.5, 1.0, 1.5], [[0.1, 0.0], [0.2, 0.0], [0.3, 2.7]])
    msg = violation(es.JOINT_LIMIT_VIOLATION, t, LIMITS, [0.0, 0.0])
    assert "'elbow'" in msg and 'point 2' in msg and '2.7000' in msg and '2.5000' in msg


def test_velocity_between_points_over_scaled_limit():
    # shoulder moves 0.6 rad in 1 s: fine at scale 1 (limit 1 rad/s), too fast at 0.5.
    t = traj([0.0, 1.0], [[0.0, 0.0], [0.6, 0.0]])
    validate_trajectory(t, LIMITS, [0.0, 0.0], velocity_scale=1.0)
    msg = violation(es.VELOCITY_LIMIT_VIOLATION, t, LIMITS, [0.0, 0.0], velocity_scale=0.5)
    assert "'shoulder'" in msg and 'points 0 and 1' in msg and '0.6000 rad/s' in msg
    assert '0.5000 rad/s' in msg


def test_given_point_velocity_over_limit():
    t = traj([0.0, 1.0], [[0.0, 0.0], [0.1, 0.1]], velocities=[[0, 0], [0.0, 2.5]])
    msg = violation(es.VELOCITY_LIMIT_VIOLATION, t, LIMITS, [0.0, 0.0])
    assert "'elbow'" in msg and 'point 1' in msg and '2.5000' in msg


def test_implicit_start_segment_is_checked_like_jtc():
    # First point at t = 0.2 s is 0.5 rad away: JTC would move 2.5 rad/s to reach it.
    t = traj([0.2, 1.0], [[0.5, 0.0], [0.6, 0.0]])
    msg = violation(es.VELOCITY_LIMIT_VIOLATION, t, LIMITS, [0.0, 0.0])
    assert 'points -1 and 0' in msg and 'current position' in msg
    ok = validate_trajectory(traj([1.0, 2.0], [[0.5, 0.0], [0.6, 0.0]]), LIMITS, [0.0, 0.0])
    assert ok.start_prepended
    np.testing.assert_allclose(ok.reference.sample(0.5), [0.25, 0.0])


def test_first_point_at_time_zero_must_be_the_current_position():
    t = traj([0.0, 1.0], [[0.3, 0.0], [0.4, 0.0]])
    msg = violation(es.INVALID_TRAJECTORY, t, LIMITS, [0.0, 0.0], start_tolerance=0.05)
    assert "'shoulder'" in msg and '0.3000' in msg


@pytest.mark.parametrize('times,positions,names,needle', [
    ([0.0, 1.0, 1.0], [[0, 0], [0.1, 0], [0.2, 0]], NAMES, 'strictly increasing at point 2'),
    ([0.0, 0.5, 0.4], [[0, 0], [0.1, 0], [0.2, 0]], NAMES, 'strictly increasing at point 2'),
    ([0.0], [[0, 0]], NAMES, 'zero duration'),
    ([], np.zeros((0, 2)), NAMES, 'no points'),
    ([0.0, 1.0], [[0, 0], [0.1, 0]], ('shoulder', 'wrist'), "['wrist']"),
    ([0.0, 1.0], [[0], [0.1]], ('shoulder',), "['elbow']"),
    ([0.0, 1.0], [[0, 0], [float('nan'), 0]], NAMES, "point 1, joint 'shoulder': nan"),
    ([0.0, 1.0], [[0, 0, 0], [0.1, 0, 0]], NAMES, 'shape'),
])
def test_invalid_trajectories(times, positions, names, needle):
    t = Trajectory(tuple(names), np.array(times, float), np.array(positions, float))
    msg = violation(es.INVALID_TRAJECTORY, t, LIMITS, [0.0, 0.0])
    assert needle in msg


def test_workspace_violation_at_a_point():
    ws = Workspace([-1.0, -1.0, -0.1], [1.0, 1.0, 1.0])
    # q = (-0.5, 0): tip z = 0.9 sin(-0.5) = -0.43 m, below -0.1.
    t = traj([1.0, 2.0], [[-0.05, 0.0], [-0.5, 0.0]])
    # A coarse step checks the points only; the default step catches the crossing earlier.
    msg = violation(es.WORKSPACE_VIOLATION, t, LIMITS, [0.0, 0.0], fk=planar_fk, workspace=ws,
                    workspace_step=1.0)
    assert 'at point 1' in msg and 'out on z' in msg and '-0.431' in msg
    msg = violation(es.WORKSPACE_VIOLATION, t, LIMITS, [0.0, 0.0], fk=planar_fk, workspace=ws)
    assert 'between points 0 and 1' in msg and '-0.1' in msg


def test_workspace_violation_inside_a_segment_between_valid_points():
    # The shoulder sweeps from -1.5 to +1.5 rad with the elbow straight: both ends have the tip
    # near x = 0.06 m, but half-way it points straight ahead at x = 0.9 m, past x_max = 0.5 m.
    ws = Workspace([-1.0, -1.0, -1.0], [0.5, 1.0, 1.0])
    a, b = np.array([-1.5, 0.0]), np.array([1.5, 0.0])
    assert ws.contains(planar_fk(a)[0]) and ws.contains(planar_fk(b)[0])
    assert planar_fk((a + b) / 2)[0][0] == pytest.approx(0.9)
    lim = JointLimits(NAMES, [-2.0, -2.5], [2.0, 2.5], [2.0, 2.0])
    msg = violation(es.WORKSPACE_VIOLATION, traj([3.0], [b]), lim, a, fk=planar_fk,
                    workspace=ws)
    assert 'between points -1 and 0' in msg and 'out on x' in msg
    # Given as two explicit points (start at t = 0), the segment is between points 0 and 1.
    msg = violation(es.WORKSPACE_VIOLATION, traj([0.0, 3.0], [a, b]), lim, a, fk=planar_fk,
                    workspace=ws)
    assert 'between points 0 and 1' in msg
    # With only the end points checked the same motion would pass: the check really samples.
    out = validate_trajectory(traj([0.0, 3.0], [a, a + [0.05, 0.0]]), lim, a, fk=planar_fk,
                              workspace=ws)
    assert out.workspace_samples == 2


def test_workspace_samples_respect_step():
    ws = Workspace([-2, -2, -2], [2, 2, 2])
    t = traj([0.0, 1.0], [[0.0, 0.0], [0.5, 0.0]])
    out = validate_trajectory(t, LIMITS, [0.0, 0.0], fk=planar_fk, workspace=ws,
                              workspace_step=0.05)
    assert out.workspace_samples == 11    # 0.5 rad / 0.05 = 10 sub-segments, 11 poses


def test_bad_configuration_is_a_clear_error():
    with pytest.raises(es.SafetyConfigError, match='velocity limit'):
        JointLimits(NAMES, [-1, -1], [1, 1], [1.0, 0.0])
    with pytest.raises(es.SafetyConfigError, match='min < max'):
        Workspace([0, 0, 1], [1, 1, 0.5])
    with pytest.raises(es.SafetyConfigError, match='velocity_scale'):
        validate_trajectory(traj([0, 1], [[0, 0], [0, 0]]), LIMITS, velocity_scale=1.5)


def test_reference_linear_and_hermite():
    ref = ReferenceTrajectory([0.0, 1.0, 3.0], [[0.0], [1.0], [2.0]])
    assert ref.sample(-1.0)[0] == 0.0
    assert ref.sample(0.25)[0] == pytest.approx(0.25)
    assert ref.sample(2.0)[0] == pytest.approx(1.5)
    assert ref.sample(9.0)[0] == 2.0
    # Hermite with zero end velocities: smoothstep, 0.5 at the middle, 0.15625 at a quarter.
    h = ReferenceTrajectory([0.0, 1.0], [[0.0], [1.0]], [[0.0], [0.0]])
    assert h.sample(0.5)[0] == pytest.approx(0.5)
    assert h.sample(0.25)[0] == pytest.approx(3 * 0.0625 - 2 * 0.015625)


def test_tracking_monitor_statistics():
    ref = ReferenceTrajectory([0.0, 2.0], [[0.0, 0.0], [1.0, -1.0]])
    mon = TrackingMonitor(ref, max_tracking_error=0.1, goal_tolerance=0.01, joint_names=NAMES)
    s = mon.update(1.0, [0.45, -0.5])        # reference (0.5, -0.5): errors 0.05, 0
    assert s.max_error == pytest.approx(0.05) and s.progress == pytest.approx(0.5)
    assert not s.exceeded
    s = mon.update(1.5, [0.75, -0.6])        # reference (0.75, -0.75): error 0.15 on elbow
    assert s.max_error == pytest.approx(0.15) and s.exceeded
    s = mon.update(2.5, [1.0, -0.995])       # past the end: reference held at the last point
    assert s.progress == 1.0 and mon.at_goal()
    sm = mon.summary()
    assert sm.max_error == pytest.approx(0.15)
    assert sm.rms_error == pytest.approx(math.sqrt((0.05**2 + 0.15**2 + 0.005**2) / 3))
    assert sm.final_error == pytest.approx(0.005)
    assert sm.worst_joint == 'elbow' and sm.samples == 3
    mon.update(2.6, [1.0, -0.98])
    assert not mon.at_goal()


def test_stop_ramp_single_hold_point():
    # One control period: one point, at rest, v0·T/2 beyond the measured position.
    r = stop_ramp([0.1, 0.2], [0.5, -0.5], decel_time=0.01, control_period=0.01)
    np.testing.assert_allclose(r.times, [0.01])
    np.testing.assert_allclose(r.positions, [[0.1025, 0.1975]])
    np.testing.assert_allclose(r.velocities, [[0.0, 0.0]])
    # No velocity known (or at rest): hold exactly where it is.
    r = stop_ramp([0.1, 0.2], None, decel_time=0.0, control_period=0.01)
    np.testing.assert_allclose(r.positions, [[0.1, 0.2]])


def test_stop_ramp_constant_deceleration():
    v0 = np.array([1.0, -0.5])
    r = stop_ramp([0.0, 0.0], v0, decel_time=0.1, control_period=0.01, limits=LIMITS)
    assert len(r.times) == 10 and r.times[-1] == pytest.approx(0.1)
    np.testing.assert_allclose(r.velocities[-1], 0.0)
    # Distance to rest under constant deceleration: v0 T / 2.
    np.testing.assert_allclose(r.positions[-1], v0 * 0.1 / 2)
    np.testing.assert_allclose(r.velocities[4], v0 * 0.5)
    # Speed never increases along the ramp.
    assert np.all(np.diff(np.abs(r.velocities), axis=0) <= 1e-12)


def test_stop_ramp_stays_inside_joint_limits():
    r = stop_ramp([1.99, 0.0], [1.0, 0.0], decel_time=0.2, control_period=0.01, limits=LIMITS)
    assert np.max(r.positions[:, 0]) == pytest.approx(2.0)
    with pytest.raises(es.SafetyConfigError, match='control_period'):
        stop_ramp([0.0], [0.0], 0.1, 0.0)


def test_default_cell_arm_limits_and_workspace_with_real_fk():
    rd = pytest.importorskip('real2sim2real_ros.core.robot_description')
    robot = rd.load_robot(rd.default_cell_urdf())
    limits = JointLimits.from_robot(robot)
    assert limits.names == robot.joint_names
    np.testing.assert_allclose(limits.velocity, robot.velocity_limits)
    home = np.array(rd.CELL_ARM_HOME)
    tip_z = robot.fk(home)[0][2]
    ws = Workspace([-1.5, -1.5, tip_z - 0.05], [1.5, 1.5, 1.5])
    # Lowering the shoulder (positive shoulder_lift) drops the tool below the floor of the box.
    low = home + [0, 0.4, 0, 0, 0, 0]
    assert robot.fk(low)[0][2] < tip_z - 0.05
    t = Trajectory(limits.names, np.array([2.0]), low[None, :])
    with pytest.raises(TrajectoryViolation) as info:
        validate_trajectory(t, limits, home, fk=robot.fk, workspace=ws)
    assert info.value.kind == es.WORKSPACE_VIOLATION
    assert 'between points -1 and 0' in info.value.message and 'out on z' in info.value.message
    up = home + [0.3, -0.2, 0, 0, 0, 0]
    out = validate_trajectory(Trajectory(limits.names, np.array([2.0]), up[None, :]), limits,
                              home, fk=robot.fk, workspace=ws)
    assert out.workspace_samples == 7      # 0.3 rad in 0.05 rad steps: 6 sub-segments
