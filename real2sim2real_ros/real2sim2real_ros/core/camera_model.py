"""Pinhole camera model: intrinsics, optical-frame extrinsics, depth <-> points.

Conventions: OpenCV/ROS pixel coordinates (pixel (u, v) centre at integer u, v), REP 103
optical frames (x right, y down, z forward), realsense-ros frame names.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .geometry import matrix_to_quat_wxyz

# MuJoCo cameras look along their -z with y up; the optical frame looks along +z with y down.
OPTICAL_TO_MUJOCO_CAMERA = np.diag([1.0, -1.0, -1.0])


def color_optical_frame(camera: str) -> str:
    """TF frame name of ``camera``'s colour optical frame."""
    return f'{camera}_color_optical_frame'


def depth_optical_frame(camera: str) -> str:
    """TF frame name of ``camera``'s depth optical frame."""
    return f'{camera}_depth_optical_frame'


@dataclass(frozen=True)
class Intrinsics:
    """Pinhole intrinsics: image size in pixels, focal lengths and principal point in pixels."""
    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float

    @property
    def K(self) -> np.ndarray:  # noqa: N802 - the standard name
        """The 3x3 camera matrix K in pixels."""
        return np.array([[self.fx, 0, self.cx], [0, self.fy, self.cy], [0, 0, 1.0]])

    def camera_info_fields(self) -> dict:
        """Fields of sensor_msgs/CameraInfo for an undistorted (rectified) image."""
        return {
            'width': self.width, 'height': self.height, 'distortion_model': 'plumb_bob',
            'd': [0.0] * 5,
            'k': [self.fx, 0.0, self.cx, 0.0, self.fy, self.cy, 0.0, 0.0, 1.0],
            'r': [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
            'p': [self.fx, 0.0, self.cx, 0.0, 0.0, self.fy, self.cy, 0.0, 0.0, 0.0, 1.0, 0.0],
        }

    def mujoco_camera_params(self, pixel_size: float = 1e-5) -> dict:
        """MjsCamera intrinsic fields reproducing these intrinsics in MuJoCo's renderer.

        MuJoCo puts the principal point in continuous image coordinates with the origin at
        the image centre and its sign flipped (measured: +1 px of principal_length moves
        the image content by -1 px); OpenCV puts pixel centres on integers, hence the 0.5.
        """
        return {
            'resolution': [self.width, self.height],
            'sensor_size': [self.width * pixel_size, self.height * pixel_size],
            'focal_length': [self.fx * pixel_size, self.fy * pixel_size],
            'principal_length': [(self.width / 2.0 - (self.cx + 0.5)) * pixel_size,
                                 (self.height / 2.0 - (self.cy + 0.5)) * pixel_size],
        }

    def project(self, points: np.ndarray) -> np.ndarray:
        """Optical-frame points (N, 3) -> pixel coordinates (N, 2)."""
        p = np.asarray(points, float)
        return np.column_stack([self.fx * p[:, 0] / p[:, 2] + self.cx,
                                self.fy * p[:, 1] / p[:, 2] + self.cy])


def depth_to_points(depth: np.ndarray, intr: Intrinsics, stride: int = 1) -> np.ndarray:
    """Back-project a depth image (metres; 0 or NaN = no data) to optical-frame points (N, 3)."""
    d = np.asarray(depth, dtype=np.float64)[::stride, ::stride]
    v, u = np.mgrid[0:intr.height:stride, 0:intr.width:stride]
    valid = np.isfinite(d) & (d > 0)
    z = d[valid]
    x = (u[valid] - intr.cx) * z / intr.fx
    y = (v[valid] - intr.cy) * z / intr.fy
    return np.column_stack([x, y, z])


def transform_points(points: np.ndarray, rotation: np.ndarray, translation) -> np.ndarray:
    """Apply x_world = R x + t to (N, 3) points."""
    return np.asarray(points) @ np.asarray(rotation).T + np.asarray(translation)


def mujoco_camera_quat(optical_rotation: np.ndarray) -> np.ndarray:
    """World quaternion (w, x, y, z) of the MuJoCo camera whose image is this optical frame."""
    return matrix_to_quat_wxyz(np.asarray(optical_rotation) @ OPTICAL_TO_MUJOCO_CAMERA)


def perturb_pose(rotation: np.ndarray, translation, trans_std: float, rot_std: float,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A pose with a random calibration error (translation m, rotation rad, both 1-sigma)."""
    t = np.asarray(translation, float) + rng.normal(0.0, trans_std, 3)
    axis_angle = rng.normal(0.0, rot_std, 3)
    angle = np.linalg.norm(axis_angle)
    if angle < 1e-12:
        return np.asarray(rotation, float), t
    k = axis_angle / angle
    kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    delta = np.eye(3) + np.sin(angle) * kx + (1 - np.cos(angle)) * kx @ kx
    return delta @ np.asarray(rotation, float), t
