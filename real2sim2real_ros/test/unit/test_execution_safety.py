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
    from real2sim2real_ros.core import robot_description as rd
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


# ------------------------------------------------------------- the reference between points

def _chords_and_points_pass(t, q, v, lim, q0):
    """What a waypoint-only check accepts: points in limits, point velocities and the chord
    speed |dq|/dt of every segment (from q0 at t = 0) within the velocity limits."""
    tt, qq = np.concatenate([[0.0], t]), np.vstack([q0, q])
    chord = np.abs(np.diff(qq, axis=0)) / np.diff(tt)[:, None]
    return (np.all((q >= lim.lower) & (q <= lim.upper)) and np.all(chord <= lim.velocity)
            and (v is None or np.all(np.abs(v) <= lim.velocity)))


def test_cubic_overshoot_between_valid_points_is_a_joint_limit_violation():
    # 1.9 rad at t = 4 s moving at +1 rad/s, then stop at 1.9 rad at t = 6 s: the cubic runs
    # on past the point to 1.9 + 4/27 * ... = 2.196 rad at t = 4.667 s; the limit is 2.0.
    t = np.array([4.0, 6.0])
    q = np.array([[1.9, 0.0], [1.9, 0.0]])
    v = np.array([[1.0, 0.0], [0.0, 0.0]])
    assert _chords_and_points_pass(t, q, v, LIMITS, [0.0, 0.0])
    msg = violation(es.JOINT_LIMIT_VIOLATION, traj(t, q, velocities=v), LIMITS, [0.0, 0.0])
    assert "'shoulder'" in msg and 'between points 0 and 1' in msg and 'cubic' in msg
    assert 't = 4.667 s' in msg and '2.1963 rad' in msg and '2.0000' in msg, msg
    # The same points without velocities are linear and fine.
    validate_trajectory(traj(t, q), LIMITS, [0.0, 0.0])


def test_cubic_velocity_peak_between_points_is_a_velocity_violation():
    # From rest to 1.9 rad in 2 s arriving at 1 rad/s: chord 0.95 rad/s, point velocities
    # 0 and 1, both at most the 1 rad/s limit, but the cubic peaks at 1.2676 rad/s.
    t, q, v = np.array([2.0]), np.array([[1.9, 0.0]]), np.array([[1.0, 0.0]])
    assert _chords_and_points_pass(t, q, v, LIMITS, [0.0, 0.0])
    msg = violation(es.VELOCITY_LIMIT_VIOLATION, traj(t, q, velocities=v), LIMITS, [0.0, 0.0])
    assert "'shoulder'" in msg and 'between points -1 and 0' in msg and '+1.2676 rad/s' in msg
    assert 't = 1.370 s' in msg and '1.0000 rad/s' in msg, msg


def test_quintic_overshoot_is_checked_and_is_the_cells_spline():
    # Rest to 1.9 rad in 1 s ending with +40 rad/s^2: the quintic peaks at 2.2309 rad.
    acc = np.array([[0.0, 0.0], [40.0, 0.0]])
    t = Trajectory(NAMES, np.array([0.0, 1.0]), np.array([[0.0, 0.0], [1.9, 0.0]]),
                   np.array([[0.0, 0.0], [0.0, 0.0]]), acc)
    lim = JointLimits(NAMES, [-2.0, -2.5], [2.0, 2.5], [10.0, 10.0])
    msg = violation(es.JOINT_LIMIT_VIOLATION, t, lim, [0.0, 0.0])
    assert 'quintic' in msg and "'shoulder'" in msg and '2.2309 rad' in msg and '0.745' in msg
    # Accepted quintic: the tracking reference is the emulated cell's reference, sample by sample.
    from real2sim2real_ros.core.joint_trajectory import JointTrajectoryCommand, TrajectoryFollower
    t.accelerations = np.array([[0.0, 0.0], [-3.0, 0.0]])
    out = validate_trajectory(t, lim, [0.0, 0.0])
    assert out.reference.kind == 'quintic'
    cell = TrajectoryFollower(list(NAMES), np.zeros(2))
    cell.set_trajectory(JointTrajectoryCommand(list(NAMES), t.times, t.positions, t.velocities,
                                               t.accelerations), now=0.0)
    for s in np.linspace(0.0, 1.2, 25):
        np.testing.assert_allclose(out.reference.sample(s), cell.sample(s)[0], atol=1e-12)


def test_accelerations_without_velocities_are_refused():
    t = Trajectory(NAMES, np.array([1.0]), np.array([[0.1, 0.0]]), None, np.zeros((1, 2)))
    assert 'without velocities' in violation(es.INVALID_TRAJECTORY, t, LIMITS, [0.0, 0.0])


