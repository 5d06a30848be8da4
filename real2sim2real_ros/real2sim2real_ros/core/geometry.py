"""Rotations the package passes around: yaw about z, quaternions, rotation matrices.

One home for them (they were copied into a dozen modules). Conventions:

* quaternions are (w, x, y, z) (MuJoCo's order) unless a name says ``xyzw`` (ROS messages'
  order, geometry_msgs/Quaternion);
* yaw is the rotation about +z (REP 103: counter-clockwise seen from above), in radians;
  :func:`quat_yaw` of a tilted rotation is the yaw of its heading (the ZYX Euler yaw);
* angles wrap to [-pi, pi).

Matrix conversions use transforms3d (``transforms3d.quaternions``).
"""
from __future__ import annotations

import math

import numpy as np
from transforms3d import quaternions

__all__ = ['angle_gap', 'matrix_to_quat_wxyz', 'matrix_to_quat_xyzw', 'quat_msg_yaw',
           'quat_xyzw_to_matrix', 'quat_yaw', 'wrap_angle', 'yaw_quat']


def yaw_quat(yaw: float) -> np.ndarray:
    """Quaternion (w, x, y, z) of a rotation by ``yaw`` about z."""
    return np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])


def quat_yaw(quat) -> float:
    """Yaw (rad) of the quaternion (w, x, y, z)."""
    w, x, y, z = (float(v) for v in quat)
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def quat_msg_yaw(q) -> float:
    """Yaw (rad) of a geometry_msgs/Quaternion (fields x, y, z, w)."""
    return quat_yaw((q.w, q.x, q.y, q.z))


def wrap_angle(a: float) -> float:
    """``a`` wrapped to [-pi, pi)."""
    return float((a + np.pi) % (2 * np.pi) - np.pi)


def angle_gap(a: float, b: float, period: float = 2 * math.pi) -> float:
    """Smallest |a - b| modulo ``period`` (rad), in [0, period / 2]: e.g. period pi for a
    box's yaw, whose faces repeat every half turn."""
    d = (a - b) % period
    return float(min(d, period - d))


def quat_xyzw_to_matrix(q) -> np.ndarray:
    """3x3 rotation of the quaternion (x, y, z, w), normalised; ValueError without a norm."""
    x, y, z, w = (float(v) for v in q)
    n = math.sqrt(x * x + y * y + z * z + w * w)
    if not math.isfinite(n) or n < 1e-9:
        raise ValueError(f'quaternion {list(q)} has no valid norm')
    return quaternions.quat2mat(np.array([w, x, y, z]) / n)


def matrix_to_quat_wxyz(rot) -> np.ndarray:
    """Unit quaternion (w, x, y, z), w >= 0, of a 3x3 rotation matrix."""
    q = quaternions.mat2quat(np.asarray(rot, float))
    return -q if q[0] < 0 else q


def matrix_to_quat_xyzw(rot) -> np.ndarray:
    """Unit quaternion (x, y, z, w), w >= 0, of a 3x3 rotation matrix."""
    w, x, y, z = matrix_to_quat_wxyz(rot)
    return np.array([x, y, z, w])
