"""camera_capture: RGB-D views of the cell -> a capture set (MCAP bag + manifest).

Sources (parameter ``source``):

* ``topics``: an existing driver (realsense2_camera) or a bag being replayed. Per camera
  namespace ``<cam>`` it subscribes to ``<cam>/<color_topic>`` (rgb8/bgr8),
  ``<cam>/<depth_topic>`` (32FC1 m or 16UC1 mm, registered to colour: realsense-ros users set
  ``depth_topic: aligned_depth_to_color/image_raw``) and ``<cam>/<info_topic>``, only while a
  capture goal runs (an idle node spends no CPU on 30 Hz images; the first frame of a goal
  then waits for the subscriptions to match).
* ``emulated``: the emulated cell, i.e. ``topics`` with its names (the defaults).
* ``realsense``: drives the first camera with pyrealsense2 (colour + depth aligned to colour,
  intrinsics from the device) and publishes the live streams under the realsense-ros names
  (``<cam>/color/image_raw``, ``<cam>/color/camera_info``, ``<cam>/depth/image_rect_raw``,
  ``<cam>/depth/camera_info``); no device -> every goal ends SOURCE_UNAVAILABLE.

Camera poses: ``extrinsics_file`` (core/camera_extrinsics.py: fixed poses, or hand-eye +
FK from ``joint_states`` and ``robot_description``) or, when empty, the latched
``<cam>/extrinsics`` PoseStamped the emulated cell (or a calibration node) publishes.

Action ``~/capture`` (real2sim2real_msgs/action/Capture): K views (goal ``num_views``, else
parameter ``num_views``, else one per camera; at most MAX_VIEWS = 10000, more is
INVALID_GOAL), assigned round-robin to the cameras; each view
averages ``frames_per_view`` depth frames received after the goal started, spaced at least
``view_interval`` s from the camera's previous view (a handheld sweep or a wrist camera
moved by the executor). Feedback views_done/views_total; cancel -> CANCELED.
Images use qos.IMAGES (reliable keep-last-10; ros/qos.py says why) or the
REP 2003 SensorDataQoS (``image_qos: sensor_data``).
Exit code 2 with one line on stderr for unusable parameters or files (ConfigurationError).
"""
from __future__ import annotations

import threading
import time
from collections import deque
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import String

from real2sim2real_msgs.action import Capture

from ..core import capture_set as cs
from ..core.camera_extrinsics import ExtrinsicsError, fk_pose_matrix, load_extrinsics
from ..core.camera_model import Intrinsics
from ..ros import qos
from ..ros.params import Param, Params, bind_checked
from ..ros.ros_main import ConfigurationError, run_node
from ..ros.subscriptions import subscribed

Code = cs.CaptureErrorCode
MAX_VIEWS = 10_000     # views per capture goal (and the num_views parameter)
SOURCES = ('topics', 'emulated', 'realsense')


PARAMETERS = (
    Param('source', 'emulated', 'topics | emulated | realsense', choices=SOURCES,
          read_only=True),
    Param('cameras', ['camera'], 'camera namespaces (string array)', read_only=True),
    Param('num_views', 0, 'views per capture; 0 = one per camera', lo=0, hi=MAX_VIEWS),
    Param('frames_per_view', 1, 'depth frames averaged per view', lo=1, hi=100,
          read_only=True),
    Param('view_interval', 0.0, 'min s between two views of one camera', lo=0.0, hi=60.0),
    Param('extrinsics_file', '', 'calibration YAML; empty = <cam>/extrinsics topic',
          read_only=True),
    Param('run_dir', '/tmp/r2s2r_runs', 'run directory for capture sets'),
    Param('timeout', 10.0, "s to wait for each view's frames (first: for topics to match)",
          lo=0.1, hi=600.0),
    Param('sync_tolerance', 0.005, 'max s between colour and depth stamps of one frame',
          lo=0.0, hi=1.0, read_only=True),
    Param('color_topic', 'color/image_raw', 'relative to <cam>', read_only=True),
    Param('depth_topic', 'depth/image_rect_raw',
          'relative to <cam>; must be registered to colour', read_only=True),
    Param('info_topic', 'color/camera_info', 'relative to <cam>', read_only=True),
    Param('image_qos', 'images', 'QoS of images (sub and realsense pub)',
          choices=('images', 'sensor_data'), read_only=True),
    Param('world_frame', 'world', 'frame of the camera poses', read_only=True),
    Param('realsense_serial', '', 'device serial; empty = first', read_only=True),
    Param('realsense_width', 640, 'px', lo=160, hi=1920, read_only=True),
    Param('realsense_height', 480, 'px', lo=120, hi=1080, read_only=True),
    Param('realsense_fps', 30, 'Hz', lo=1, hi=90, read_only=True),
)


