"""Plain helpers the node and integration tests share: the installed package's launch files
started through the runner, and small readers/builders over a Commander. No fixtures here
(those live in conftest.py); no test module imports another."""
from __future__ import annotations

import os
from pathlib import Path

from real2sim2real_ros.ros.topic_listener import TopicListener

__all__ = ['TopicListener', 'package_share', 'launch_file', 'start_graph', 'joint_positions',
           'two_point_goal', 'arm_or_fail', 'wait_future']


def package_share() -> Path:
    from ament_index_python.packages import get_package_share_directory
    return Path(get_package_share_directory('real2sim2real_ros'))


def launch_file(name: str) -> Path:
    return package_share() / 'launch' / name


def start_graph(launch_name: str, launch_args: dict, tmp_path: Path):
    """Start one of the package's launch files through the runner (``ros2 launch`` itself is
    exercised by the launch_pytest tests on lab machines)."""
    from real2sim2real_ros.launch_runner import LaunchedGraph
    env = dict(os.environ)
    env['R2S2R_RUN_DIR'] = str(tmp_path / 'runs')
    graph = LaunchedGraph(launch_file(launch_name), launch_args, env=env,
                          log_dir=tmp_path / 'launch_logs')
    return graph.start()


def joint_positions(cmd):
    """The arm's measured joint positions (numpy) from /joint_states."""
    import numpy as np
    return np.array(cmd.joint_state().position)


def two_point_goal(q0, delta, duration):
    """(t, q) points of a move by ``delta`` from ``q0``: the midpoint, then the end."""
    import numpy as np
    q1 = q0 + np.asarray(delta)
    return [(duration / 2, list((q0 + q1) / 2)), (duration, list(q1))]


def arm_or_fail(cmd, wait: float = 15.0):
    """Arm the executor (retrying while it is still waiting); the test fails if it refuses."""
    resp = cmd.arm(wait=wait)
    assert resp.success, resp.message


def wait_future(future, timeout: float) -> bool:
    """True once an rclpy future finishes, False after ``timeout`` seconds."""
    import threading
    done = threading.Event()
    future.add_done_callback(lambda _f: done.set())
    return done.wait(timeout)
