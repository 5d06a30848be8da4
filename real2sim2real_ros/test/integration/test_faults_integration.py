"""Faults on the live graph, each with its named error and nothing lost: the cell (its camera
topics, its controller) dies in the middle of a capture or an execution.

The executor (topic backend) and camera_capture (``source: topics``, reading the cell's
camera topics as it would a RealSense driver's) run as supervised graphs of their own; each
test starts its own emulated cell (cell_emulated.launch.xml's cell node) and kills it."""
from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

from helpers.graph import joint_positions as _q  # noqa: E402
from helpers.graph import two_point_goal as _points  # noqa: E402

from real2sim2real_msgs.action import Capture, ExecuteTrajectory  # noqa: E402

TrajResult = ExecuteTrajectory.Result
CaptureResult = Capture.Result


@pytest.fixture(scope='module')
def graph(share_dir, tmp_path_factory):
    """(start_cell() -> LaunchedGraph, executor graph, capture graph, commander, tmp)."""
    from helpers.graph import launch_file

    from real2sim2real_ros.launch_runner import LaunchedGraph
    from real2sim2real_ros.launch_runner.parser import parse_launch_file
    from real2sim2real_ros.launch_runner.plan import LaunchPlan
    from real2sim2real_ros.ros.commander import Commander
    tmp = tmp_path_factory.mktemp('faults')
    env = dict(os.environ, R2S2R_RUN_DIR=str(tmp / 'runs'))
    cell_plan = parse_launch_file(launch_file('cell_emulated.launch.xml'),
                                  {'run_dir': str(tmp / 'runs')})
    nodes = {n.name: n for n in cell_plan.nodes}
    capture_plan = parse_launch_file(launch_file('capture.launch.xml'), {
        'capture_source': 'topics', 'cameras': "['camera']", 'run_dir': str(tmp / 'runs')})
    capture_node = next(n for n in capture_plan.nodes if n.name == 'camera_capture')
    started = []

    def start(plan, node, label):
        g = LaunchedGraph(LaunchPlan(plan.file, plan.launch_arguments, [node]), env=env,
                          log_dir=tmp / f'logs_{label}_{len(started)}')
        started.append(g)
        return g.start()

    executor = start(cell_plan, nodes['robot_executor'], 'executor')
    capture = start(capture_plan, capture_node, 'capture')
    cmd = Commander(node_name='faults_test_commander')
    try:
        yield (lambda: start(cell_plan, nodes['emulated_cell'], 'cell'), executor, capture,
               cmd, tmp)
    finally:
        cmd.close()
        for g in started:
            g.stop(timeout=30)


def _set(cmd, node, **values):
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters
    params = [Parameter(name=k, value=ParameterValue(type=ParameterType.PARAMETER_DOUBLE,
                                                     double_value=float(v)))
              for k, v in values.items()]
    resp = cmd.call(SetParameters, f'{node}/set_parameters',
                    SetParameters.Request(parameters=params), timeout=20)
    assert all(r.successful for r in resp.results), resp.results


def _first_frame(topic: str, timeout: float) -> None:
    from sensor_msgs.msg import Image

    from real2sim2real_ros.ros import qos
    from real2sim2real_ros.ros.topic_listener import TopicListener
    frames = TopicListener(Image, topic, qos.SENSOR_DATA)
    try:
        assert frames.wait_for(1, timeout), f'no {topic} frame within {timeout:.0f} s'
    finally:
        frames.close()


def _kill(cell):
    pid = cell.pids()['emulated_cell']
    os.kill(pid, signal.SIGKILL)
    return time.monotonic()


def test_capture_without_a_camera_driver_names_the_unpublished_topics(graph):
    """No cell runs yet (this module's first test): a capture ends NO_FRAMES naming every
    camera topic nobody publishes, after camera_capture's timeout for the topics to match,
    and writes nothing. Before stop 53 the same goal waited out the view's timeout and
    reported 0/1 synchronised frames, as if a driver ran and its frames were out of sync."""
    _start_cell, _executor, capture, cmd, tmp = graph
    _set(cmd, 'camera_capture', timeout=1.0)
    run_dir = tmp / 'no_driver_runs'
    t0 = time.monotonic()
    result = cmd.run_action(Capture, 'camera_capture/capture',
                            Capture.Goal(num_views=1, run_dir=str(run_dir)), timeout=60)
    took = time.monotonic() - t0
    print(f'no driver: code {result.error_code} after {took:.2f} s: {result.error_msg}')
    assert result.error_code == CaptureResult.NO_FRAMES, result.error_msg
    assert result.error_msg.startswith('camera: no publisher on ')
    assert result.error_msg.count('/camera/') == 3, result.error_msg  # colour, depth, info
    assert '/camera/color/image_raw' in result.error_msg, result.error_msg
    assert 'within 1.0 s' in result.error_msg
    # 2 s for the joint_states discovery wait (nothing publishes them either) + 1 s.
    assert 3.0 <= took < 3.0 + 10.0, took
    assert not list(run_dir.glob('capture_*/manifest.json'))
    assert capture.alive('camera_capture')


