"""Capture sets: K RGB-D views stored as one rosbag2 MCAP bag plus a manifest.

Layout of a capture folder (one ``capture_NNN`` stage of a run directory)::

    capture_000/
      views/            rosbag2 MCAP bag (metadata.yaml + views_0.mcap)
      manifest.json     StageRecord manifest; ``results.views`` lists every view

Per view the bag holds, all stamped with the view's time (header stamp = bag time):

    /capture/<cam>/color/image_raw      sensor_msgs/Image rgb8
    /capture/<cam>/color/camera_info    sensor_msgs/CameraInfo (colour = depth intrinsics)
    /capture/<cam>/depth/image_rect_raw sensor_msgs/Image 32FC1 metres, NaN = hole
    /capture/<cam>/depth/camera_info    sensor_msgs/CameraInfo
    /capture/<cam>/extrinsics           geometry_msgs/PoseStamped: colour optical frame in world
    /capture/joint_states               sensor_msgs/JointState: the arm at each view's time
    /capture/robot_description          std_msgs/String (latched): the URDF at capture time

The robot topics are there when the capture node received them; scene reconstruction masks
the arm out of the views with them (``load_capture_meta``).

These are the realsense-ros names under a ``capture/<cam>`` namespace, so ``r2s2r bag play``
of the bag feeds a ``camera_capture`` node (source ``topics``) exactly as a live driver would.
``load_capture_set`` reads such a bag, or any bag with ``<prefix>/color/image_raw`` +
``<prefix>/depth/image_rect_raw`` pairs (e.g. ``r2s2r bag record`` of a live cell).

ROS-free: rosbags through core.bag_io, no rclpy.
"""
from __future__ import annotations

import enum
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .artifacts import MANIFEST, RunDirectory
from .bag_io import BagError, BagReader, BagWriter, MessageTypeError
from .geometry import matrix_to_quat_xyzw, quat_xyzw_to_matrix

STAGE = 'capture'
BAG_NAME = 'views'
TOPIC_ROOT = '/capture'
WORLD_FRAME = 'world'

IMAGE = 'sensor_msgs/msg/Image'
CAMERA_INFO = 'sensor_msgs/msg/CameraInfo'
POSE = 'geometry_msgs/msg/PoseStamped'
JOINT_STATE = 'sensor_msgs/msg/JointState'
STRING = 'std_msgs/msg/String'
JOINT_STATES_TOPIC = f'{TOPIC_ROOT}/joint_states'
ROBOT_DESCRIPTION_TOPIC = f'{TOPIC_ROOT}/robot_description'
ROBOT_DESCRIPTION_FILE = 'robot_description.urdf'

# Offered QoS stored with the topics, so a replay offers what a driver offers:
# images reliable keep-last-10 (qos.IMAGES), extrinsics latched (qos.LATCHED).
_IMAGE_QOS = [{'history': 'keep_last', 'depth': 10, 'reliability': 'reliable',
               'durability': 'volatile', 'deadline': {'sec': 2147483647, 'nsec': 4294967295},
               'lifespan': {'sec': 2147483647, 'nsec': 4294967295},
               'liveliness': 'automatic',
               'liveliness_lease_duration': {'sec': 2147483647, 'nsec': 4294967295},
               'avoid_ros_namespace_conventions': False}]
_LATCHED_QOS = [dict(_IMAGE_QOS[0], depth=1, durability='transient_local')]


class CaptureErrorCode(enum.IntEnum):
    """Same names and values as real2sim2real_msgs/action/Capture.action."""
    NONE = 0
    SOURCE_UNAVAILABLE = 1
    NO_FRAMES = 2
    MISSING_INTRINSICS = 3
    MISSING_POSE = 4
    WRITE_FAILED = 5
    CANCELED = 6
    INVALID_GOAL = 7


