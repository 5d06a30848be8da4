"""One RGB-D view of the cell, as the capture set stores it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import ErrorCode, ReconstructionError


@dataclass(frozen=True)
class CameraIntrinsics:
    """Pinhole intrinsics of a rectified image (pixel centres on integers, OpenCV/ROS)."""
    fx: float
    fy: float
    cx: float
    cy: float
    width: int
    height: int


@dataclass
class CaptureView:
    """rgb: uint8 HxWx3; depth: float32 metres, 0 or NaN = hole; intrinsics may be None when
    the capture lacked a CameraInfo; T_world_camera: 4x4 pose of the REP 103 OPTICAL frame
    (z forward, x right, y down) in the world frame."""
    rgb: np.ndarray | None
    depth: np.ndarray
    intrinsics: CameraIntrinsics | None
    T_world_camera: np.ndarray
    name: str = 'view'

    def validate(self, index: int = 0) -> None:
        """Raise ReconstructionError naming the view and the field that is wrong."""
        where = f'view {index} ({self.name})'
        intr = self.intrinsics
        if intr is None:
            raise ReconstructionError(ErrorCode.MISSING_INTRINSICS,
                                      f'{where}: no camera intrinsics (CameraInfo missing)')
        values = (intr.fx, intr.fy, intr.width, intr.height)
        if not all(np.isfinite(v) and v > 0 for v in values) or not (
                np.isfinite(intr.cx) and np.isfinite(intr.cy)):
            raise ReconstructionError(ErrorCode.MISSING_INTRINSICS,
                                      f'{where}: intrinsics fx={intr.fx} fy={intr.fy} '
                                      f'w={intr.width} h={intr.height} must be finite and > 0')
        depth = np.asarray(self.depth)
        if depth.ndim != 2 or depth.shape != (intr.height, intr.width):
            raise ReconstructionError(ErrorCode.INVALID_CAPTURE,
                                      f'{where}: depth shape {depth.shape} does not match the '
                                      f'intrinsics {intr.height}x{intr.width}')
        if not np.issubdtype(depth.dtype, np.floating):
            raise ReconstructionError(ErrorCode.INVALID_CAPTURE,
                                      f'{where}: depth must be float metres, got {depth.dtype}')
        if self.rgb is not None and np.asarray(self.rgb).shape[:2] != depth.shape:
            raise ReconstructionError(ErrorCode.INVALID_CAPTURE,
                                      f'{where}: rgb shape {np.asarray(self.rgb).shape} does '
                                      f'not match depth {depth.shape}')
        pose = np.asarray(self.T_world_camera, float)
        if pose.shape != (4, 4) or not np.all(np.isfinite(pose)):
            raise ReconstructionError(ErrorCode.INVALID_CAPTURE,
                                      f'{where}: T_world_camera must be a finite 4x4 matrix')
        rot = pose[:3, :3]
        if (np.abs(rot @ rot.T - np.eye(3)).max() > 1e-4 or np.linalg.det(rot) < 0
                or np.abs(pose[3] - [0, 0, 0, 1]).max() > 1e-9):
            raise ReconstructionError(ErrorCode.INVALID_CAPTURE,
                                      f'{where}: T_world_camera is not a rigid transform')

    def valid_depth_mask(self) -> np.ndarray:
        """True where the depth is finite and positive."""
        d = np.asarray(self.depth)
        return np.isfinite(d) & (d > 0)

    def world_points(self, stride: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """(world points (N, 3), pixel coordinates (N, 2) as u, v) of valid depth pixels."""
        intr = self.intrinsics
        d = np.asarray(self.depth, np.float64)[::stride, ::stride]
        v, u = np.mgrid[0:intr.height:stride, 0:intr.width:stride]
        ok = np.isfinite(d) & (d > 0)
        z = d[ok]
        pts = np.column_stack([(u[ok] - intr.cx) * z / intr.fx, (v[ok] - intr.cy) * z / intr.fy,
                               z])
        pose = np.asarray(self.T_world_camera, float)
        return pts @ pose[:3, :3].T + pose[:3, 3], np.column_stack([u[ok], v[ok]])


def pose_matrix(rotation, translation) -> np.ndarray:
    """4x4 homogeneous transform from a 3x3 ``rotation`` and a ``translation`` (m)."""
    out = np.eye(4)
    out[:3, :3] = rotation
    out[:3, 3] = translation
    return out