def test_camera_topics_stop_mid_capture_is_a_camera_timeout(graph):
    """Views 1.0 s apart; the cell (the camera driver) dies after the first: NO_FRAMES naming
    the camera and its topics after camera_capture's timeout; no capture set is written."""
    start_cell, _executor, capture, cmd, tmp = graph
    cell = start_cell()
    try:
        cmd.joint_state(timeout=60)
        # The camera streams before the goal: with the node's 2 s timeout, a fresh cell's
        # first render (1.7 s after its start, under load) once came too late for view 1.
        _first_frame('camera/color/image_raw', timeout=60)
        _set(cmd, 'camera_capture', timeout=2.0, view_interval=1.0)
        run_dir = tmp / 'capture_runs'
        first_view = threading.Event()
        out = {}
        worker = threading.Thread(target=lambda: out.setdefault('result', cmd.run_action(
            Capture, 'camera_capture/capture',
            Capture.Goal(num_views=5, run_dir=str(run_dir)),
            feedback=lambda fb: first_view.set(), timeout=90)))
        worker.start()
        assert first_view.wait(60), 'no first view from the live camera'
        t_kill = _kill(cell)
        worker.join(timeout=60)
        took = time.monotonic() - t_kill
    finally:
        cell.stop(timeout=30)
    result = out['result']
    print(f'camera gone mid-capture: code {result.error_code} after {took:.2f} s: '
          f'{result.error_msg}')
    assert result.error_code == CaptureResult.NO_FRAMES, result.error_msg
    assert result.error_msg.startswith('camera:') and 'camera/color/image_raw' in \
        result.error_msg and 'within 2.0 s' in result.error_msg
    # The 2 s window starts in camera_capture when it has sent the first view's feedback;
    # the kill follows the feedback's arrival here, so took = 2 s minus the feedback's
    # delivery time. A fresh clone run beside a second one (load ~8) measured 1.899 s
    # against the old lower bound 1.9, with the node's timeout exactly 2.0 s: the bound
    # measured the test's feedback latency. 1.5 s still fails a timeout cut short.
    assert 1.5 < took < 2.0 + 3.0, took     # timeout 2 s + a view's processing, loaded
    # Nothing marked complete: no capture folder holds a manifest.
    assert not list(run_dir.glob('capture_*/manifest.json'))
    assert capture.alive('camera_capture')


def _start_move(cmd, joints, q0):
    """A 3 s move of the first joint by 0.5 rad on a thread: (thread, {'result'}, an event
    set a third of the way, when the motion runs on the cell)."""
    out, moving = {}, threading.Event()
    worker = threading.Thread(target=lambda: out.setdefault(
        'result', cmd.execute_trajectory(
            joints, _points(q0, [0.5, 0, 0, 0, 0, 0], 3.0), record=True, timeout=30,
            feedback=lambda fb: fb.progress > 0.33 and moving.set())))
    worker.start()
    return worker, out, moving


def test_cell_dies_mid_execution_aborts_disarms_and_keeps_the_record(graph):
    """Topic backend: the cell is killed 1 s into a 3 s move. The executor ends the goal with
    BACKEND_UNAVAILABLE (joint_states stopped arriving; disarmed) within state_timeout plus a
    supervision period or so; its manifest and the recording up to the kill are written."""
    from real2sim2real_ros.core.bag_io import BagReader
    start_cell, executor, _capture, cmd, tmp = graph
    cell = start_cell()
    try:
        joints = list(cmd.joint_state(timeout=60).name)
        # Discovery runs on each side: the executor may see the new cell's subscription (and
        # arm) before the cell has matched the executor's publisher, and the cell then never
        # receives that first trajectory. The executor aborts it safely (TRACKING_ERROR: the
        # arm did not follow; seen once in a fresh-clone run, the arm still at 0.946 s of the
        # 3 s move); the move is sent again, at most twice more.
        for attempt in range(3):
            deadline = time.monotonic() + 30    # until the executor has matched the new cell
            while not (resp := cmd.arm(wait=30)).success and time.monotonic() < deadline:
                time.sleep(0.2)
            assert resp.success, resp.message
            worker, out, moving = _start_move(cmd, joints, _q(cmd))
            while worker.is_alive() and not moving.wait(0.1):
                pass
            if moving.is_set():
                break
            worker.join(timeout=30)
            lost = out.get('result')
            assert lost is not None and lost.error_code == TrajResult.TRACKING_ERROR \
                and attempt < 2, f'the motion never started: {lost}'
            print(f'attempt {attempt}: the cell missed the trajectory ({lost.error_msg})')
        t_kill = _kill(cell)
        worker.join(timeout=30)
        took = time.monotonic() - t_kill
    finally:
        cell.stop(timeout=30)
    result = out['result']
    print(f'cell killed mid-execution: executor result after {took:.2f} s: {result.error_msg}')
    assert result.error_code == TrajResult.BACKEND_UNAVAILABLE, result.error_msg
    assert 'joint_states stopped arriving' in result.error_msg and 'disarmed' in \
        result.error_msg
    status = cmd.executor_status()
    assert not status.armed and executor.alive('robot_executor')
    assert took < 1.0 + 2.0     # state_timeout 1 s (params.yaml) + supervision, loaded CI
    manifest = sorted((tmp / 'runs').glob('execute_[0-9]*/manifest.json'))[-1]
    res = json.loads(manifest.read_text())['results']
    assert res['error_name'] == 'BACKEND_UNAVAILABLE' and res['bag_path'] == result.bag_path
    with BagReader(result.bag_path) as bag:
        counts = {t: s.count for t, s in bag.topics.items()}
    assert counts['/joint_states'] > 30      # ~1 s at 100 Hz before the kill (loaded: fewer)
    assert counts['/joint_trajectory_controller/joint_trajectory'] >= 2   # the move, the stop