class CaptureSetError(RuntimeError):
    """A capture set cannot be written or read; ``code`` is a CaptureErrorCode."""

    def __init__(self, code: CaptureErrorCode, message: str):
        super().__init__(f'{CaptureErrorCode(code).name}: {message}')
        self.code = CaptureErrorCode(code)
        self.message = message


@dataclass(frozen=True)
class ViewRecord:
    """Where a view came from: camera label (topic namespace in the bag) and stamp (ns)."""
    camera: str
    stamp_ns: int
    frame_id: str = ''


@dataclass(frozen=True)
class JointSnapshot:
    """The arm's joint positions at one time (a /joint_states message)."""
    stamp_ns: int
    names: tuple[str, ...]
    positions: tuple[float, ...]

    def as_dict(self) -> dict[str, float]:
        """Joint name -> position (rad or m) of this snapshot."""
        return dict(zip(self.names, self.positions, strict=True))


@dataclass
class CaptureMeta:
    """What a capture set says about the robot: one joint snapshot per view (those the
    capture node had; empty when it had none) and the URDF text ('' when none)."""
    joint_states: list[JointSnapshot]
    robot_description: str
    world_frame: str = WORLD_FRAME

    def configurations(self, tolerance: float = 1e-3) -> list[dict[str, float]]:
        """Distinct arm configurations over the views (a fixed arm gives one)."""
        out: list[JointSnapshot] = []
        for snap in self.joint_states:
            if not any(o.names == snap.names and np.allclose(o.positions, snap.positions,
                                                              atol=tolerance) for o in out):
                out.append(snap)
        return [o.as_dict() for o in out]


# --------------------------------------------------------------------------- conversions

def camera_label(namespace: str) -> str:
    """'camera' -> 'camera'; '/capture/cam0' -> 'cam0' (the last name of a camera namespace)."""
    label = namespace.strip('/').rsplit('/', 1)[-1]
    if not re.fullmatch(r'[A-Za-z_][A-Za-z0-9_]*', label):
        raise ValueError(f'camera namespace {namespace!r} does not end in a valid ROS name')
    return label


def topics_for(label: str) -> dict[str, str]:
    """The topic names (colour, depth, their camera_info, ...) of the camera labelled ``label``."""
    base = f'{TOPIC_ROOT}/{label}'
    return {'color': f'{base}/color/image_raw', 'color_info': f'{base}/color/camera_info',
            'depth': f'{base}/depth/image_rect_raw', 'depth_info': f'{base}/depth/camera_info',
            'extrinsics': f'{base}/extrinsics'}


def pose_to_matrix(position, quat_xyzw) -> np.ndarray:
    """4x4 homogeneous transform from a position (m) and an xyzw quaternion."""
    out = np.eye(4)
    out[:3, :3] = quat_xyzw_to_matrix(quat_xyzw)
    out[:3, 3] = np.asarray(position, float)
    return out


def depth_to_metres(data: np.ndarray, encoding: str, height: int, width: int) -> np.ndarray:
    """A depth image's bytes -> float32 metres, NaN = hole (32FC1 m or 16UC1 mm, REP 118)."""
    if encoding == '32FC1':
        depth = np.frombuffer(data, dtype='<f4')
    elif encoding in ('16UC1', 'mono16'):
        mm = np.frombuffer(data, dtype='<u2')
        depth = mm.astype(np.float32) * np.float32(0.001)
        depth[mm == 0] = np.nan
    else:
        raise ValueError(f'unsupported depth encoding {encoding!r} (32FC1 or 16UC1)')
    if depth.size != height * width:
        raise ValueError(f'depth image has {depth.size} pixels, header says {height}x{width}')
    return depth.reshape(height, width).astype(np.float32, copy=True)