def _bind_parameters(node) -> Params:
    """Declare PARAMETERS on ``node``; an unusable value is a ConfigurationError (exit 2)."""
    return bind_checked(node, PARAMETERS, 'camera_capture')


@dataclass
class _Frame:
    stamp_ns: int
    received: float          # monotonic s
    color: Image
    depth: Image


@dataclass
class _View:
    """Duck-typed CaptureView (the reconstruction package is not imported by this node)."""
    rgb: np.ndarray
    depth: np.ndarray
    intrinsics: Intrinsics | None
    T_world_camera: np.ndarray | None
    name: str = 'view'


def _ns(stamp) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


class _CameraStream:
    """One camera's synchronised colour+depth pairs, latest intrinsics and extrinsics."""

    def __init__(self, namespace: str, tolerance_ns: int, keep_frames: int):
        self.namespace = namespace.rstrip('/')
        self.label = cs.camera_label(namespace)
        self.tolerance_ns = tolerance_ns
        # Unpaired images wait here for their partner; a 640x480 pair is 2.1 MB, so keep few.
        self.colors: deque = deque(maxlen=5)
        self.depths: deque = deque(maxlen=5)
        self.frames: deque[_Frame] = deque(maxlen=keep_frames)
        self.info: CameraInfo | None = None
        self.poses: deque = deque(maxlen=200)     # (stamp_ns, 4x4)
        self.subscriptions: list = []             # colour, depth, info while a goal runs
        self.cond = threading.Condition()

    def on_color(self, msg: Image):
        self._add(msg, self.colors, self.depths, color_first=True)

    def on_depth(self, msg: Image):
        self._add(msg, self.depths, self.colors, color_first=False)

    def _add(self, msg, own: deque, other: deque, color_first: bool):
        t = _ns(msg.header.stamp)
        with self.cond:
            best = min(other, key=lambda m: abs(_ns(m.header.stamp) - t), default=None)
            if best is not None and abs(_ns(best.header.stamp) - t) <= self.tolerance_ns:
                other.remove(best)
                color, depth = (msg, best) if color_first else (best, msg)
                self.frames.append(_Frame(max(t, _ns(best.header.stamp)), time.monotonic(),
                                          color, depth))
                self.cond.notify_all()
            else:
                own.append(msg)

    def on_info(self, msg: CameraInfo):
        with self.cond:
            self.info = msg
            self.cond.notify_all()

    def on_pose(self, msg: PoseStamped):
        p, o = msg.pose.position, msg.pose.orientation
        try:
            pose = cs.pose_to_matrix((p.x, p.y, p.z), (o.x, o.y, o.z, o.w))
        except ValueError:
            return
        with self.cond:
            self.poses.append((_ns(msg.header.stamp), pose))
            self.cond.notify_all()

    def pose_at(self, stamp_ns: int) -> np.ndarray | None:
        with self.cond:
            items = list(self.poses)
        if not items:
            return None
        before = [pose for s, pose in items if s <= stamp_ns]
        return (before[-1] if before else items[0][1]).copy()


