"""The ``realsense`` source of camera_capture: pyrealsense2 colour + depth aligned to colour.

Publishes what realsense2_camera publishes (REP 2003 names): ``<cam>/color/image_raw`` (rgb8),
``<cam>/color/camera_info``, ``<cam>/depth/image_rect_raw`` (16UC1 mm when the device's depth
unit is 1 mm, else 32FC1 m; aligned to colour, so it shares the colour intrinsics) and
``<cam>/depth/camera_info``, and feeds the same frames to the capture node's stream.
Intrinsics come from the device (the colour stream's factory calibration).
"""
from __future__ import annotations

import threading

import numpy as np
from sensor_msgs.msg import CameraInfo, Image

from ..core.camera_model import Intrinsics


class RealsenseUnavailable(RuntimeError):
    """No pyrealsense2, no device, or the device refused the stream configuration."""


def _import_rs():
    try:
        import pyrealsense2 as rs
    except ImportError as exc:
        raise RealsenseUnavailable(
            f'pyrealsense2 is not installed ({exc}); pip install pyrealsense2, or use '
            f'source:=topics with realsense2_camera') from None
    return rs


class RealsenseStream:
    def __init__(self, node, stream, image_qos, *, serial: str = '', width: int = 640,
                 height: int = 480, fps: int = 30):
        rs = _import_rs()
        devices = rs.context().query_devices()
        serials = [d.get_info(rs.camera_info.serial_number) for d in devices]
        if not serials:
            raise RealsenseUnavailable('no RealSense device connected (pyrealsense2 sees 0 '
                                       'devices); check USB 3 and udev rules')
        if serial and serial not in serials:
            raise RealsenseUnavailable(f'no RealSense with serial {serial}; connected: {serials}')
        self.node, self.stream, self.rs = node, stream, rs
        config = rs.config()
        if serial:
            config.enable_device(serial)
        config.enable_stream(rs.stream.color, width, height, rs.format.rgb8, fps)
        config.enable_stream(rs.stream.depth, width, height, rs.format.z16, fps)
        self.pipeline = rs.pipeline()
        try:
            profile = self.pipeline.start(config)
        except RuntimeError as exc:
            raise RealsenseUnavailable(f'cannot start {width}x{height}@{fps}: {exc}') from None
        self.depth_scale = profile.get_device().first_depth_sensor().get_depth_scale()
        ci = profile.get_stream(rs.stream.color).as_video_stream_profile().get_intrinsics()
        self.intrinsics = Intrinsics(ci.width, ci.height, ci.fx, ci.fy, ci.ppx, ci.ppy)
        self.align = rs.align(rs.stream.color)
        ns = stream.namespace
        self.color_frame = f'{stream.label}_color_optical_frame'
        self.depth_frame = f'{stream.label}_depth_optical_frame'
        self.pubs = {
            'color': node.create_publisher(Image, f'{ns}/color/image_raw', image_qos),
            'color_info': node.create_publisher(CameraInfo, f'{ns}/color/camera_info', image_qos),
            'depth': node.create_publisher(Image, f'{ns}/depth/image_rect_raw', image_qos),
            'depth_info': node.create_publisher(CameraInfo, f'{ns}/depth/camera_info', image_qos),
        }
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name='realsense', daemon=True)
        self._thread.start()

    def _loop(self):
        while not self._stop.is_set():
            try:
                frames = self.pipeline.wait_for_frames(1000)
            except RuntimeError:
                continue   # timeout: try again until stopped
            aligned = self.align.process(frames)
            color, depth = aligned.get_color_frame(), aligned.get_depth_frame()
            if not color or not depth:
                continue
            self._publish(np.asanyarray(color.get_data()), np.asanyarray(depth.get_data()))

    def _publish(self, rgb: np.ndarray, z16: np.ndarray):
        intr = self.intrinsics
        stamp = self.node.get_clock().now().to_msg()   # host time, as realsense-ros by default
        img = Image(height=intr.height, width=intr.width, encoding='rgb8', step=intr.width * 3,
                    data=np.ascontiguousarray(rgb).tobytes())
        img.header.stamp, img.header.frame_id = stamp, self.color_frame
        if abs(self.depth_scale - 0.001) < 1e-9:
            enc, data, item = '16UC1', z16, 2
        else:
            depth = z16.astype(np.float32) * np.float32(self.depth_scale)
            depth[z16 == 0] = np.nan
            enc, data, item = '32FC1', depth, 4
        dimg = Image(height=intr.height, width=intr.width, encoding=enc, step=intr.width * item,
                     data=np.ascontiguousarray(data).tobytes())
        dimg.header.stamp, dimg.header.frame_id = stamp, self.depth_frame
        infos = []
        for frame in (self.color_frame, self.depth_frame):
            info = CameraInfo(**intr.camera_info_fields())
            info.header.stamp, info.header.frame_id = stamp, frame
            infos.append(info)
        self.pubs['color'].publish(img)
        self.pubs['depth'].publish(dimg)
        self.pubs['color_info'].publish(infos[0])
        self.pubs['depth_info'].publish(infos[1])
        self.stream.on_info(infos[0])
        self.stream.on_color(img)
        self.stream.on_depth(dimg)

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=2.0)
        try:
            self.pipeline.stop()
        except RuntimeError:
            pass
