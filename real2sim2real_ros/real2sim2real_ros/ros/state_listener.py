"""A high-rate subscription on a node and executor of its own.

rclpy rebuilds the whole wait set (every service, action, publisher event handler of the
node) for each message it takes: a node with an action server and a dozen services spent
~70% of a core on a 100 Hz /joint_states. A bare helper node that holds only the
subscription, spun by its own single-threaded executor, handles the same stream for a
fraction of that. The topic is resolved by the owning node first, so its remappings apply.
"""
from __future__ import annotations

import threading

import rclpy
from rclpy.executors import SingleThreadedExecutor


class StateListener:
    def __init__(self, owner, msg_type, topic: str, callback, qos_profile):
        resolved = owner.resolve_topic_name(topic)
        self.node = rclpy.create_node(
            f'{owner.get_name()}_state_listener', context=owner.context,
            use_global_arguments=False, start_parameter_services=False, enable_rosout=False)
        self.node.create_subscription(msg_type, resolved, callback, qos_profile)
        self._executor = SingleThreadedExecutor(context=owner.context)
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, daemon=True,
                                        name=f'{owner.get_name()}_state_listener')
        self._thread.start()

    def _spin(self):
        try:
            self._executor.spin()
        except Exception:  # noqa: BLE001 - the context shut down under the executor
            pass

    def close(self):
        self._executor.shutdown(timeout_sec=1.0)
        # The spin thread must have left rcl's wait before its node goes (a thread still in
        # it aborted the process at exit: "terminate called without an active exception").
        self._thread.join(timeout=2.0)
        self.node.destroy_node()