class _LaggingCell:
    """A stand-in cell whose joint_states arrive on time but carry stamps ``lag`` s old (a
    driver or emulator whose clock has fallen behind): the arm holds still at ``q``."""

    def __init__(self, q, lag: float):
        import threading

        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from sensor_msgs.msg import JointState
        from std_msgs.msg import String
        from trajectory_msgs.msg import JointTrajectory

        from real2sim2real_ros.core.robot_description import default_cell_urdf, load_robot
        from real2sim2real_ros.ros import qos
        self.robot = load_robot(default_cell_urdf())
        self.q, self.lag = list(q), lag
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node('lagging_cell', context=self.ctx)
        self.pub = self.node.create_publisher(JointState, 'joint_states', qos.STATE)
        self.desc = self.node.create_publisher(String, 'robot_description', qos.LATCHED)
        self.desc.publish(String(data=Path(default_cell_urdf()).read_text()))
        self.commands = []
        self.sub = self.node.create_subscription(
            JointTrajectory, 'joint_trajectory_controller/joint_trajectory',
            self.commands.append, qos.COMMAND)
        self.node.create_timer(0.01, self._publish)
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _publish(self):
        from builtin_interfaces.msg import Time
        from sensor_msgs.msg import JointState
        t = self.node.get_clock().now().nanoseconds * 1e-9 - self.lag
        msg = JointState(name=list(self.robot.joint_names), position=self.q,
                         velocity=[0.0] * len(self.q))
        msg.header.stamp = Time(sec=int(t), nanosec=int((t % 1) * 1e9))
        self.pub.publish(msg)

    def wait_matched(self, timeout: float = 30.0):
        """Until the executor's joint_states subscription has matched this publisher, plus
        0.5 s for the other side of discovery (one CI run started the goal before the fresh
        publisher was discovered: 'joint_states stopped arriving for 1.00 s')."""
        deadline = time.monotonic() + timeout
        while self.pub.get_subscription_count() < 1:
            assert time.monotonic() < deadline, 'the executor never subscribed to joint_states'
            time.sleep(0.05)
        time.sleep(0.5)

    def _spin(self):
        try:
            self.executor.spin()
        except Exception:  # noqa: BLE001 - context shut down
            pass

    def close(self):
        import rclpy
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)
        self.thread.join(timeout=2.0)


@pytest.mark.parametrize('lag, code', [(0.3, TrajResult.NONE), (1.5, TrajResult.NONE),
                                       (2.5, TrajResult.STALE_STATE)])
def test_old_states_are_stale_state_not_a_tracking_error(graph, lag, code):
    """States stamped ``lag`` s late: up to 2 s they are judged at their stamps and the hold
    succeeds (state_timeout 1 s is about arrival); 2.5 s is STALE_STATE ("the executor's
    state is old"), disarmed, never TRACKING_ERROR. Before STALE_STATE the 2.5 s case was
    judged at the arrival time."""
    _start_cell, executor, _capture, cmd, _tmp = graph
    q = [0.0, -1.5708, 1.5708, 1.5708, 0.0, 0.0]
    cell = _LaggingCell(q, lag)
    try:
        cell.wait_matched()
        deadline = time.monotonic() + 30
        while not (resp := cmd.arm(wait=30)).success and time.monotonic() < deadline:
            time.sleep(0.2)
        assert resp.success, resp.message
        t0 = time.monotonic()
        result = cmd.execute_trajectory(list(cell.robot.joint_names), [(1.0, q), (3.0, q)],
                                        record=False, timeout=30)
        took = time.monotonic() - t0
    finally:
        cell.close()
    print(f'states {lag} s late: {result.error_code} after {took:.2f} s: {result.error_msg}')
    assert result.error_code == code, result.error_msg
    if code == TrajResult.STALE_STATE:
        assert "the executor's state is old" in result.error_msg
        assert 'disarmed' in result.error_msg
        # The age includes the delivery delay: 2.51 s for 2.5 s stamps in a CI run at load
        # 10-17 (2.50 s on a quiet machine).
        age = re.search(r'latest was ([0-9.]+) s old when it arrived', result.error_msg)
        assert age and lag <= float(age.group(1)) < lag + 0.25, result.error_msg
        assert not cmd.executor_status().armed and executor.alive('robot_executor')
        assert took < 10.0
    else:
        cmd.disarm()
