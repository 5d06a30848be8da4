"""object_tracker: object poses from the depth stream (core/object_tracking.py).

Known objects (id, shape, extents) and the table height come from the latched ``scene`` topic
(real2sim2real_msgs/Scene, what scene_reconstruction publishes; box and cylinder objects are
tracked, mesh objects are skipped) or, without reconstruction, from the parameters
``object_ids`` / ``object_shapes`` / ``object_extents`` / ``object_poses`` / ``table_height``.
A scene replaces the parameter objects when ``use_scene`` is true (the newest scene wins).

Per camera namespace ``<cam>`` in ``cameras`` (subscribed only once objects are known):

* ``<cam>/<depth_topic>`` (sensor_msgs/Image 32FC1 m or 16UC1 mm; default
  ``depth/image_rect_raw``, the emulated cell's; with realsense-ros use
  ``aligned_depth_to_color/image_raw`` and ``info_topic: color/camera_info``)
* ``<cam>/<info_topic>`` (sensor_msgs/CameraInfo, default ``depth/camera_info``): K
* ``<cam>/extrinsics`` (geometry_msgs/PoseStamped, latched): the depth image's optical frame
  in ``world_frame`` (the emulated cell's, or a calibration node's)

With ``robot_mask`` the arm is cut out of the points: its URDF from the latched
``robot_description`` and forward kinematics at the ``joint_states`` sample nearest each depth
frame (a bare helper node takes the 100 Hz stream, see ros/state_listener.py).

Publishes ``tracked_objects`` (real2sim2real_msgs/TrackedObjects, qos.STATE) for every
processed depth frame: header stamp = the depth image's, frame ``world_frame``; one entry per
object found in that frame (an object not found is left out, never invented; the reason is
logged at debug level). Each camera is tracked on its own and processed at most ``max_rate``
times per second, and (``lazy``) only while someone subscribes to ``tracked_objects``.
Service ``~/reset`` (std_srvs/Trigger) forgets the history (the priors go back to the scene's
or parameters' poses).

Bad input (no scene yet, an unknown encoding, no camera info or extrinsics) is a throttled
warning; the node keeps running. Malformed object parameters: one line, exit code 2.
"""
from __future__ import annotations

import math
import threading
import time
from collections import deque

import numpy as np
from geometry_msgs.msg import Point, Pose, PoseStamped, Quaternion
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from real2sim2real_msgs.msg import Scene, TrackedObjects

from ..core import object_tracking as ot
from ..core.geometry import quat_msg_yaw, quat_xyzw_to_matrix
from ..ros import qos
from ..ros.params import Param, Params, bind_checked
from ..ros.ros_main import ConfigurationError, run_node

NODE_NAME = 'object_tracker'
STRINGS, DOUBLES = Parameter.Type.STRING_ARRAY, Parameter.Type.DOUBLE_ARRAY
PARAMETERS = (
    Param('cameras', ['camera'], 'camera namespaces (string array)', read_only=True),
    Param('depth_topic', 'depth/image_rect_raw', 'relative to <cam>: 32FC1 m or 16UC1 mm',
          read_only=True),
    Param('info_topic', 'depth/camera_info',
          "relative to <cam>: the depth image's intrinsics", read_only=True),
    Param('image_qos', 'latest_images',
          'QoS of the depth and camera_info subscriptions (latest_images: reliable '
          'keep-last-1, the newest frame; images: keep-last-10, lags when the node falls '
          'behind)', choices=('latest_images', 'images', 'sensor_data'), read_only=True),
    Param('lazy', True, 'track only while tracked_objects has subscribers (the depth stream '
          'stays subscribed, so the first pose follows within a frame)', read_only=True),
    Param('max_rate', 5.0, 'Hz: most depth frames processed per camera and second (the rest '
          'are dropped)', lo=0.1, hi=100.0),
    Param('world_frame', 'world', 'frame of the extrinsics, the scene and the published poses',
          read_only=True),
    Param('use_scene', True, 'objects from the latched scene topic (replace the parameter '
          'objects)', read_only=True),
    # Typed, unset defaults: rclpy would type an empty list default as bytes.
    Param('object_ids', STRINGS, 'objects to track without a scene', read_only=True,
          type_='string_array'),
    Param('object_shapes', STRINGS, 'box or cylinder per object_ids entry; unset = all boxes',
          read_only=True, type_='string_array'),
    Param('object_extents', DOUBLES, 'm, x y z per object_ids entry (cylinder: diameter '
          'diameter height)', read_only=True, type_='double_array'),
    Param('object_poses', DOUBLES, 'optional x y yaw (m, rad) per object_ids entry: first '
          'guess and yaw reference', read_only=True, type_='double_array'),
    Param('table_height', 0.0, 'm, table top z in world_frame for the parameter objects',
          lo=-10.0, hi=10.0, read_only=True),
    Param('robot_mask', True, 'cut the arm out (robot_description + joint_states)',
          read_only=True),
    Param('robot_mask_margin', 0.015, "m added around the arm's geoms", lo=0.0, hi=0.1,
          read_only=True),
    Param('stride', 1, 'pixel subsampling of the depth image (2: 4x fewer points)', lo=1, hi=8,
          read_only=True),
    Param('noise_coefficient', 0.0042, '1/m: depth noise sigma = c z^2 (D435 at subpixel '
          '0.08: 0.0042)', lo=0.0, hi=0.1, read_only=True),
    Param('min_points', 40, 'depth points an object needs to be reported', lo=5, hi=100000,
          read_only=True),
    Param('max_jump', 0.25, 'm an object may move between two frames and keep its identity '
          'from proximity', lo=0.0, hi=5.0, read_only=True),
)
def objects_from_scene(scene: Scene):
    """(tracked object models, skipped ids) of a Scene message."""
    models, skipped = [], []
    for o in scene.objects:
        if o.shape not in ot.SHAPES:
            skipped.append(o.id)
            continue
        models.append(ot.TrackedObjectModel(
            o.id, (o.extents.x, o.extents.y, o.extents.z), o.shape,
            (o.pose.position.x, o.pose.position.y), quat_msg_yaw(o.pose.orientation)))
    return models, skipped


