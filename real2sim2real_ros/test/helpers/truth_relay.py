"""The emulated cell's hidden true object poses, read the way an evaluator does, and optionally
republished on /tracked_objects as a perfect tracker (for tests whose graph has no tracker)."""
from __future__ import annotations

import math
import threading
import time

import numpy as np

TRUTH_TOPIC = '/emulated_cell/true_object_poses'
TRACKED_TOPIC = '/tracked_objects'
BOX = 'box_0'


class TruthRelay:
    """The cell's true object poses (the evaluator's view) and, while ``relaying``, the same
    poses republished on /tracked_objects (a perfect tracker). Own rclpy context."""

    def __init__(self):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        from real2sim2real_msgs.msg import TrackedObjects
        from real2sim2real_ros.ros import qos
        self._rclpy = rclpy
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node('truth_relay', context=self.ctx)
        self.relaying = False
        self.latest = None
        self.received = 0
        self.published = 0
        self._lock = threading.Lock()
        self._pub = self.node.create_publisher(TrackedObjects, TRACKED_TOPIC, qos.STATE)
        self.node.create_subscription(TrackedObjects, TRUTH_TOPIC, self._on_truth, qos.STATE)
        self._executor = SingleThreadedExecutor(context=self.ctx)
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self):
        try:
            self._executor.spin()
        except Exception:  # noqa: BLE001 - context shut down
            pass

    def _on_truth(self, msg):
        with self._lock:
            self.latest = msg
            self.received += 1
            relay = self.relaying
        if relay:
            self._pub.publish(msg)
            self.published += 1

    def pose(self, object_id=BOX, timeout=10.0, newer_than=-math.inf):
        """(xy, z, yaw, up_z, stamp) of the latest true pose."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                msg = self.latest
            if msg is not None:
                stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
                if stamp > newer_than:
                    p = msg.poses[list(msg.ids).index(object_id)]
                    o = p.orientation
                    yaw = math.atan2(2 * (o.w * o.z + o.x * o.y), 1 - 2 * (o.y ** 2 + o.z ** 2))
                    up = 1 - 2 * (o.x ** 2 + o.y ** 2)
                    return (np.array([p.position.x, p.position.y]), p.position.z, yaw, up,
                            stamp)
            time.sleep(0.05)
        raise AssertionError(f'no true pose of {object_id} on {TRUTH_TOPIC} within {timeout} s')

    def close(self):
        self._executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        self._rclpy.try_shutdown(context=self.ctx)