def test_start_segment_may_return_into_the_limits_but_not_go_further_out():
    q0 = [2.05, 0.0]                    # the arm is 0.05 rad past the shoulder's upper limit
    validate_trajectory(traj([1.0], [[1.8, 0.0]]), LIMITS, q0)
    validate_trajectory(traj([1.0], [[1.8, 0.0]], velocities=[[-0.5, 0.0]]), LIMITS, q0)
    # Still moving outwards at +0.5 rad/s when the cubic starts: it swings further out first.
    msg = violation(es.JOINT_LIMIT_VIOLATION, traj([1.0], [[1.8, 0.0]], velocities=[[0.0, 0.0]]),
                    LIMITS, q0, current_velocity=[0.5, 0.0])
    assert 'between points -1 and 0' in msg and "'shoulder'" in msg and '2.08' in msg, msg


def test_cubic_tip_leaves_workspace_between_points():
    # Elbow straight; the shoulder goes 0 -> 0.6 rad arriving at 1 rad/s and stops there: the
    # cubic overshoots to ~0.75 rad, the tip rises past z = 0.9 sin(0.7) = 0.58 m.
    ws = Workspace([-1.0, -1.0, -1.0], [1.0, 1.0, 0.9 * math.sin(0.7)])
    lim = JointLimits(NAMES, [-2.0, -2.5], [2.0, 2.5], [2.0, 2.0])
    t = traj([1.0, 2.0], [[0.6, 0.0], [0.6, 0.0]], velocities=[[1.0, 0.0], [0.0, 0.0]])
    assert ws.contains(planar_fk([0.6, 0.0])[0])
    msg = violation(es.WORKSPACE_VIOLATION, t, lim, [0.0, 0.0], fk=planar_fk, workspace=ws)
    assert 'between points 0 and 1' in msg and 'out on z' in msg


def test_lipschitz_certifies_the_gaps_between_coarse_samples():
    # The shoulder sweeps -1.5 -> 1.5 rad; the tip's x peaks at 0.9 m half-way. With a 1 rad
    # step the samples (x = 0.064, 0.79, 0.79, 0.064 m) all pass a box x <= 0.88 m; the
    # Lipschitz bound (0.9 + 0.4 m/rad) finds the samples do not cover the gap and refines.
    ws = Workspace([-1.0, -1.0, -1.0], [0.88, 1.0, 1.0])
    lim = JointLimits(NAMES, [-2.0, -2.5], [2.0, 2.5], [2.0, 2.0])
    t = traj([0.0, 3.0], [[-1.5, 0.0], [1.5, 0.0]])
    out = validate_trajectory(t, lim, [-1.5, 0.0], fk=planar_fk, workspace=ws, workspace_step=1.0)
    assert out.workspace_samples == 4 and out.workspace_bound == math.inf
    msg = violation(es.WORKSPACE_VIOLATION, t, lim, [-1.5, 0.0], fk=planar_fk, workspace=ws,
                    workspace_step=1.0, fk_lipschitz=[0.9, 0.4])
    assert 'out on x' in msg
    # A box the sweep stays inside: accepted, with the stated bound, few extra samples.
    wide = Workspace([-1.0, -1.0, -1.0], [0.95, 1.0, 1.0])
    ok = validate_trajectory(t, lim, [-1.5, 0.0], fk=planar_fk, workspace=wide,
                             workspace_step=1.0, fk_lipschitz=[0.9, 0.4])
    assert ok.workspace_bound == 0.001 and 4 < ok.workspace_samples < 200


def test_fk_lipschitz_bound_holds_for_the_cell_arm():
    from real2sim2real_ros.core import robot_description as rd
    robot = rd.load_robot(rd.default_cell_urdf())
    lip = es.fk_lipschitz_bound(robot)
    # Pan joint to tool tip through the URDF's offsets: 0.135 + |(0.45, -0.135, 0)| + 0.40 +
    # 0.09 + 0.09 + 0.06 + 0.1 = 1.3448 m; each joint further out reaches less.
    assert lip[0] == pytest.approx(1.3448, abs=1e-4) and np.all(lip[:-1] >= lip[1:])
    rng = np.random.default_rng(3)
    worst = 0.0
    for _ in range(300):
        q = rng.uniform(robot.lower, robot.upper)
        dq = rng.normal(size=6)
        h = 1e-6
        speed = np.linalg.norm(robot.fk(q + h * dq)[0] - robot.fk(q)[0]) / h
        worst = max(worst, speed / float(lip @ np.abs(dq)))
    assert worst <= 1.0 + 1e-4, worst