def rgb_from_image(data: np.ndarray, encoding: str, height: int, width: int) -> np.ndarray:
    """(height, width, 3) uint8 RGB from rgb8/bgr8 image bytes; ValueError on another encoding or
    size."""
    arr = np.frombuffer(data, dtype=np.uint8)
    if encoding not in ('rgb8', 'bgr8') or arr.size != height * width * 3:
        raise ValueError(f'colour image must be rgb8/bgr8 {height}x{width}, got {encoding!r} '
                         f'with {arr.size} bytes')
    img = arr.reshape(height, width, 3)
    return (img[:, :, ::-1] if encoding == 'bgr8' else img).copy()


def average_depth(depths: Sequence[np.ndarray]) -> np.ndarray:
    """Per-pixel mean of the valid (finite, > 0) samples of equally sized depth images in
    metres; NaN (a hole) where fewer than half of them are valid."""
    stack = np.stack(depths).astype(np.float64)
    valid = np.isfinite(stack) & (stack > 0)
    count = valid.sum(axis=0)
    total = np.where(valid, stack, 0.0).sum(axis=0)
    out = np.full(stack.shape[1:], np.nan, np.float32)
    ok = count * 2 >= len(depths)
    out[ok] = (total[ok] / count[ok]).astype(np.float32)
    return out


def intrinsics_from_camera_info(k, width: int, height: int, factory=None):
    """CameraInfo K (row-major 3x3) -> reconstruction.views.CameraIntrinsics (or ``factory``'s
    type, e.g. camera_model.Intrinsics, which has the same fields and skips importing the
    reconstruction package), or None when the info is empty (K zero, no size)."""
    if factory is None:
        from .reconstruction.views import CameraIntrinsics as factory
    k = np.asarray(k, float).reshape(-1)
    if k.size != 9 or not np.all(np.isfinite(k)) or k[0] <= 0 or k[4] <= 0 \
            or width <= 0 or height <= 0:
        return None
    return factory(fx=float(k[0]), fy=float(k[4]), cx=float(k[2]), cy=float(k[5]),
                            width=int(width), height=int(height))


def _stamp(ns: int) -> dict:
    sec, nanosec = divmod(int(ns), 1_000_000_000)
    return {'sec': sec, 'nanosec': nanosec}


def _camera_info_dict(intr, stamp_ns: int, frame_id: str) -> dict:
    fx, fy, cx, cy = intr.fx, intr.fy, intr.cx, intr.cy
    return {'header': {'stamp': _stamp(stamp_ns), 'frame_id': frame_id},
            'height': intr.height, 'width': intr.width, 'distortion_model': 'plumb_bob',
            'd': [0.0] * 5, 'k': [fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0],
            'r': [1.0, 0, 0, 0, 1.0, 0, 0, 0, 1.0],
            'p': [fx, 0.0, cx, 0.0, 0.0, fy, cy, 0.0, 0.0, 0.0, 1.0, 0.0]}


# --------------------------------------------------------------------------- writing

def _check_view(i: int, view, record: ViewRecord) -> None:
    where = f'view {i} ({record.camera})'
    if view.intrinsics is None:
        raise CaptureSetError(CaptureErrorCode.MISSING_INTRINSICS,
                              f'{where}: no intrinsics (no CameraInfo received)')
    pose = None if view.T_world_camera is None else np.asarray(view.T_world_camera, float)
    if pose is None or pose.shape != (4, 4) or not np.all(np.isfinite(pose)):
        raise CaptureSetError(CaptureErrorCode.MISSING_POSE,
                              f'{where}: no finite 4x4 camera pose (extrinsics)')
    depth = np.asarray(view.depth)
    if depth.shape != (view.intrinsics.height, view.intrinsics.width):
        raise CaptureSetError(CaptureErrorCode.NO_FRAMES,
                              f'{where}: depth {depth.shape} does not match the intrinsics '
                              f'{view.intrinsics.height}x{view.intrinsics.width} (is the depth '
                              f'registered to the colour image?)')
    if view.rgb is not None and np.asarray(view.rgb).shape != (*depth.shape, 3):
        raise CaptureSetError(CaptureErrorCode.NO_FRAMES,
                              f'{where}: rgb {np.asarray(view.rgb).shape} does not match depth '
                              f'{depth.shape}')


