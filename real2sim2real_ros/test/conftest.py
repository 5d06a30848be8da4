"""Shared fixtures: a private DDS domain per test session, and the package's real launch files.

Every process a test starts inherits ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST and a
ROS_DOMAIN_ID that no other concurrent run holds (real2sim2real_ros.dds_isolation), so
parallel runs on one machine never see each other and no DDS traffic leaves the machine.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_configure(config):
    # Set before any test imports rclpy, so in-process clients join the same private domain.
    from real2sim2real_ros.dds_isolation import isolate
    isolate()
    os.environ.setdefault('MUJOCO_GL', 'egl')


@pytest.fixture(scope='session')
def ros_domain_id() -> int:
    return int(os.environ['ROS_DOMAIN_ID'])


def package_share() -> Path:
    from ament_index_python.packages import get_package_share_directory
    return Path(get_package_share_directory('real2sim2real_ros'))


def launch_file(name: str) -> Path:
    return package_share() / 'launch' / name


@pytest.fixture(scope='session')
def share_dir() -> Path:
    try:
        return package_share()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f'real2sim2real_ros is not built/sourced (run via `make test`): {exc}')


def start_graph(launch_name: str, launch_args: dict, tmp_path: Path):
    """Start one of the package's launch files through the runner (``ros2 launch`` itself is
    exercised by the launch_pytest tests on lab machines)."""
    from real2sim2real_ros.launch_runner import LaunchedGraph
    env = dict(os.environ)
    env['R2S2R_RUN_DIR'] = str(tmp_path / 'runs')
    graph = LaunchedGraph(launch_file(launch_name), launch_args, env=env,
                          log_dir=tmp_path / 'launch_logs')
    return graph.start()


@pytest.fixture(scope='module')
def emulated_bringup(share_dir, tmp_path_factory):
    """bringup.launch.xml with the emulated cell, up until the module's tests finish."""
    from real2sim2real_ros.commander import Commander
    tmp = tmp_path_factory.mktemp('bringup')
    graph = start_graph('bringup.launch.xml', {
        'cell': 'emulated', 'cell_real_time': 'true',
        'run_dir': str(tmp / 'runs')}, tmp)
    cmd = Commander(node_name='test_commander')
    try:
        cmd.wait_until_up(timeout=60)
        yield graph, cmd, tmp
    finally:
        cmd.close()
        code = graph.stop(timeout=30)
        assert code is not None, 'launch did not stop within 30 s'


class TopicListener:
    """Collects messages of one topic in its own rclpy context (optionally another domain),
    spinning on a background thread. ``messages`` holds (receive_time_s, msg)."""

    def __init__(self, msg_type, topic: str, qos=None, domain_id: int | None = None):
        import threading
        import time

        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        from rclpy.qos import QoSProfile, ReliabilityPolicy
        self._time = time
        self.ctx = rclpy.Context()
        kwargs = {'context': self.ctx}
        if domain_id is not None:
            kwargs['domain_id'] = domain_id
        rclpy.init(**kwargs)
        self.node = rclpy.create_node('test_listener', context=self.ctx)
        self.messages = []
        self._lock = threading.Lock()
        # Default: reliable with a deep history, so a loaded machine loses nothing on the
        # reader's side (the publishers' own QoS still decides what is offered).
        deep = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        self.node.create_subscription(msg_type, topic, self._on_msg, qos or deep)
        self._executor = SingleThreadedExecutor(context=self.ctx)
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self):
        try:
            self._executor.spin()
        except Exception:  # noqa: BLE001 - context shut down
            pass

    def _on_msg(self, msg):
        with self._lock:
            self.messages.append((self._time.monotonic(), msg))

    def snapshot(self):
        with self._lock:
            return list(self.messages)

    def wait_for(self, count: int, timeout: float) -> bool:
        deadline = self._time.monotonic() + timeout
        while self._time.monotonic() < deadline:
            if len(self.messages) >= count:
                return True
            self._time.sleep(0.05)
        return False

    def close(self):
        import rclpy
        self._executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)
        self._thread.join(timeout=2.0)
