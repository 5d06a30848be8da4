"""ROS messages of a cell's surface, shared by the emulated cell and the MuJoCo twin.

Contract: pure conversions, no node and no publishing.

* :func:`stamp` / :func:`seconds`: float seconds <-> builtin_interfaces/Time.
* :func:`trajectory_command_from_msg`: trajectory_msgs/JointTrajectory -> the ROS-free
  :class:`~real2sim2real_ros.core.joint_trajectory.JointTrajectoryCommand` (TrajectoryError
  when a field is given for some points only).
* :func:`image_msg`, :func:`camera_info_msg`: sensor_msgs images (rgb8, 32FC1, 16UC1) and
  camera info of a numpy array / ``core.camera_model.Intrinsics``.
* :func:`controller_state_msgs`: what ``<controller>/controller_state`` carries:
  control_msgs/JointTrajectoryControllerState when control_msgs is importable, else the
  ``reference`` and ``error`` sensor_msgs/JointState pair (efforts = accelerations).
* :func:`tracked_objects_msg`: real2sim2real_msgs/TrackedObjects of ``{id: (xyz, wxyz)}``.
"""
from __future__ import annotations

import math

import numpy as np
from builtin_interfaces.msg import Time as TimeMsg
from geometry_msgs.msg import Pose
from sensor_msgs.msg import CameraInfo, Image, JointState
from trajectory_msgs.msg import JointTrajectory

from real2sim2real_msgs.msg import TrackedObjects

from ..core.joint_trajectory import JointTrajectoryCommand, TrajectoryError

try:  # Only on machines with ros2_control's messages.
    from control_msgs.msg import JointTrajectoryControllerState
    from trajectory_msgs.msg import JointTrajectoryPoint
except ImportError:  # pragma: no cover - depends on the machine
    JointTrajectoryControllerState = None

_STATE_FIELDS = (('reference', 'reference_positions', 'reference_velocities'),
                 ('feedback', 'feedback_positions', 'feedback_velocities'),
                 ('error', 'error_positions', 'error_velocities'))


def stamp(t: float) -> TimeMsg:
    """builtin_interfaces/Time of ``t`` seconds (nanoseconds rounded, never 1e9)."""
    sec = math.floor(t)
    return TimeMsg(sec=int(sec), nanosec=min(int(round((t - sec) * 1e9)), 999_999_999))


def seconds(t) -> float:
    """Float seconds of a builtin_interfaces Time or Duration."""
    return t.sec + t.nanosec * 1e-9


def trajectory_command_from_msg(msg: JointTrajectory, start_time) -> JointTrajectoryCommand:
    """trajectory_msgs/JointTrajectory -> JointTrajectoryCommand (TrajectoryError if mixed)."""
    pts = msg.points
    n_j = len(msg.joint_names)
    times = np.array([seconds(p.time_from_start) for p in pts], float)

    def stacked(attr):
        lengths = [len(getattr(p, attr)) for p in pts]
        if not pts or all(n == 0 for n in lengths):
            return None
        for i, n in enumerate(lengths):
            if n != n_j:
                raise TrajectoryError(f'points[{i}].{attr} has {n} values for {n_j} joints '
                                      f'(give it for every point or for none)')
        return np.array([np.asarray(getattr(p, attr), float) for p in pts])

    pos = stacked('positions')
    if pts and pos is None:
        raise TrajectoryError('points have no positions')
    return JointTrajectoryCommand(list(msg.joint_names), times,
                                  pos if pos is not None else np.zeros((0, n_j)),
                                  stacked('velocities'), stacked('accelerations'), start_time)


def append_joint(msg: JointState, name: str, state) -> None:
    """Add joint ``name`` with its (position, velocity, effort) to a JointState."""
    msg.name.append(name)
    for values, x in zip((msg.position, msg.velocity, msg.effort), state, strict=True):
        values.append(float(x))


def image_msg(pixels: np.ndarray, encoding: str, width: int, height: int, time_stamp,
              frame_id: str) -> Image:
    """sensor_msgs/Image of (height, width[, channels]) ``pixels`` (little endian)."""
    arr = np.ascontiguousarray(pixels)
    channels = arr.shape[2] if arr.ndim == 3 else 1
    img = Image(height=height, width=width, encoding=encoding, is_bigendian=0,
                step=width * channels * arr.dtype.itemsize)
    img.header.stamp, img.header.frame_id = time_stamp, frame_id
    img.data = arr.tobytes()
    return img


def camera_info_msg(intrinsics, time_stamp, frame_id: str) -> CameraInfo:
    """sensor_msgs/CameraInfo of a ``core.camera_model.Intrinsics``."""
    info = CameraInfo(**intrinsics.camera_info_fields())
    info.header.stamp, info.header.frame_id = time_stamp, frame_id
    return info


def controller_state_msgs(time_stamp, joint_names, state: dict) -> list:
    """The controller_state message(s) of a ``controller_state()`` dict (see the module)."""
    names = list(joint_names)
    if JointTrajectoryControllerState is not None:
        cs = JointTrajectoryControllerState()
        cs.header.stamp = time_stamp
        cs.joint_names = names
        for field, pos, vel in _STATE_FIELDS:
            if hasattr(cs, field):
                setattr(cs, field, JointTrajectoryPoint(
                    positions=state[pos].tolist(), velocities=state[vel].tolist()))
        if hasattr(cs, 'speed_scaling_factor'):   # control_msgs >= 5.3
            cs.speed_scaling_factor = 1.0
        return [cs]
    ref = JointState(name=names, position=state['reference_positions'].tolist(),
                     velocity=state['reference_velocities'].tolist(),
                     effort=state['reference_accelerations'].tolist())
    err = JointState(name=names, position=state['error_positions'].tolist(),
                     velocity=state['error_velocities'].tolist())
    ref.header.stamp = err.header.stamp = time_stamp
    return [ref, err]


def tracked_objects_msg(poses: dict, time_stamp, frame_id: str) -> TrackedObjects:
    """TrackedObjects of ``{id: (xyz, quaternion wxyz)}`` (true poses: no points, no residual)."""
    msg = TrackedObjects()
    msg.header.stamp, msg.header.frame_id = time_stamp, frame_id
    for oid, (xyz, quat) in poses.items():
        pose = Pose()
        pose.position.x, pose.position.y, pose.position.z = map(float, xyz)
        o = pose.orientation
        o.w, o.x, o.y, o.z = map(float, quat)
        msg.ids.append(oid)
        msg.poses.append(pose)
        msg.num_points.append(0)
        msg.fit_residual.append(0.0)
    return msg