def write_capture_set(folder: str | os.PathLike, views: Sequence, records: Sequence[ViewRecord],
                      meta: dict | None = None, *,
                      joint_states: Sequence[JointSnapshot | None] | None = None,
                      robot_description: str = '') -> tuple[Path, Path]:
    """Write ``views`` (CaptureView-like: rgb, depth m, intrinsics, T_world_camera) with their
    ``records`` (camera label, stamp) into ``folder``/views (MCAP) + ``folder``/manifest.json.

    ``meta`` goes into the manifest's parameters (source, cameras...). ``joint_states`` (one
    per view, None where unknown) and ``robot_description`` (URDF text) record the arm at
    capture time (bag topics, manifest ``results.robot``, ``robot_description.urdf``).
    Returns (bag, manifest).
    Raises CaptureSetError: NO_FRAMES (no views), MISSING_INTRINSICS, MISSING_POSE,
    WRITE_FAILED (disk, bag exists).
    """
    from .artifacts import StageRecord
    folder = Path(folder)
    if not views:
        raise CaptureSetError(CaptureErrorCode.NO_FRAMES, 'no views to write')
    if len(views) != len(records):
        raise ValueError(f'{len(views)} views but {len(records)} records')
    for i, (view, rec) in enumerate(zip(views, records, strict=True)):
        _check_view(i, view, rec)
    snapshots = list(joint_states or [])
    if snapshots and len(snapshots) != len(views):
        raise ValueError(f'{len(views)} views but {len(snapshots)} joint snapshots')
    bag_path = folder / BAG_NAME
    entries = []
    try:
        with BagWriter(bag_path) as bag:
            added = set()
            for i, (view, rec) in enumerate(zip(views, records, strict=True)):
                topics = topics_for(rec.camera)
                if rec.camera not in added:
                    for key, topic in topics.items():
                        msgtype = {'color': IMAGE, 'depth': IMAGE, 'extrinsics': POSE}.get(
                            key, CAMERA_INFO)
                        bag.add_topic(topic, msgtype, _LATCHED_QOS if key == 'extrinsics'
                                      else _IMAGE_QOS)
                    added.add(rec.camera)
                entries.append(_write_view(bag, i, view, rec, topics))
            robot = _write_robot(bag, records, snapshots, robot_description)
        if robot_description:
            from .artifacts import atomic_write_text
            atomic_write_text(folder / ROBOT_DESCRIPTION_FILE, robot_description)
    except (BagError, MessageTypeError, OSError) as exc:
        raise CaptureSetError(CaptureErrorCode.WRITE_FAILED, f'{bag_path}: {exc}') from None
    record = StageRecord(STAGE, folder, parameters=dict(meta or {}))
    record.add_output('bag', bag_path)
    if robot_description:
        record.add_output('robot_description', folder / ROBOT_DESCRIPTION_FILE)
    record.results = {'num_views': len(entries), 'views': entries,
                      'cameras': sorted({r.camera for r in records}), 'bag': str(bag_path),
                      'robot': robot}
    try:
        manifest = record.finish()
    except OSError as exc:
        raise CaptureSetError(CaptureErrorCode.WRITE_FAILED, f'{folder}: {exc}') from None
    return bag_path, manifest


