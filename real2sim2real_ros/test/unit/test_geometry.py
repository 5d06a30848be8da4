"""core/geometry: yaw, quaternion and matrix conversions agree with each other and MuJoCo."""
import math

import mujoco
import numpy as np
import pytest

from real2sim2real_ros.core import geometry as g


def test_yaw_round_trips_and_matches_mujoco():
    for yaw in np.linspace(-math.pi + 1e-9, math.pi - 1e-9, 37):
        q = g.yaw_quat(yaw)
        assert g.quat_yaw(q) == pytest.approx(yaw, abs=1e-12)
        rot = np.zeros(9)
        mujoco.mju_quat2Mat(rot, q)
        assert np.allclose(rot.reshape(3, 3), g.quat_xyzw_to_matrix([*q[1:], q[0]]), atol=1e-12)


def test_matrix_quaternion_round_trip_keeps_w_non_negative():
    rng = np.random.default_rng(3)
    for _ in range(500):
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        rot = g.quat_xyzw_to_matrix([*q[1:], q[0]])
        back = g.matrix_to_quat_wxyz(rot)
        assert back[0] >= 0 and np.allclose(back, q if q[0] >= 0 else -q, atol=1e-9)
        assert np.allclose(g.matrix_to_quat_xyzw(rot), [*back[1:], back[0]])


def test_wrap_and_bad_quaternions():
    assert g.wrap_angle(3 * math.pi / 2) == pytest.approx(-math.pi / 2)
    assert g.wrap_angle(math.pi) == pytest.approx(-math.pi)
    with pytest.raises(ValueError, match='no valid norm'):
        g.quat_xyzw_to_matrix([0, 0, 0, 0])
    with pytest.raises(ValueError, match='no valid norm'):
        g.quat_xyzw_to_matrix([float('nan'), 0, 0, 1])


def test_angle_gap_is_the_smallest_difference_modulo_the_period():
    import math

    from real2sim2real_ros.core.geometry import angle_gap
    assert math.isclose(angle_gap(0.1, -0.1), 0.2)
    assert math.isclose(angle_gap(math.pi - 0.05, -math.pi + 0.05), 0.1)
    assert math.isclose(angle_gap(0.3, 0.3 + math.pi, math.pi), 0.0, abs_tol=1e-12)
    assert math.isclose(angle_gap(1.2, 0.0, math.pi / 2), math.pi / 2 - 1.2)
    assert 0.0 <= angle_gap(7.0, -3.0, 1.0) <= 0.5
