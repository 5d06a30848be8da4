"""Collect one topic's messages in an rclpy context of its own (tests, benchmarks, tools).

The listener spins on a background thread, optionally in another ROS domain, and keeps
(receive time, message) pairs, and each message's DDS source timestamp (when its publisher
wrote it, system clock): ``snapshot_sent()``. A latency between two other processes measured
on source timestamps does not include how late this process was scheduled to receive them.
Its default QoS is reliable with a deep history, so a loaded machine loses nothing on the
reader's side (the publisher's QoS still decides what is offered).
"""
from __future__ import annotations

import threading
import time

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import QoSProfile, ReliabilityPolicy


class TopicListener:
    """``messages`` holds (receive time from ``clock``, msg); ``snapshot_sent()`` (publisher's
    write time, s since the epoch, msg)."""

    def __init__(self, msg_type, topic: str, qos=None, domain_id: int | None = None,
                 clock=time.monotonic, node_name: str = 'topic_listener'):
        self._clock = clock
        self.ctx = rclpy.Context()
        kwargs = {'context': self.ctx}
        if domain_id is not None:
            kwargs['domain_id'] = domain_id
        rclpy.init(**kwargs)
        self.node = rclpy.create_node(node_name, context=self.ctx)
        self.messages = []
        self._sent = []
        self._lock = threading.Lock()
        # Default: reliable with a deep history, so a loaded machine loses nothing on the
        # reader's side (the publishers' own QoS still decides what is offered).
        deep = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        self._sub = self.node.create_subscription(msg_type, topic, self._on_msg, qos or deep)
        self._executor = SingleThreadedExecutor(context=self.ctx)
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self):
        try:
            self._executor.spin()
        except Exception:  # noqa: BLE001 - context shut down
            pass

    def _on_msg(self, msg, info):
        with self._lock:
            self.messages.append((self._clock(), msg))
            self._sent.append(info['source_timestamp'] * 1e-9)

    def snapshot(self):
        with self._lock:
            return list(self.messages)

    def snapshot_sent(self):
        """(source timestamp, msg): when each message's publisher wrote it (system clock)."""
        with self._lock:
            return [(t, m) for t, (_, m) in zip(self._sent, self.messages, strict=True)]

    def wait_for(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.messages) >= count:
                return True
            time.sleep(0.05)
        return False

    def wait_for_publishers(self, count: int = 1, timeout: float = 10.0) -> bool:
        """Until ``count`` publishers are matched: messages sent before that on a volatile
        topic never reach this listener."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._sub.get_publisher_count() >= count:
                return True
            time.sleep(0.05)
        return False

    def close(self):
        self._executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)
        self._thread.join(timeout=2.0)