def _write_view(bag: BagWriter, index: int, view, rec: ViewRecord, topics: dict) -> dict:
    intr = view.intrinsics
    frame = rec.frame_id or f'{rec.camera}_color_optical_frame'
    depth_frame = frame.replace('_color_optical_frame', '_depth_optical_frame')
    t = int(rec.stamp_ns)
    header = {'stamp': _stamp(t), 'frame_id': frame}
    depth = np.ascontiguousarray(np.asarray(view.depth, dtype=np.float32))
    rgb = (np.zeros((intr.height, intr.width, 3), np.uint8) if view.rgb is None
           else np.ascontiguousarray(np.asarray(view.rgb, dtype=np.uint8)))
    bag.write(topics['color'], t, {
        'header': header, 'height': intr.height, 'width': intr.width, 'encoding': 'rgb8',
        'is_bigendian': 0, 'step': intr.width * 3, 'data': rgb.reshape(-1)})
    bag.write(topics['color_info'], t, _camera_info_dict(intr, t, frame))
    bag.write(topics['depth'], t, {
        'header': {'stamp': _stamp(t), 'frame_id': depth_frame}, 'height': intr.height,
        'width': intr.width, 'encoding': '32FC1', 'is_bigendian': 0, 'step': intr.width * 4,
        'data': depth.astype('<f4').view(np.uint8).reshape(-1)})
    bag.write(topics['depth_info'], t, _camera_info_dict(intr, t, depth_frame))
    pose = np.asarray(view.T_world_camera, float)
    qx, qy, qz, qw = matrix_to_quat_xyzw(pose[:3, :3])
    bag.write(topics['extrinsics'], t, {
        'header': {'stamp': _stamp(t), 'frame_id': WORLD_FRAME},
        'pose': {'position': dict(zip('xyz', map(float, pose[:3, 3]), strict=True)),
                 'orientation': {'x': qx, 'y': qy, 'z': qz, 'w': qw}}})
    valid = np.isfinite(depth) & (depth > 0)
    return {'index': index, 'camera': rec.camera, 'stamp_ns': t, 'frame_id': frame,
            'topics': topics, 'width': intr.width, 'height': intr.height,
            'intrinsics': {'fx': intr.fx, 'fy': intr.fy, 'cx': intr.cx, 'cy': intr.cy},
            'T_world_camera': pose.tolist(), 'valid_depth_fraction': float(valid.mean())}


def _write_robot(bag: BagWriter, records: Sequence[ViewRecord],
                 snapshots: Sequence[JointSnapshot | None], urdf: str) -> dict:
    """The arm at capture time: one JointState per view (bag time = the view's stamp, header
    = the state's own stamp) and the URDF once, latched. Returns the manifest's summary."""
    states = []
    if any(s is not None for s in snapshots):
        bag.add_topic(JOINT_STATES_TOPIC, JOINT_STATE, _IMAGE_QOS)
        for rec, snap in zip(records, snapshots, strict=True):
            if snap is None:
                continue
            bag.write(JOINT_STATES_TOPIC, int(rec.stamp_ns), {
                'header': {'stamp': _stamp(snap.stamp_ns), 'frame_id': ''},
                'name': list(snap.names), 'position': [float(v) for v in snap.positions],
                'velocity': [], 'effort': []})
            states.append({'view_stamp_ns': int(rec.stamp_ns), 'stamp_ns': int(snap.stamp_ns),
                           'name': list(snap.names),
                           'position': [float(v) for v in snap.positions]})
    if urdf:
        bag.add_topic(ROBOT_DESCRIPTION_TOPIC, STRING, _LATCHED_QOS)
        bag.write(ROBOT_DESCRIPTION_TOPIC, int(min(r.stamp_ns for r in records)),
                  {'data': urdf})
    return {'joint_states': states,
            'robot_description': ROBOT_DESCRIPTION_FILE if urdf else ''}


def new_capture_folder(run_dir: str | os.PathLike) -> Path:
    """A fresh ``<run_dir>/capture_NNN`` folder."""
    return RunDirectory(run_dir).new_stage(STAGE).folder


# --------------------------------------------------------------------------- reading

