"""The real bringup (emulated cell + robot executor, started by bringup.launch.xml through the
runner) on a private DDS domain: custom service and action round trips, arming, tracking,
recording + replay, e-stop, limit rejection. Node processes talk over Fast DDS."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from real2sim2real_ros.ros.topic_listener import TopicListener

pytestmark = pytest.mark.integration

from helpers.estop import stop_figures  # noqa: E402
from helpers.graph import arm_or_fail as _ensure_armed  # noqa: E402
from helpers.graph import joint_positions as _current  # noqa: E402
from helpers.graph import two_point_goal as _goal_points  # noqa: E402

from real2sim2real_msgs.action import ExecuteTrajectory  # noqa: E402

TrajResult = ExecuteTrajectory.Result


@pytest.fixture(scope='module')
def graph(emulated_bringup):
    return emulated_bringup


@pytest.fixture(scope='module')
def joints(graph):
    _, cmd, _ = graph
    js = cmd.joint_state(timeout=20)
    return list(js.name)


def test_graph_is_up_with_every_node_service_and_action(graph):
    _, cmd, _ = graph
    status = cmd.graph_status()
    assert status.complete, status


def test_custom_service_reset_objects_round_trip(graph):
    from real2sim2real_msgs.srv import ResetObjects
    _, cmd, _ = graph
    resp = cmd.reset_objects()
    assert resp.success, resp.message
    resp = cmd.call(ResetObjects, 'emulated_cell/reset_objects',
                    ResetObjects.Request(object_ids=['no_such_object']))
    assert not resp.success and 'no_such_object' in resp.message


def test_goal_while_disarmed_is_rejected_and_nothing_moves(graph, joints):
    _, cmd, _ = graph
    cmd.disarm()
    assert not cmd.executor_status().armed
    q0 = _current(cmd)
    result = cmd.execute_trajectory(joints, _goal_points(q0, [0.3, 0, 0, 0, 0, 0], 1.0),
                                    timeout=20)
    assert result.error_code == TrajResult.NOT_ARMED
    assert 'arm' in result.error_msg.lower()
    time.sleep(1.2)
    assert np.max(np.abs(_current(cmd) - q0)) < 0.005


def test_armed_execution_tracks_with_feedback_and_records(graph, joints):
    _, cmd, _ = graph
    _ensure_armed(cmd)
    live = TopicListener(__import__('sensor_msgs.msg', fromlist=['JointState']).JointState,
                         '/joint_states')
    feedback = []
    try:
        assert live.wait_for(20, timeout=10), 'the listener hears /joint_states before we move'
        q0 = _current(cmd)
        delta = [0.35, 0.15, -0.2, 0.1, 0.2, 0.3]
        result = cmd.execute_trajectory(joints, _goal_points(q0, delta, 2.5), record=True,
                                        feedback=feedback.append, timeout=30)
    finally:
        live.close()
    assert result.error_code == TrajResult.NONE, result.error_msg
    print(f'trajectory_topic backend: max tracking error {result.max_tracking_error:.4f} rad, '
          f'rms {result.rms_tracking_error:.4f} rad, final error {result.final_error:.4f} rad, '
          f'duration {result.duration:.2f} s')
    assert len(feedback) >= 10, 'feedback at ~20 Hz over 2.5 s'
    progress = [f.progress for f in feedback]
    assert progress == sorted(progress) and progress[-1] > 0.9
    assert 0.0 < result.max_tracking_error < 0.1
    assert result.final_error < 0.02
    assert 2.4 < result.duration < 5.0
    np.testing.assert_allclose(_current(cmd), q0 + delta, atol=0.02)
    # The bag: rosbag2 MCAP with commands and joint states, plus a manifest beside it.
    from real2sim2real_ros.core.bag_io import BagReader
    assert result.bag_path and os.path.isdir(result.bag_path)
    reader = BagReader(result.bag_path)
    topics = reader.topics
    assert reader.storage == 'mcap'
    js_topic = [t for t in topics if t.endswith('joint_states')][0]
    cmd_topic = [t for t in topics if t.endswith('joint_trajectory')][0]
    assert topics[js_topic].count >= 200 and topics[cmd_topic].count >= 1
    manifest = os.path.join(os.path.dirname(result.bag_path), 'manifest.json')
    assert os.path.isfile(manifest)
    # The cell publishes at 100 Hz: the bag holds every joint state that reached the executor
    # and the manifest counts those the stream lost on the way (stamp gaps), >= 90% of the
    # cell's rate over the execution together. Loss is a loaded PC's (measured at load 5:
    # 46 of 453, 10%); a quarter lost is a broken recorder or stream.
    with open(manifest) as f:
        res = json.load(f)['results']
    assert res['joint_states_recorded'] == topics[js_topic].count
    published = topics[js_topic].count + res['joint_states_lost']
    assert published >= 0.9 * 100 * reader.duration_ns / 1e9, res
    assert res['joint_states_lost'] <= 0.25 * published, res
    # The recorded joint states are the live ones: same stamps, same positions.
    live_by_stamp = {(m.header.stamp.sec, m.header.stamp.nanosec): m.position
                     for _, m in live.messages}
    recorded = [reader.deserialize(raw, t) for _, t, _, raw in reader.messages([js_topic])]
    first_live = min(live_by_stamp)
    recorded = [r for r in recorded if (r.header.stamp.sec, r.header.stamp.nanosec) >= first_live]
    matched = [r for r in recorded
               if (r.header.stamp.sec, r.header.stamp.nanosec) in live_by_stamp]
    # Completeness of the recording is asserted above from the rate; here the content: every
    # sample both saw is identical. (The cell's writer keeps 10 samples per reader, so this
    # test process's own listener may miss some when the machine is loaded.)
    assert len(recorded) >= 200 and len(matched) >= 0.5 * len(recorded)
    for r in matched:
        np.testing.assert_array_equal(
            r.position, live_by_stamp[(r.header.stamp.sec, r.header.stamp.nanosec)])
    graph[2].joinpath('last_bag').write_text(result.bag_path)


def test_recorded_bag_replays_and_matches_the_live_run(graph):
    """`r2s2r bag play` in a second private domain; a subscriber there gets the recorded
    joint states, byte-for-byte the ones the live run published, at the recorded pace."""
    from sensor_msgs.msg import JointState

    from real2sim2real_ros.core.bag_io import BagReader
    from real2sim2real_ros.ros.dds_isolation import allocate_domain_id
    bag = graph[2].joinpath('last_bag').read_text()
    reader = BagReader(bag)
    js_topic = [t for t in reader.topics if t.endswith('joint_states')][0]
    recorded = [reader.deserialize(raw, t) for _, t, _, raw in reader.messages([js_topic])]
    domain = allocate_domain_id()
    listener = TopicListener(JointState, js_topic, domain_id=domain)
    try:
        env = dict(os.environ, ROS_DOMAIN_ID=str(domain), R2S2R_DOMAIN_ID=str(domain))
        t0 = time.monotonic()
        proc = subprocess.run(
            [sys.executable, '-m', 'real2sim2real_ros.cli.main', 'bag', 'play', bag,
             '--topics', js_topic, '--wait-for-subscribers', '5'],
            env=env, capture_output=True, text=True, timeout=60)
        wall = time.monotonic() - t0
        assert proc.returncode == 0, proc.stderr
        listener.wait_for(len(recorded), timeout=3)
    finally:
        listener.close()
    replayed = [m for _, m in listener.messages]
    assert len(replayed) >= 0.98 * len(recorded)
    rec = {(m.header.stamp.sec, m.header.stamp.nanosec): m.position for m in recorded}
    for m in replayed:
        np.testing.assert_array_equal(m.position, rec[(m.header.stamp.sec, m.header.stamp.nanosec)])
    duration = reader.duration_ns / 1e9
    assert wall >= 0.9 * duration, 'played at the recorded pace, not as fast as possible'


def test_cancel_mid_motion_holds_the_arm(graph, joints):
    _, cmd, _ = graph
    _ensure_armed(cmd)
    q0 = _current(cmd)
    result = cmd.execute_trajectory(joints, _goal_points(q0, [-0.5, 0, 0, 0, 0, 0], 4.0),
                                    cancel_after=1.0, timeout=30)
    assert result.error_code == TrajResult.CANCELED, result.error_msg
    time.sleep(0.5)
    q_a = _current(cmd)
    time.sleep(0.5)
    assert np.max(np.abs(_current(cmd) - q_a)) < 0.005, 'the arm holds after cancel'
    assert 0.02 < abs(q_a[0] - q0[0]) < 0.45, 'it stopped part way'


def test_estop_mid_motion_holds_within_two_control_periods_of_the_cells_clock(graph, joints):
    from sensor_msgs.msg import JointState
    from trajectory_msgs.msg import JointTrajectory

    from real2sim2real_ros.ros import qos
    _, cmd, _ = graph
    _ensure_armed(cmd)
    q0 = _current(cmd)
    listener = TopicListener(JointState, '/joint_states')
    commands = TopicListener(JointTrajectory, '/joint_trajectory_controller/joint_trajectory',
                             qos=qos.COMMAND)
    # The controller's reference: control_msgs/JointTrajectoryControllerState (the real
    # package, or the stand-in make setup builds where no registry has it).
    from control_msgs.msg import JointTrajectoryControllerState
    reference = TopicListener(JointTrajectoryControllerState,
                              '/joint_trajectory_controller/controller_state')
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault('result', cmd.execute_trajectory(
        joints, _goal_points(q0, [0.6, 0, 0, 0, 0, 0], 2.0), timeout=30)))
    try:
        assert listener.wait_for(20, timeout=10)
        assert commands.wait_for_publishers(1, timeout=10) and reference.wait_for(1, timeout=10)
        worker.start()
        t_start = time.monotonic()
        # Motion start from /joint_states, a stream: the goal's one trajectory message can go
        # out before the executor has matched `commands` (discovery is per side; seeing the
        # publisher here does not mean it sees us), the stop's hold trajectory a second later
        # cannot.
        deadline = time.monotonic() + 10
        while abs(listener.snapshot()[-1][1].position[0] - q0[0]) < 0.005:
            assert time.monotonic() < deadline and worker.is_alive(), 'the arm never moved'
            time.sleep(0.01)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - t_start)))  # mid-motion, ~0.3 rad/s
        t_call, t_call_sent = time.monotonic(), time.time()
        resp = cmd.stop()
        t_resp = time.monotonic()
        worker.join(timeout=15)
        # Listen on until the state stream itself has reached 0.5 s past the hold command
        # (source timestamps), not a fixed 0.3 s of this process's time: a late-scheduled test
        # process may not have taken in the states after the hold by then. A fresh-clone run
        # failed 'speeds never came to about zero' while the executor logged the stop sent and
        # the goal STOPPED; the speeds it had received were not kept. Past the hold, not the
        # call: under two test suites at once the hold went out 505 ms after the call, and a
        # stream read to the call + 0.5 s held no state after the hold + 0.2 s to judge.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            sent = listener.snapshot_sent()
            holds = [t for t, _ in commands.snapshot_sent() if t >= t_call_sent]
            if holds and sent and sent[-1][0] >= holds[0] + 0.5:
                break
            time.sleep(0.05)
    finally:
        listener.close()
        commands.close()
        reference.close()
    assert resp.success, resp.message
    assert out['result'].error_code == TrajResult.STOPPED, out['result'].error_msg
    assert not cmd.executor_status().armed, 'stop disarms'
    # Every time below is a DDS source timestamp (when the executor or the cell wrote the
    # message, one system clock), so how late this process got to receive them under CPU load
    # is not in the figures. The stop command is the first trajectory the controller got
    # after the call.
    t_hold = [t for t, _ in commands.snapshot_sent() if t >= t_call_sent]
    assert t_hold, 'the executor sent a stop trajectory to the controller'
    t_hold = t_hold[0]
    f = stop_figures(listener.snapshot_sent(), reference.snapshot_sent(), t_call_sent, t_hold)
    ref_still, still, ref_span, arm_span = f.ref_still, f.still, f.ref_span, f.arm_span
    # The controller, on its own clock (helpers/estop.py): from the last state on the goal
    # (~0.45 rad/s mid-motion) to rest within the hold's 10 ms plus one control period (10 ms:
    # the hold applies some time after that state, the state is sampled at 100 Hz) and one
    # 1 ms physics chunk (the stamps' granularity): 21 ms. The hold starts from the executor's
    # measured position, behind the reference, so between the two the reference may run
    # backwards.
    assert ref_span <= 0.010 + 0.01 + 0.001, ref_span
    # The arm on the same clock: the measured speeds follow the reference's rest through the
    # servo (PD time constant kv/kp ~ 36 ms on the default cell's pan joint), the cell's
    # 12 ms actuator latency and the 3-sample smoothing (20 ms): within 0.12 s.
    assert arm_span < 0.12, arm_span
    print(f'e-stop: stop call -> hold command {1e3 * (t_hold - t_call_sent):.0f} ms '
          f'(service answered in {1e3 * (t_resp - t_call):.0f} ms); hold command -> '
          f'controller reference at rest {1e3 * (ref_still - t_hold):.0f} ms, -> measured '
          f'joint speeds < 0.05 rad/s {1e3 * (still - t_hold):.0f} ms (source timestamps); '
          f'on the cell\'s clock: reference moving -> at rest {1e3 * ref_span:.0f} ms, -> '
          f'arm still {1e3 * arm_span:.0f} ms')
    # End to end on the source timestamps (one system clock): hold command -> reference at
    # rest, and -> measured speeds about zero. These carry how soon the emulated controller,
    # which shares the 2 cores with the graph, the test and any load, is scheduled: idle
    # 16 / 34 ms; with one busy process per core beside the graph (n=11) up to 88 / 141 ms,
    # with two per core (n=3) up to 134 / 149 ms; CI's fresh machine 84 / 109 ms (it failed
    # the 82 ms bound this test had). A real cell's controller runs in its own real-time
    # loop; the bound here is that measured worst case with a margin, 0.25 s.
    assert ref_still - t_hold < 0.25
    assert still - t_hold < 0.25
    settled = f.smooth[f.times > t_hold + 0.2]
    assert settled.max() < 0.05, 'and after the servo transient (200 ms) they stay about zero'
    # A goal after the stop is refused until the operator arms again.
    result = cmd.execute_trajectory(joints, _goal_points(_current(cmd), [0.1] + [0] * 5, 1.0))
    assert result.error_code == TrajResult.NOT_ARMED


def test_trajectory_outside_joint_limits_is_rejected_and_nothing_moves(graph, joints):
    _, cmd, _ = graph
    _ensure_armed(cmd)
    q0 = _current(cmd)
    bad = list(q0)
    bad[2] = 3.5  # elbow limit is +-pi
    result = cmd.execute_trajectory(joints, [(1.0, list(q0)), (2.0, bad)], timeout=20)
    assert result.error_code == TrajResult.JOINT_LIMIT_VIOLATION
    assert 'elbow_joint' in result.error_msg
    fast = list(q0)
    fast[0] += 2.0  # 2 rad in 0.1 s: 20 rad/s against a 3.15 rad/s limit
    result = cmd.execute_trajectory(joints, [(0.1, fast)], timeout=20)
    assert result.error_code == TrajResult.VELOCITY_LIMIT_VIOLATION
    assert 'shoulder_pan_joint' in result.error_msg
    time.sleep(0.5)
    assert np.max(np.abs(_current(cmd) - q0)) < 0.005
    assert cmd.executor_status().armed, 'a rejected goal leaves the executor armed'


def test_tip_outside_the_workspace_is_rejected_and_nothing_moves(graph, joints):
    """The default params keep the tool tip above the table top (z >= 0): a move that would
    drive it into the table is refused before anything is sent."""
    _, cmd, _ = graph
    _ensure_armed(cmd)
    q0 = _current(cmd)
    down = list(q0)
    down[1] += 0.6  # shoulder lift down: the tip goes through the table top
    result = cmd.execute_trajectory(joints, [(3.0, down)], timeout=20)
    assert result.error_code == TrajResult.WORKSPACE_VIOLATION, result.error_msg
    time.sleep(0.5)
    assert np.max(np.abs(_current(cmd) - q0)) < 0.005


def test_node_reference_page_equals_the_live_graph(graph):
    """docs/nodes.md is what `r2s2r describe` reads off this bringup: every topic, service and
    action with its type, every parameter with its value, range and description. A node
    interface or parameter changed without regenerating the page fails here."""
    from pathlib import Path

    from real2sim2real_ros.cli.describe_cli import _share, describe_graph, to_markdown
    from real2sim2real_ros.ros.commander import expected_graph
    _, cmd, _ = graph
    # The bringup's nodes (a listener a test left alive is not part of the page).
    nodes = sorted([*expected_graph('emulated'), 'robot_executor_state_listener'])
    page = Path(__file__).resolve().parents[3] / 'docs' / 'nodes.md'
    want = page.read_text()
    deadline = time.monotonic() + 30.0   # discovery of the last publishers can lag
    while True:
        got = to_markdown(describe_graph(cmd, nodes), _share())
        if got == want or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    if got != want:
        import difflib
        diff = ''.join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                            'docs/nodes.md', 'live graph', n=1))
        pytest.fail('docs/nodes.md differs from the live graph; regenerate it with '
                    '`r2s2r describe --markdown docs/nodes.md` on the emulated bringup:\n'
                    + diff[:4000])
    assert got.count('\n## `/') >= 9
