"""joint_trajectory_controller semantics: interpolation numbers, validation, replacement."""
import numpy as np
import pytest

from real2sim2real_ros.core.joint_trajectory import (
    JointTrajectoryCommand,
    TrajectoryError,
    TrajectoryFollower,
    validate_trajectory,
)

J = ['a', 'b']


def follower(q0=(0.0, 0.0)):
    return TrajectoryFollower(J, np.array(q0), lower=[-3, -3], upper=[3, 3])


def test_linear_positions_only():
    f = follower()
    f.set_trajectory(JointTrajectoryCommand.from_points(J, [(1.0, [1.0, -2.0]),
                                                            (3.0, [2.0, 0.0])]), now=10.0)
    p, v, a = f.sample(10.5)       # halfway through the first segment from the start state
    np.testing.assert_allclose(p, [0.5, -1.0])
    np.testing.assert_allclose(v, [1.0, -2.0])
    np.testing.assert_allclose(a, [0.0, 0.0])
    p, v, _ = f.sample(12.0)       # halfway through the second (2 s long) segment
    np.testing.assert_allclose(p, [1.5, -1.0])
    np.testing.assert_allclose(v, [0.5, 1.0])
    p, v, _ = f.sample(20.0)       # after the end: hold the last point, zero velocity
    np.testing.assert_allclose(p, [2.0, 0.0])
    np.testing.assert_allclose(v, [0.0, 0.0])
    assert f.is_done(20.0) and not f.is_done(12.0)


def test_cubic_with_velocities():
    # From rest at 0 to 1 with end velocity 0 over T=2: p = 3 s^2 - 2 s^3, s = t/T.
    f = follower()
    f.set_trajectory(JointTrajectoryCommand.from_points(J, [(2.0, [1.0, 1.0], [0.0, 0.0])]),
                     now=0.0)
    p, v, a = f.sample(0.5)        # s = 0.25
    np.testing.assert_allclose(p, [3 * 0.0625 - 2 * 0.015625] * 2)       # 0.15625
    np.testing.assert_allclose(v, [(6 * 0.25 - 6 * 0.0625) / 2.0] * 2)   # 0.5625
    np.testing.assert_allclose(a, [(6 - 12 * 0.25) / 4.0] * 2)           # 0.75
    # Non-zero end velocity: p(T) and v(T) are matched exactly.
    f.set_trajectory(JointTrajectoryCommand.from_points(
        J, [(1.0, [0.5, 0.5], [0.3, -0.2]), (2.0, [1.0, 1.0], [0.0, 0.0])]), now=5.0)
    p, v, _ = f.sample(6.0)
    np.testing.assert_allclose(p, [0.5, 0.5])
    np.testing.assert_allclose(v, [0.3, -0.2])


