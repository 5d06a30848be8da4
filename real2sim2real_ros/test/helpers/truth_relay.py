"""The emulated cell's hidden true object poses, read the way an evaluator does, and optionally
republished on /tracked_objects as a perfect tracker (for tests whose graph has no tracker)."""
from __future__ import annotations

import math
import time

import numpy as np

from real2sim2real_ros.ros.topic_listener import TopicListener

TRUTH_TOPIC = '/emulated_cell/true_object_poses'
TRACKED_TOPIC = '/tracked_objects'
BOX = 'box_0'


class TruthRelay(TopicListener):
    """The cell's true object poses (the evaluator's view) and, while ``relaying``, the same
    poses republished on /tracked_objects (a perfect tracker). A TopicListener (own rclpy
    context) that keeps only the latest message."""

    def __init__(self):
        from real2sim2real_msgs.msg import TrackedObjects
        from real2sim2real_ros.ros import qos
        self.relaying = False
        self.latest = None
        self.received = 0
        self.published = 0
        self._pub = None
        super().__init__(TrackedObjects, TRUTH_TOPIC, qos.STATE, node_name='truth_relay')
        self._pub = self.node.create_publisher(TrackedObjects, TRACKED_TOPIC, qos.STATE)

    def _on_msg(self, msg, _info):
        with self._lock:
            self.latest = msg
            self.received += 1
            pub = self._pub if self.relaying else None
        if pub is not None:
            pub.publish(msg)
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