def depth_from_image(msg: Image) -> np.ndarray:
    """sensor_msgs/Image -> (H, W) float32 metres or uint16 millimetres (a copy)."""
    return ot.depth_from_buffer(msg.data, msg.encoding, msg.height, msg.width, msg.step,
                                bool(msg.is_bigendian))


def _ns(stamp) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


class _Camera:
    """One camera's latest intrinsics and pose, its tracker and rate limit."""

    def __init__(self, namespace: str):
        self.namespace = namespace.rstrip('/')
        self.K: np.ndarray | None = None
        self.size: tuple[int, int] | None = None
        self.T: np.ndarray | None = None
        self.tracker: ot.ObjectTracker | None = None
        self.reset_pending = False            # ~/reset: applied before the next frame
        self.waiting_since = math.inf         # monotonic s: frames without info / pose
        self.last = -math.inf                 # monotonic s of the last processed frame
        self.group = MutuallyExclusiveCallbackGroup()   # frames of one camera in order
        self.subs = []


def _bind_parameters(node) -> Params:
    """Declare PARAMETERS on ``node``; an unusable value is a ConfigurationError (exit 2)."""
    return bind_checked(node, PARAMETERS, NODE_NAME, prefix='')


class ObjectTrackerNode(Node):

    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        self.p = _bind_parameters(self)
        try:
            param_objects = ot.objects_from_parameters(
                self.p.object_ids or [], self.p.object_shapes or [],
                self.p.object_extents or [], self.p.object_poses or [])
        except ValueError as exc:
            raise ConfigurationError(str(exc), NODE_NAME) from None
        if not self.p.cameras:
            raise ConfigurationError('cameras is empty; give at least one camera namespace',
                                     NODE_NAME)
        self._lock = threading.Lock()
        self._objects: list[ot.TrackedObjectModel] = []
        self._table_height = 0.0
        self._source = ''
        self._cams = [_Camera(ns) for ns in self.p.cameras]
        self._warned: dict[str, float] = {}
        self._group = ReentrantCallbackGroup()
        self._image_qos = qos.by_name(self.p.image_qos)
        self.pub = self.create_publisher(TrackedObjects, 'tracked_objects', qos.STATE)
        self.create_service(Trigger, '~/reset', self._on_reset, callback_group=self._group)
        self._subscribe_inputs()
        if param_objects:
            self._set_objects(param_objects, self.p.table_height, 'parameters')
        self.create_timer(5.0, self._check_objects, callback_group=self._group)
        self.get_logger().info(
            f'object_tracker ready: cameras {[c.namespace for c in self._cams]}, objects from '
            f'{self._source or ("the scene topic" if self.p.use_scene else "nowhere")}, at '
            f'most {self.p.max_rate:g} Hz per camera, robot mask '
            f'{"on" if self.p.robot_mask else "off"}')

    def _subscribe_inputs(self):
        """Extrinsics, the robot description and the scene (all latched) from the start."""
        for cam in self._cams:
            self.create_subscription(PoseStamped, f'{cam.namespace}/extrinsics',
                                     lambda m, c=cam: self._on_extrinsics(c, m), qos.LATCHED,
                                     callback_group=self._group)
        # Robot mask: URDF (latched) now, joint states once objects are known.
        self._masker: ot.RobotGeomMask | None = None
        self._joint_states: deque = deque(maxlen=300)
        self._state_listener = None
        if self.p.robot_mask:
            self.create_subscription(String, 'robot_description', self._on_description,
                                     qos.LATCHED, callback_group=self._group)
        if self.p.use_scene:
            self.create_subscription(Scene, 'scene', self._on_scene, qos.LATCHED,
                                     callback_group=self._group)

    # ------------------------------------------------------------------ objects
    def _tracker_config(self) -> ot.TrackerConfig:
        return ot.TrackerConfig(stride=self.p.stride,
                                noise_coefficient=self.p.noise_coefficient,
                                min_points=self.p.min_points, max_jump=self.p.max_jump)

    def _set_objects(self, objects, table_height: float, source: str):
        with self._lock:
            self._objects = list(objects)
            self._table_height = float(table_height)
            self._source = source
            for cam in self._cams:
                cam.tracker = ot.ObjectTracker(self._objects, self._table_height,
                                               self._tracker_config()) if objects else None
            if objects:
                self._subscribe_streams()
        self.get_logger().info(
            f'tracking {[o.id for o in objects]} on a table at z = {table_height:.4f} m '
            f'(from {source})')

    def _check_objects(self):
        if not self._objects:
            self._warn('objects', 'nothing to track yet: waiting for a scene on '
                       f'{self.resolve_topic_name("scene")}' if self.p.use_scene else
                       'nothing to track: object_ids is empty and use_scene is false', 30.0)

    def _on_scene(self, scene: Scene):
        if scene.header.frame_id and scene.header.frame_id != self.p.world_frame:
            self._warn('frame', f'scene is in {scene.header.frame_id!r}, not world_frame '
                       f'{self.p.world_frame!r}: ignored')
            return
        try:
            models, skipped = objects_from_scene(scene)
        except ValueError as exc:
            self._warn('scene', f'unusable scene: {exc}')
            return
        if skipped:
            self.get_logger().warn(f'not tracking {skipped}: only boxes and cylinders')
        if not models:
            self._warn('scene', 'the scene has no box or cylinder to track')
            return
        self._set_objects(models, scene.table_height, f'scene {scene.artifact_dir or "topic"}')

    def _subscribe_streams(self):
        """Depth, camera_info (and joint states) only once there is something to track."""
        for cam in self._cams:
            if cam.subs:
                continue
            base = cam.namespace
            cam.subs = [
                self.create_subscription(Image, f'{base}/{self.p.depth_topic}',
                                         lambda m, c=cam: self._on_depth(c, m),
                                         self._image_qos, callback_group=cam.group),
                self.create_subscription(CameraInfo, f'{base}/{self.p.info_topic}',
                                         lambda m, c=cam: self._on_info(c, m),
                                         self._image_qos, callback_group=self._group)]
        if self.p.robot_mask and self._state_listener is None:
            from ..ros.state_listener import StateListener
            self._state_listener = StateListener(self, JointState, 'joint_states',
                                                 self._on_joint_state, qos.STATE)

    # ------------------------------------------------------------------ camera inputs
    def _on_extrinsics(self, cam: _Camera, msg: PoseStamped):
        if msg.header.frame_id and msg.header.frame_id != self.p.world_frame:
            self._warn(f'ext{cam.namespace}', f'{cam.namespace}/extrinsics is in '
                       f'{msg.header.frame_id!r}, not {self.p.world_frame!r}: ignored')
            return
        p, o = msg.pose.position, msg.pose.orientation
        try:
            rot = quat_xyzw_to_matrix((o.x, o.y, o.z, o.w))
        except ValueError:
            self._warn(f'ext{cam.namespace}', f'{cam.namespace}/extrinsics has no valid '
                       'orientation')
            return
        T = np.eye(4)
        T[:3, :3] = rot
        T[:3, 3] = [p.x, p.y, p.z]
        cam.T = T

    def _on_info(self, cam: _Camera, msg: CameraInfo):
        k = np.asarray(msg.k, float).reshape(3, 3)
        if not np.all(np.isfinite(k)) or k[0, 0] <= 0 or k[1, 1] <= 0:
            self._warn(f'info{cam.namespace}', f'{cam.namespace}: CameraInfo without a valid K')
            return
        cam.K, cam.size = k, (msg.height, msg.width)

    def _on_description(self, msg: String):
        try:
            from ..core.robot_description import load_robot
            masker = ot.RobotGeomMask(load_robot(msg.data), self.p.robot_mask_margin)
        except Exception as exc:  # noqa: BLE001 - any URDF problem: track without the mask
            self.get_logger().warn(f'robot_description unusable, no robot mask: {exc}')
            return
        self._masker = masker

    def _on_joint_state(self, msg: JointState):
        if len(msg.name) == len(msg.position):
            self._joint_states.append((_ns(msg.header.stamp), msg.name, msg.position))

    def _robot_exclusion(self, stamp_ns: int):
        if self._masker is None or not self._joint_states:
            return None
        states = list(self._joint_states)
        _, names, positions = min(states, key=lambda s: abs(s[0] - stamp_ns))
        return self._masker.at(dict(zip(names, positions, strict=True)))

    # ------------------------------------------------------------------ tracking
    def _on_depth(self, cam: _Camera, msg: Image):
        now = time.monotonic()
        period = 1.0 / self.p.max_rate
        tracker = cam.tracker
        if not self._wanted(cam, now, period) or tracker is None:
            return
        if not self._calibrated(cam, now):
            return
        try:
            depth = depth_from_image(msg)
        except ValueError as exc:
            self._warn(f'enc{cam.namespace}', f'{cam.namespace}/{self.p.depth_topic}: {exc}')
            return
        if cam.size != depth.shape:
            self._warn(f'size{cam.namespace}', f'{cam.namespace}: depth {depth.shape[1]}x'
                       f'{depth.shape[0]} but camera_info {cam.size[1]}x{cam.size[0]}')
            return
        if cam.reset_pending:
            cam.reset_pending = False
            tracker.reset()
        elif now - cam.last > max(2.0, 3.0 * period):
            tracker.reset(keep_positions=True)   # a gap: the last poses are only a guess
        cam.last = now
        stamp = _ns(msg.header.stamp)
        try:
            result = tracker.update(depth, cam.K, cam.T, exclude=self._robot_exclusion(stamp))
        except ValueError as exc:
            self._warn(f'trk{cam.namespace}', f'{cam.namespace}: frame skipped: {exc}')
            return
        self.pub.publish(self._tracked_objects(msg.header.stamp, result))
        if result.missing:
            self.get_logger().debug(f'{cam.namespace}: not found: {result.missing}')
        self.get_logger().debug(
            f'{cam.namespace}: {len(result.poses)} objects in '
            f'{result.timings["total"] * 1000:.1f} ms ({result.num_clusters} clusters)')

    def _wanted(self, cam: _Camera, now: float, period: float) -> bool:
        """Whether a frame is due (max_rate) and someone listens (lazy)."""
        if now - cam.last < period:
            return False
        return not (self.p.lazy and self.pub.get_subscription_count() == 0)

    def _calibrated(self, cam: _Camera, now: float) -> bool:
        """Whether the camera's K and pose are known (warns when the wait lasts)."""
        if cam.K is not None and cam.T is not None:
            return True
        # The first frames can beat their camera_info / the latched pose: warn if it lasts.
        cam.waiting_since = min(cam.waiting_since, now)
        if now - cam.waiting_since > 3.0:
            self._warn(f'wait{cam.namespace}', f'{cam.namespace}: depth frames but no '
                       f'{"camera_info" if cam.K is None else "extrinsics"} for '
                       f'{now - cam.waiting_since:.0f} s')
        return False

    def _tracked_objects(self, stamp, result: ot.TrackingResult) -> TrackedObjects:
        out = TrackedObjects()
        out.header.stamp = stamp
        out.header.frame_id = self.p.world_frame
        for oid, p in result.poses.items():
            w, x, y, z = (float(v) for v in p.quat_wxyz)
            out.ids.append(oid)
            out.poses.append(Pose(position=Point(x=float(p.position[0]),
                                                 y=float(p.position[1]),
                                                 z=float(p.position[2])),
                                  orientation=Quaternion(x=x, y=y, z=z, w=w)))
            out.num_points.append(int(p.num_points))
            out.fit_residual.append(float(p.residual))
        return out

    def _on_reset(self, _request, response):
        with self._lock:
            n = len(self._objects)
            for cam in self._cams:     # applied by the camera's own (serial) frame callback
                cam.reset_pending = True
        response.success = True
        response.message = (f'forgot the history of {n} objects' if n else
                            'nothing to forget: no objects known yet')
        return response

    def _warn(self, key: str, text: str, period: float = 5.0):
        now = time.monotonic()
        if now - self._warned.get(key, -math.inf) >= period:
            self._warned[key] = now
            self.get_logger().warn(text)

    def close(self):
        if self._state_listener is not None:
            self._state_listener.close()


def main(args=None) -> int:
    return run_node(ObjectTrackerNode, args=args)


if __name__ == '__main__':
    raise SystemExit(main())