def _resolve(path: Path) -> tuple[Path, dict | None]:
    """(bag path, manifest or None) for a manifest, a capture folder or a bare bag."""
    if not path.exists():
        raise CaptureSetError(CaptureErrorCode.NO_FRAMES, f'no such capture set: {path}')
    if path.is_file() and path.name == MANIFEST:
        try:
            manifest = json.loads(path.read_text())
        except UnicodeDecodeError:
            raise CaptureSetError(CaptureErrorCode.NO_FRAMES,
                                  f'{path}: not a text (JSON) manifest') from None
        except json.JSONDecodeError as exc:
            raise CaptureSetError(CaptureErrorCode.NO_FRAMES,
                                  f'{path}: not valid JSON: {exc}') from None
        outputs = manifest.get('outputs', {}) if isinstance(manifest, dict) else None
        bag_entry = outputs.get('bag', {}) if isinstance(outputs, dict) else None
        if not isinstance(bag_entry, dict):
            raise CaptureSetError(CaptureErrorCode.NO_FRAMES,
                                  f'{path}: not a capture manifest (want a JSON object with '
                                  f'outputs.bag)')
        bag = Path(bag_entry.get('path') or path.parent / BAG_NAME)
        if not bag.exists():   # a moved run directory: the bag beside the manifest
            bag = path.parent / BAG_NAME
        return bag, manifest
    if path.is_dir() and (path / MANIFEST).is_file() and (path / BAG_NAME).exists():
        return _resolve(path / MANIFEST)
    return path, None


def _camera_prefixes(topics: dict) -> list[str]:
    return sorted(t[:-len('/color/image_raw')] for t in topics
                  if t.endswith('/color/image_raw')
                  and t[:-len('/color/image_raw')] + '/depth/image_rect_raw' in topics)


def load_capture_set(path: str | os.PathLike) -> list:
    """Views of a capture set (manifest, capture folder or bag) as reconstruction CaptureViews,
    in capture order (by stamp, then camera). View names are ``<cam>@<stamp_ns>``.

    Raises CaptureSetError: NO_FRAMES (no such set / no colour+depth pairs),
    MISSING_INTRINSICS (a view without CameraInfo), MISSING_POSE (a view without extrinsics).
    """
    from .reconstruction.views import CaptureView
    bag_path, manifest = _resolve(Path(path))
    try:
        with BagReader(bag_path) as bag:
            frames = _read_frames(bag)
    except BagError as exc:
        raise CaptureSetError(CaptureErrorCode.NO_FRAMES, f'{bag_path}: {exc}') from None
    wanted = None
    if manifest is not None:
        wanted = [(v['topics']['color'].rsplit('/color/', 1)[0], int(v['stamp_ns']))
                  for v in manifest.get('results', {}).get('views', [])]
    keys = wanted if wanted is not None else sorted(
        frames['color'], key=lambda k: (k[1], k[0]))
    if not keys:
        raise CaptureSetError(CaptureErrorCode.NO_FRAMES, f'{bag_path}: no colour+depth views')
    views = []
    for i, key in enumerate(keys):
        prefix, stamp = key
        where = f'{bag_path}: view {i} ({prefix} at {stamp} ns)'
        if key not in frames['color'] or key not in frames['depth']:
            raise CaptureSetError(CaptureErrorCode.NO_FRAMES, f'{where}: colour or depth missing')
        info = frames['info'].get(key) or _latest_before(frames['info_any'].get(prefix), stamp)
        intr = None if info is None else intrinsics_from_camera_info(*info)
        if intr is None:
            raise CaptureSetError(CaptureErrorCode.MISSING_INTRINSICS,
                                  f'{where}: no CameraInfo with valid K on '
                                  f'{prefix}/color/camera_info')
        pose = frames['pose'].get(key)
        if pose is None:
            pose = _latest_before(frames['pose_any'].get(prefix), stamp)
        if pose is None:
            raise CaptureSetError(CaptureErrorCode.MISSING_POSE,
                                  f'{where}: no extrinsics on {prefix}/extrinsics')
        rgb = frames['color'][key]
        views.append(CaptureView(rgb=rgb, depth=frames['depth'][key], intrinsics=intr,
                                 T_world_camera=pose, name=f'{prefix.rsplit("/", 1)[-1]}@{stamp}'))
    return views


