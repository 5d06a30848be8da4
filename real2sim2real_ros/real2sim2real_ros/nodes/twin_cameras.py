"""The MuJoCo twin seen through the real cameras: sim_server's ``camera_names`` surface.

Contract: per camera ``<name>`` it reads the REAL camera's ``<name>/color/camera_info``
(intrinsics; best effort, so a reliable or a sensor_data driver alike) and latched
``<name>/extrinsics`` (PoseStamped of the colour optical frame in the twin's world) and
publishes ``~/<name>/color/image_raw`` (rgb8), ``~/<name>/depth/image_rect_raw`` (32FC1 m,
NaN = nothing) and ``~/<name>/color/camera_info`` (qos.IMAGES, stamped with the twin's time)
every ``1 / rate`` s of wall time (``rate`` 0: never by itself), and once per camera on
:meth:`TwinCameras.render` (the node's ``~/render``). Rendering (core/twin_camera.py: the
pinhole model exactly, distortion ignored) runs on a thread of its own that owns the GL
contexts; the twin's lock is held only to snapshot the twin.
"""
from __future__ import annotations

import math
import threading
import time

import numpy as np
from geometry_msgs.msg import PoseStamped
from sensor_msgs.msg import CameraInfo, Image

from ..core import camera_model
from ..ros import qos
from .cell_messages import camera_info_msg, image_msg, stamp


class _Camera:
    """One camera's inputs (intrinsics, pose), its renderer and its publishers."""

    def __init__(self, node, name: str):
        self.name = name
        self.intrinsics: camera_model.Intrinsics | None = None
        self.pose: tuple[np.ndarray, np.ndarray] | None = None
        self.renderer = None
        self.pub_color = node.create_publisher(Image, f'~/{name}/color/image_raw', qos.IMAGES)
        self.pub_depth = node.create_publisher(Image, f'~/{name}/depth/image_rect_raw',
                                               qos.IMAGES)
        self.pub_info = node.create_publisher(CameraInfo, f'~/{name}/color/camera_info',
                                              qos.IMAGES)

    def on_camera_info(self, msg: CameraInfo):
        k = msg.k
        if msg.width and msg.height and k[0] > 0 and k[4] > 0:
            self.intrinsics = camera_model.Intrinsics(
                int(msg.width), int(msg.height), float(k[0]), float(k[4]), float(k[2]),
                float(k[5]))

    def on_extrinsics(self, msg: PoseStamped):
        p, o = msg.pose.position, msg.pose.orientation
        w, x, y, z = o.w, o.x, o.y, o.z
        n = math.sqrt(w * w + x * x + y * y + z * z) or 1.0
        w, x, y, z = w / n, x / n, y / n, z / n
        rot = np.array([
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])
        self.pose = (rot, np.array([p.x, p.y, p.z]))

    def publish(self, intr: camera_model.Intrinsics, time_stamp, rgb, depth):
        frame = camera_model.color_optical_frame(self.name)
        self.pub_color.publish(image_msg(rgb, 'rgb8', intr.width, intr.height, time_stamp,
                                         frame))
        self.pub_depth.publish(image_msg(np.asarray(depth, dtype=np.float32), '32FC1',
                                         intr.width, intr.height, time_stamp, frame))
        self.pub_info.publish(camera_info_msg(intr, time_stamp, frame))


class TwinCameras:
    """The twin's cameras on ``node`` (see the module). ``twin_now()`` -> (twin or None, why
    not) is called with ``lock`` held."""

    def __init__(self, node, names, rate: float, lock, twin_now, callback_group):
        self._node, self._lock, self._twin_now = node, lock, twin_now
        self._period = 1.0 / rate if rate > 0 else None
        self.cameras: dict[str, _Camera] = {}
        for name in names:
            cam = self.cameras[name] = _Camera(node, name)
            node.create_subscription(CameraInfo, f'{name}/color/camera_info',
                                     cam.on_camera_info, qos.SENSOR_DATA,
                                     callback_group=callback_group)
            node.create_subscription(PoseStamped, f'{name}/extrinsics', cam.on_extrinsics,
                                     qos.LATCHED, callback_group=callback_group)
        self._stop = threading.Event()
        self._request = threading.Event()
        self._done = threading.Condition()
        self._count = 0
        self._report = ''
        self._thread = threading.Thread(target=self._loop, name='cameras', daemon=True)
        self._thread.start()

    def render(self, timeout: float = 10.0) -> tuple[bool, str]:
        """Render every camera once now: (True, what was rendered) or (False, why not)."""
        with self._done:
            target = self._count + 1
            self._request.set()
            ok = self._done.wait_for(lambda: self._count >= target, timeout=timeout)
            report = self._report
        if not ok:
            return False, f'rendering did not finish within {timeout:g} s'
        if report:
            return False, report
        return True, f'rendered {", ".join(self.cameras)}'

    def close(self):
        self._stop.set()
        self._request.set()
        self._thread.join(timeout=5.0)

    def _loop(self):
        try:
            self._serve()
        except Exception as exc:  # noqa: BLE001 - report, do not die silently in a thread
            if not self._stop.is_set() and self._node.context.ok():
                self._node.get_logger().error(f'twin camera loop stopped: {exc!r}')
        finally:
            for cam in self.cameras.values():   # GL contexts belong to this thread
                if cam.renderer is not None:
                    cam.renderer.close()
                    cam.renderer = None

    def _serve(self):
        period, next_due = self._period, time.monotonic()
        while not self._stop.is_set() and self._node.context.ok():
            timeout = 0.2 if period is None else max(0.0, next_due - time.monotonic())
            self._request.wait(timeout)
            if self._stop.is_set():
                break
            asked = self._request.is_set()
            if not asked and (period is None or time.monotonic() < next_due):
                continue
            self._request.clear()
            report = self._render_all()
            if asked:
                with self._done:
                    self._count += 1
                    self._report = report
                    self._done.notify_all()
            if period is not None and not asked:
                next_due = max(next_due + period, time.monotonic())

    def _render_all(self) -> str:
        """Render and publish every ready camera; '' or what is missing."""
        from ..core.twin_camera import TwinCamera
        missing = []
        for name, cam in self.cameras.items():
            intr, pose = cam.intrinsics, cam.pose
            if intr is None or pose is None:
                missing.append(f'{name}: no {"camera_info" if intr is None else "extrinsics"}')
                continue
            with self._lock:
                twin, problem = self._twin_now()
                if twin is None:
                    return f'no twin: {problem}'
                r = cam.renderer
                if r is None or r.model is not twin.model or r.intrinsics != intr:
                    if r is not None:
                        r.close()
                    r = cam.renderer = TwinCamera(twin.model, intr)
                r.update(twin.data, *pose)       # snapshot of the twin; pixels outside
                time_stamp = stamp(twin.data.time)
            rgb, depth = r.render_pixels()
            cam.publish(intr, time_stamp, rgb, depth)
        return '; '.join(missing)
