"""ros_time.NodeDeadline: deadlines on the node's clock (simulated under use_sim_time)."""
import time

from real2sim2real_ros.ros.ros_time import NodeDeadline


class _Now:
    def __init__(self, clock):
        self.nanoseconds = int(round(clock.t * 1e9))


class _Clock:
    def __init__(self):
        self.t = 100.0

    def now(self):
        return _Now(self)


class _Node:
    def __init__(self):
        self.clock = _Clock()

    def get_clock(self):
        return self.clock


def test_deadline_follows_the_node_clock_not_the_wall():
    node = _Node()
    d = NodeDeadline(node, 5.0, stall_s=10.0)
    # A slow simulated clock: 2 wall-clock "steps" of 2 s simulated each, still inside 5 s.
    node.clock.t += 2.0
    assert not d.expired()
    node.clock.t += 2.0
    assert not d.expired()
    node.clock.t += 1.5
    assert d.expired()
    assert not d.stalled()


def test_a_stopped_clock_expires_after_the_stall_window():
    node = _Node()
    d = NodeDeadline(node, 1000.0, stall_s=0.2)
    assert not d.expired()
    time.sleep(0.3)
    assert d.expired()
    assert d.stalled()
    node.clock.t += 0.01          # the clock moves again: no longer stalled
    assert not d.expired()