class CameraCaptureNode(Node):

    def __init__(self):
        super().__init__('camera_capture')
        # The tunables (num_views, view_interval, run_dir, timeout) may change at run time
        # (ros2 param set; rclpy checks ranges and refuses the read-only ones): the next goal
        # uses the new values.
        self.p = _bind_parameters(self)
        self.streams = self._make_streams()
        self.mounts = self._load_mounts()
        self._robot = None
        self._joint_states: deque = deque(maxlen=500)
        self._robot_error = ''
        self._busy = threading.Lock()
        self.source_error = ''
        self._image_qos = qos.by_name(self.p.image_qos)
        group = ReentrantCallbackGroup()
        self._subscribe_extrinsics(group)
        # Always: hand-eye mounts need them for poses, and every capture set records the arm
        # (scene reconstruction masks it out with its URDF at these joint positions).
        self._urdf = ''
        self._state_group = group  # joint_states and images only while capturing
        self.create_subscription(String, 'robot_description', self._on_description,
                                 qos.LATCHED, callback_group=group)
        self.realsense = None
        if self.p.source == 'realsense':
            self._start_realsense(self._image_qos)
        self._action = ActionServer(
            self, Capture, '~/capture', execute_callback=self._execute,
            goal_callback=self._on_goal, cancel_callback=lambda _g: CancelResponse.ACCEPT,
            callback_group=MutuallyExclusiveCallbackGroup())
        self.get_logger().info(
            f'camera_capture ready: source={self.p.source} '
            f'cameras={[s.label for s in self.streams]} '
            f'poses={"file" if self.mounts else "<cam>/extrinsics"} run_dir={self.p.run_dir}')

    def _make_streams(self) -> list[_CameraStream]:
        if not self.p.cameras:
            raise ConfigurationError('cameras is empty; give at least one camera namespace')
        tol = int(self.p.sync_tolerance * 1e9)
        try:
            streams = [_CameraStream(ns, tol, self.p.frames_per_view + 3)
                       for ns in self.p.cameras]
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        labels = [s.label for s in streams]
        if len(set(labels)) != len(labels):
            raise ConfigurationError(
                f'cameras {list(self.p.cameras)} do not have distinct last names')
        return streams

    def _load_mounts(self) -> dict:
        if not self.p.extrinsics_file:
            return {}
        try:
            mounts = load_extrinsics(self.p.extrinsics_file)
        except ExtrinsicsError as exc:
            raise ConfigurationError(str(exc)) from None
        if missing := [s.label for s in self.streams if s.label not in mounts]:
            raise ConfigurationError(f'{self.p.extrinsics_file} has no pose for {missing}')
        return mounts

    def _subscribe_extrinsics(self, group):
        """The latched per-camera poses, unless extrinsics_file gives them."""
        if self.mounts:
            return
        for s in self.streams:
            self.create_subscription(PoseStamped, f'{s.namespace}/extrinsics', s.on_pose,
                                     qos.LATCHED, callback_group=group)

    def _subscribe_images(self, stack: ExitStack):
        """Colour, depth and camera_info of every camera, for as long as ``stack`` is open
        (one goal); the realsense source feeds its streams itself."""
        if self.p.source == 'realsense':
            return
        for s in self.streams:
            with s.cond:
                s.colors.clear()
                s.depths.clear()
            s.subscriptions = [
                stack.enter_context(subscribed(self, msg_type, f'{s.namespace}/{topic}',
                                               callback, self._image_qos, self._state_group))
                for msg_type, topic, callback in ((Image, self.p.color_topic, s.on_color),
                                                  (Image, self.p.depth_topic, s.on_depth),
                                                  (CameraInfo, self.p.info_topic, s.on_info))]
            stack.callback(s.subscriptions.clear)

    # ------------------------------------------------------------------ robot (hand-eye)
    def _on_joint_state(self, msg: JointState):
        if len(msg.name) != len(msg.position):
            return
        self._joint_states.append((_ns(msg.header.stamp), dict(zip(msg.name, msg.position,
                                                                   strict=True))))

    def _on_description(self, msg: String):
        self._urdf = msg.data
        if not any(m.moves_with_robot for m in self.mounts.values()):
            return              # only hand-eye poses need the kinematics: skip the compile
        try:
            from ..core.robot_description import load_robot
            self._robot = load_robot(msg.data)
        except Exception as exc:  # noqa: BLE001 - any URDF problem: report at capture time
            self._robot_error = f'robot_description unusable: {exc}'

    def _joint_snapshot(self, stamp_ns: int):
        """The /joint_states message nearest ``stamp_ns`` (None when none was received)."""
        states = list(self._joint_states)
        if not states:
            return None
        t, by_name = min(states, key=lambda s: abs(s[0] - stamp_ns))
        return cs.JointSnapshot(t, tuple(by_name), tuple(float(v) for v in by_name.values()))

    def _link_pose_at(self, stamp_ns: int):
        if self._robot is None:
            raise ExtrinsicsError(self._robot_error or 'no robot_description received')
        states = list(self._joint_states)
        if not states:
            raise ExtrinsicsError('no joint_states received')
        _, by_name = min(states, key=lambda s: abs(s[0] - stamp_ns))
        try:
            q = [by_name[n] for n in self._robot.joint_names]
        except KeyError as exc:
            raise ExtrinsicsError(f'joint_states lacks joint {exc}') from None
        return lambda link: fk_pose_matrix(*self._robot.fk(q, link))

    def _pose(self, stream: _CameraStream, stamp_ns: int) -> np.ndarray | None:
        mount = self.mounts.get(stream.label)
        if mount is None:
            return stream.pose_at(stamp_ns)
        link_pose = self._link_pose_at(stamp_ns) if mount.moves_with_robot else None
        return mount.world_pose(link_pose)

    # ------------------------------------------------------------------ realsense
    def _start_realsense(self, image_qos):
        from .camera_realsense import RealsenseStream, RealsenseUnavailable
        stream = self.streams[0]
        if len(self.streams) > 1:
            self.get_logger().warn('realsense source drives the first camera only; the others '
                                   'are ignored')
        try:
            self.realsense = RealsenseStream(
                self, stream, image_qos, serial=self.p.realsense_serial,
                width=self.p.realsense_width, height=self.p.realsense_height,
                fps=self.p.realsense_fps)
        except RealsenseUnavailable as exc:
            self.source_error = str(exc)
            self.get_logger().error(f'realsense source unavailable: {exc}')

    # ------------------------------------------------------------------ action
    def _on_goal(self, _goal):
        return GoalResponse.REJECT if self._busy.locked() else GoalResponse.ACCEPT

    def _execute(self, goal_handle):
        self._joint_states.clear()
        with self._busy, ExitStack() as stack:
            stack.enter_context(subscribed(self, JointState, 'joint_states',
                                           self._on_joint_state, qos.STATE, self._state_group))
            self._subscribe_images(stack)
            deadline = time.monotonic() + 2.0  # discovery of the fresh subscription
            while not self._joint_states and time.monotonic() < deadline:
                time.sleep(0.02)
            code, msg, out = self._capture(goal_handle)
        result = Capture.Result(error_code=int(code), error_msg=msg)
        if out is not None:
            result.capture_set = out
        if code == Code.NONE:
            goal_handle.succeed()
        elif code == Code.CANCELED:
            goal_handle.canceled()
        else:
            self.get_logger().error(f'capture failed: {code.name}: {msg}')
            goal_handle.abort()
        return result

    def _capture(self, goal_handle):
        if self.source_error:
            return Code.SOURCE_UNAVAILABLE, self.source_error, None
        req = goal_handle.request
        if int(req.num_views) > MAX_VIEWS:
            return (Code.INVALID_GOAL, f'num_views {req.num_views} is more than the {MAX_VIEWS} '
                    f'allowed (a negative count sent as uint32 wraps to 4294967295)', None)
        k = int(req.num_views) or self.p.num_views or len(self.streams)
        run_dir = req.run_dir or self.p.run_dir
        start = time.monotonic()
        used = {s.label: (start, None) for s in self.streams}   # (received after, stamp)
        views, records = [], []
        for i in range(k):
            stream = self.streams[i % len(self.streams)]
            try:
                frames = self._wait_frames(goal_handle, stream, *used[stream.label])
                self._wait_info_and_pose(goal_handle, stream)
                view, record = self._make_view(stream, frames)
            except _CaptureFailed as exc:
                return exc.code, exc.message, None
            used[stream.label] = (frames[-1].received, frames[-1].stamp_ns)
            views.append(view)
            records.append(record)
            fb = Capture.Feedback(views_done=i + 1, views_total=k)
            goal_handle.publish_feedback(fb)
        try:
            folder = cs.new_capture_folder(run_dir)
            meta = {'source': self.p.source, 'cameras': [s.label for s in self.streams],
                    'frames_per_view': self.p.frames_per_view, 'num_views': k,
                    'view_interval': self.p.view_interval,
                    'poses_from': self.p.extrinsics_file or '<cam>/extrinsics'}
            snapshots = [self._joint_snapshot(r.stamp_ns) for r in records]
            meta['robot_recorded'] = {'joint_states': sum(s is not None for s in snapshots),
                                      'robot_description': bool(self._urdf)}
            bag, manifest = cs.write_capture_set(
                folder, views, records, meta,
                joint_states=snapshots if any(snapshots) else None,
                robot_description=self._urdf)
        except cs.CaptureSetError as exc:
            return exc.code, exc.message, None
        except OSError as exc:
            return Code.WRITE_FAILED, f'{run_dir}: {exc}', None
        from real2sim2real_msgs.msg import CaptureSet
        out = CaptureSet(bag_path=str(bag), manifest_path=str(manifest), num_views=k,
                         camera_frames=[r.frame_id for r in records])
        out.header.stamp = self.get_clock().now().to_msg()
        out.header.frame_id = self.p.world_frame
        self.get_logger().info(f'captured {k} views in {time.monotonic() - start:.2f} s: '
                               f'{manifest}')
        return Code.NONE, '', out

    def _wait_frames(self, goal_handle, stream: _CameraStream, after: float,
                     last_stamp: int | None) -> list[_Frame]:
        n = self.p.frames_per_view
        gap = int(self.p.view_interval * 1e9)
        if last_stamp is None:
            self._wait_matched(goal_handle, stream)
        deadline = time.monotonic() + self.p.timeout
        while True:
            with stream.cond:
                fresh = [f for f in stream.frames if f.received > after
                         and (last_stamp is None or f.stamp_ns > last_stamp)]
                if fresh and last_stamp is not None and gap:
                    fresh = [f for f in fresh if f.stamp_ns >= last_stamp + gap]
                if len(fresh) >= n:
                    return fresh[:n]
                remaining = deadline - time.monotonic()
                if goal_handle.is_cancel_requested:
                    raise _CaptureFailed(Code.CANCELED, 'canceled')
                if remaining <= 0 or not self.context.ok():
                    break
                stream.cond.wait(min(remaining, 0.1))
        if self.source_error:
            raise _CaptureFailed(Code.SOURCE_UNAVAILABLE, self.source_error)
        base, p = stream.namespace, self.p
        raise _CaptureFailed(Code.NO_FRAMES, (
            f'{stream.label}: {len(fresh)}/{n} synchronised colour+depth frames within '
            f'{p.timeout:.1f} s on {base}/{p.color_topic} and {base}/{p.depth_topic} '
            f'(stamps within {p.sync_tolerance} s)'))

    def _wait_matched(self, goal_handle, stream: _CameraStream):
        """Before a camera's first view, wait (up to ``timeout``) for the goal's new
        subscriptions to match a publisher: discovery under load must not eat the view's
        own ``timeout``. A topic nobody publishes is NO_FRAMES, named."""
        deadline = time.monotonic() + self.p.timeout
        while missing := [s.topic_name for s in stream.subscriptions
                          if s.get_publisher_count() == 0]:
            if goal_handle.is_cancel_requested:
                raise _CaptureFailed(Code.CANCELED, 'canceled')
            if time.monotonic() >= deadline or not self.context.ok():
                raise _CaptureFailed(Code.NO_FRAMES, (
                    f'{stream.label}: no publisher on {", ".join(missing)} within '
                    f'{self.p.timeout:.1f} s (is the camera driver running?)'))
            time.sleep(0.02)

    def _wait_info_and_pose(self, goal_handle, stream: _CameraStream):
        """Topics are not ordered across readers: a frame can complete before its CameraInfo
        or the latched extrinsics arrive. Wait for them (up to ``timeout``); _make_view then
        names what is still missing."""
        deadline = time.monotonic() + self.p.timeout
        with stream.cond:
            while (stream.info is None or (not self.mounts and not stream.poses)) \
                    and time.monotonic() < deadline and not goal_handle.is_cancel_requested:
                stream.cond.wait(0.1)

    def _make_view(self, stream: _CameraStream, frames: list[_Frame]):
        last = frames[-1]
        info = stream.info
        intr = None if info is None else cs.intrinsics_from_camera_info(
            info.k, info.width, info.height, factory=Intrinsics)
        if intr is None:
            raise _CaptureFailed(Code.MISSING_INTRINSICS, (
                f'{stream.label}: no CameraInfo with a valid K on '
                f'{stream.namespace}/{self.p.info_topic}'))
        try:
            depths = [cs.depth_to_metres(f.depth.data, f.depth.encoding, f.depth.height,
                                         f.depth.width) for f in frames]
            rgb = cs.rgb_from_image(last.color.data, last.color.encoding, last.color.height,
                                    last.color.width)
        except ValueError as exc:
            raise _CaptureFailed(Code.NO_FRAMES, f'{stream.label}: {exc}') from None
        depth = depths[0] if len(depths) == 1 else cs.average_depth(depths)
        try:
            pose = self._pose(stream, last.stamp_ns)
        except ExtrinsicsError as exc:
            raise _CaptureFailed(Code.MISSING_POSE, f'{stream.label}: {exc}') from None
        if pose is None:
            raise _CaptureFailed(Code.MISSING_POSE, (
                f'{stream.label}: no pose: nothing on {stream.namespace}/extrinsics and no '
                f'extrinsics_file'))
        view = _View(rgb, depth, intr, pose, name=f'{stream.label}@{last.stamp_ns}')
        return view, cs.ViewRecord(stream.label, last.stamp_ns, last.color.header.frame_id)

    def close(self):
        if self.realsense is not None:
            self.realsense.stop()


class _CaptureFailed(Exception):
    def __init__(self, code, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def main(args=None) -> int:
    return run_node(CameraCaptureNode, args=args)


if __name__ == '__main__':
    raise SystemExit(main())