def load_capture_meta(path: str | os.PathLike) -> CaptureMeta:
    """The robot's joint states and URDF stored with a capture set (manifest, folder or bag).

    Reads ``/capture/joint_states`` + ``/capture/robot_description`` (a capture node's bag), else
    ``/joint_states`` + ``/robot_description`` (a recording of a live cell). Empty fields when
    the bag has neither. Raises CaptureSetError(NO_FRAMES) when the set cannot be read.
    """
    bag_path, _manifest = _resolve(Path(path))
    states: list[JointSnapshot] = []
    urdf = ''
    try:
        with BagReader(bag_path) as bag:
            topics = bag.topics
            js = next((t for t in (JOINT_STATES_TOPIC, '/joint_states') if t in topics), None)
            rd = next((t for t in (ROBOT_DESCRIPTION_TOPIC, '/robot_description')
                       if t in topics), None)
            for topic, msgtype, _t, raw in bag.messages([t for t in (js, rd) if t]):
                msg = bag.deserialize(raw, msgtype)
                if topic == rd:
                    urdf = str(msg.data)
                    continue
                names = tuple(str(n) for n in msg.name)
                pos = tuple(float(v) for v in msg.position)
                if len(names) != len(pos):
                    continue        # a state without positions (velocity-only) says nothing
                stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
                states.append(JointSnapshot(int(stamp), names, pos))
    except BagError as exc:
        raise CaptureSetError(CaptureErrorCode.NO_FRAMES, f'{bag_path}: {exc}') from None
    return CaptureMeta(states, urdf)


def _latest_before(items, stamp: int):
    """The last (stamp, value) at or before ``stamp``, else the first one (a latched message
    recorded after the frame); None when there is none."""
    if not items:
        return None
    before = [v for s, v in items if s <= stamp]
    return before[-1] if before else items[0][1]


def _read_frames(bag: BagReader) -> dict:
    topics = bag.topics
    prefixes = _camera_prefixes(topics)
    out = {'color': {}, 'depth': {}, 'info': {}, 'info_any': {}, 'pose': {}, 'pose_any': {}}
    wanted = {}
    for p in prefixes:
        wanted[f'{p}/color/image_raw'] = (p, 'color')
        wanted[f'{p}/depth/image_rect_raw'] = (p, 'depth')
        wanted[f'{p}/color/camera_info'] = (p, 'info')
        wanted[f'{p}/extrinsics'] = (p, 'pose')
    for topic, msgtype, _t, raw in bag.messages([t for t in wanted if t in topics]):
        prefix, kind = wanted[topic]
        msg = bag.deserialize(raw, msgtype)
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        key = (prefix, stamp)
        try:
            if kind == 'color':
                out['color'][key] = rgb_from_image(msg.data, msg.encoding, msg.height, msg.width)
            elif kind == 'depth':
                out['depth'][key] = depth_to_metres(msg.data, msg.encoding, msg.height,
                                                    msg.width)
            elif kind == 'info':
                value = (np.asarray(msg.k, float), int(msg.width), int(msg.height))
                out['info'][key] = value
                out['info_any'].setdefault(prefix, []).append((stamp, value))
            else:
                p, o = msg.pose.position, msg.pose.orientation
                value = pose_to_matrix((p.x, p.y, p.z), (o.x, o.y, o.z, o.w))
                out['pose'][key] = value
                out['pose_any'].setdefault(prefix, []).append((stamp, value))
        except ValueError as exc:
            raise CaptureSetError(CaptureErrorCode.NO_FRAMES, f'{topic} at {stamp} ns: {exc}') \
                from None
    # A colour frame without its depth (or the reverse) is not a view.
    both = set(out['color']) & set(out['depth'])
    out['color'] = {k: v for k, v in out['color'].items() if k in both}
    return out