def test_quintic_with_accelerations():
    # Rest to rest over T=1: p = 10 s^3 - 15 s^4 + 6 s^5; at s = 0.5 -> 0.5, v = 1.875.
    f = follower()
    f.set_trajectory(JointTrajectoryCommand.from_points(
        J, [(1.0, [1.0, 2.0], [0.0, 0.0], [0.0, 0.0])]), now=0.0)
    p, v, a = f.sample(0.5)
    np.testing.assert_allclose(p, [0.5, 1.0])
    np.testing.assert_allclose(v, [1.875, 3.75])
    np.testing.assert_allclose(a, [0.0, 0.0], atol=1e-12)
    p, v, a = f.sample(0.25)       # s = .25: 10/64 - 15/256 + 6/1024 = 0.103515625
    np.testing.assert_allclose(p[0], 0.103515625)
    # Given end acceleration is met.
    f.set_trajectory(JointTrajectoryCommand.from_points(
        J, [(1.0, [1.0, 1.0], [0.5, 0.5], [2.0, -1.0])]), now=3.0)
    p, v, a = f.sample(4.0 - 1e-9)
    np.testing.assert_allclose(p, [1.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(v, [0.5, 0.5], atol=1e-6)
    np.testing.assert_allclose(a, [2.0, -1.0], atol=1e-6)


def test_replacement_from_start_time_and_continuity():
    f = follower()
    f.set_trajectory(JointTrajectoryCommand.from_points(J, [(2.0, [2.0, 2.0])]), now=0.0)
    # A new trajectory stamped to start at t=1.5 (absolute): the old one runs until then.
    f.set_trajectory(JointTrajectoryCommand.from_points(J, [(1.0, [0.0, 0.0])],
                                                        start_time=1.5), now=1.0)
    np.testing.assert_allclose(f.sample(1.2)[0], [1.2, 1.2])   # still the old one
    # From 1.5 the new one starts at the old reference (1.5) and goes to 0 in 1 s.
    np.testing.assert_allclose(f.sample(1.5)[0], [1.5, 1.5])
    np.testing.assert_allclose(f.sample(2.0)[0], [0.75, 0.75])
    np.testing.assert_allclose(f.sample(3.0)[0], [0.0, 0.0])
    # start_time 0 means now: replaces immediately, starting from the current reference.
    f.set_trajectory(JointTrajectoryCommand.from_points(J, [(1.0, [1.0, -1.0])]), now=3.0)
    np.testing.assert_allclose(f.sample(3.0)[0], [0.0, 0.0])
    np.testing.assert_allclose(f.sample(3.5)[0], [0.5, -0.5])
    # A pending trajectory is dropped by a newer one that starts now.
    f.set_trajectory(JointTrajectoryCommand.from_points(J, [(1.0, [2.5, 2.5])],
                                                        start_time=10.0), now=3.5)
    f.set_trajectory(JointTrajectoryCommand.from_points(J, []), now=3.6)   # empty = stop
    np.testing.assert_allclose(f.sample(12.0)[0], f.sample(3.6)[0])


def test_reorders_joint_names_and_hold():
    f = follower()
    f.set_trajectory(JointTrajectoryCommand.from_points(['b', 'a'], [(1.0, [2.0, 1.0])]), 0.0)
    np.testing.assert_allclose(f.sample(5.0)[0], [1.0, 2.0])
    f.hold([0.3, 0.4], now=5.0)
    np.testing.assert_allclose(f.sample(6.0)[0], [0.3, 0.4])


@pytest.mark.parametrize('cmd,message', [
    (JointTrajectoryCommand.from_points(['a'], [(1.0, [0.0])]), 'missing'),
    (JointTrajectoryCommand.from_points(['a', 'c'], [(1.0, [0.0, 0.0])]), 'unknown joints'),
    (JointTrajectoryCommand.from_points(['a', 'a'], [(1.0, [0.0, 0.0])]), 'duplicates'),
    (JointTrajectoryCommand.from_points(J, [(1.0, [0, 0]), (1.0, [1, 1])]),
     'points[1].time_from_start must be strictly increasing'),
    (JointTrajectoryCommand.from_points(J, [(-1.0, [0, 0])]), 'time_from_start must be'),
    (JointTrajectoryCommand.from_points(J, [(1.0, [0, 0, 0])]), 'positions: expected'),
    (JointTrajectoryCommand.from_points(J, [(1.0, [np.nan, 0])]), 'positions: values must be'),
    (JointTrajectoryCommand.from_points(J, [(1.0, [0, 5.0])]), 'positions[b] = 5.0000 outside'),
    (JointTrajectoryCommand(J, np.array([1.0]), np.zeros((1, 2)), None, np.zeros((1, 2))),
     'accelerations given without velocities'),
])
def test_validation_rejects(cmd, message):
    with pytest.raises(TrajectoryError) as err:
        validate_trajectory(cmd, J, lower=[-3, -3], upper=[3, 3])
    assert message in str(err.value)


def test_rejected_trajectory_leaves_active_one():
    f = follower()
    f.set_trajectory(JointTrajectoryCommand.from_points(J, [(1.0, [1.0, 1.0])]), 0.0)
    with pytest.raises(TrajectoryError):
        f.set_trajectory(JointTrajectoryCommand.from_points(J, [(1.0, [9.0, 9.0])]), 0.5)
    np.testing.assert_allclose(f.sample(1.0)[0], [1.0, 1.0])
