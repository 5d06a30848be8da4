"""Camera poses from a calibration file: fixed cameras and hand-eye (wrist) cameras.

The file (YAML) gives, per camera namespace, the pose of its colour OPTICAL frame (REP 103:
z forward, x right, y down)::

    cameras:
      camera:                     # fixed: pose in the robot base frame (= world, base at origin)
        xyz: [0.65, -0.55, 0.70]
        quat_xyzw: [...]          # or look_at: [x, y, z] (up = world z)
      wrist_camera:               # hand-eye: pose in `link`; world pose = FK(joint_states) * this
        link: tool0
        xyz: [0.0, 0.05, 0.03]
        quat_xyzw: [0, 0, 0, 1]

ROS-free. Errors raise ExtrinsicsError naming the camera and field.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from .capture_set import pose_to_matrix
from .geometry import quat_xyzw_to_matrix


class ExtrinsicsError(ValueError):
    """The calibration file is unusable; the message names the camera and field."""


@dataclass(frozen=True)
class CameraMount:
    """A camera's mount: its optical frame in the world, or on robot link ``link`` (4x4, m)."""
    name: str
    T_parent_camera: np.ndarray     # 4x4, optical frame in the parent (world or `link`)
    link: str | None = None         # None = fixed in the world

    @property
    def moves_with_robot(self) -> bool:
        """True when the camera rides on a robot link (its pose follows the joints)."""
        return self.link is not None

    def world_pose(self, link_pose: Callable[[str], np.ndarray] | None = None) -> np.ndarray:
        """T_world_camera; ``link_pose(link)`` gives the link's 4x4 world pose (from FK)."""
        if self.link is None:
            return self.T_parent_camera.copy()
        if link_pose is None:
            raise ExtrinsicsError(f'{self.name}: a hand-eye camera needs the robot\'s joint state')
        return np.asarray(link_pose(self.link), float) @ self.T_parent_camera


def fk_pose_matrix(position, quat_wxyz) -> np.ndarray:
    """RobotDescription.fk's (position, quaternion w, x, y, z) -> 4x4."""
    w, x, y, z = (float(v) for v in quat_wxyz)
    return pose_to_matrix(position, (x, y, z, w))


def _look_at(eye, target) -> np.ndarray:
    from .cell_spec import look_at_rotation
    return look_at_rotation(eye, target)


def parse_mount(name: str, data) -> CameraMount:
    """CameraMount from one ``cameras.<name>`` entry (xyz with quat_xyzw or look_at, optional link);
    ExtrinsicsError on a bad entry."""
    where = f'cameras.{name}'
    if not isinstance(data, dict):
        raise ExtrinsicsError(f'{where}: must be a mapping with xyz and quat_xyzw or look_at')
    unknown = set(data) - {'xyz', 'quat_xyzw', 'look_at', 'link'}
    if unknown:
        raise ExtrinsicsError(f'{where}: unknown field(s) {sorted(unknown)}')
    try:
        xyz = np.asarray(data['xyz'], float)
    except KeyError:
        raise ExtrinsicsError(f'{where}.xyz: required') from None
    except (TypeError, ValueError):
        raise ExtrinsicsError(f'{where}.xyz: must be 3 numbers') from None
    if xyz.shape != (3,) or not np.all(np.isfinite(xyz)):
        raise ExtrinsicsError(f'{where}.xyz: must be 3 finite numbers')
    if ('quat_xyzw' in data) == ('look_at' in data):
        raise ExtrinsicsError(f'{where}: give exactly one of quat_xyzw and look_at')
    try:
        if 'quat_xyzw' in data:
            q = np.asarray(data['quat_xyzw'], float)
            if q.shape != (4,):
                raise ValueError('must be 4 numbers')
            rot = quat_xyzw_to_matrix(q)
        else:
            if data.get('link'):
                raise ValueError('look_at is for fixed cameras; use quat_xyzw with link')
            target = np.asarray(data['look_at'], float)
            if target.shape != (3,):
                raise ValueError('look_at must be 3 numbers')
            rot = _look_at(xyz, target)
    except (TypeError, ValueError) as exc:
        raise ExtrinsicsError(f'{where}: {exc}') from None
    pose = np.eye(4)
    pose[:3, :3], pose[:3, 3] = rot, xyz
    link = data.get('link')
    if link is not None and (not isinstance(link, str) or not link):
        raise ExtrinsicsError(f'{where}.link: must be a link name')
    return CameraMount(name, pose, link)


def load_extrinsics(path: str | os.PathLike) -> dict[str, CameraMount]:
    """Camera mounts by camera label (the last name of the camera namespace)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ExtrinsicsError(f'cannot read {path}: {exc}') from None
    except yaml.YAMLError as exc:
        raise ExtrinsicsError(f'{path}: not valid YAML: {exc}') from None
    if not isinstance(data, dict) or not isinstance(data.get('cameras'), dict):
        raise ExtrinsicsError(f'{path}: needs a "cameras" mapping')
    try:
        return {str(n): parse_mount(str(n), d) for n, d in data['cameras'].items()}
    except ExtrinsicsError as exc:
        raise ExtrinsicsError(f'{path}: {exc}') from None
