"""Subscriptions that exist only while a goal needs them.

rclpy spends milliseconds of CPU per received message: an idle node subscribed to the 100 Hz
/joint_states burns a third of a core for nothing, and on a 2-core machine that starves the
nodes that matter (the emulated cell's physics, the executor). Nodes that need the joint
state only while a goal runs subscribe inside the goal.
"""
from contextlib import contextmanager


@contextmanager
def subscribed(node, msg_type, topic: str, callback, qos_profile, callback_group=None):
    sub = node.create_subscription(msg_type, topic, callback, qos_profile,
                                   callback_group=callback_group)
    try:
        yield sub
    finally:
        node.destroy_subscription(sub)
