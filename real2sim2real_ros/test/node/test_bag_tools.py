"""BagRecorder / BagPlayer over real rclpy pub/sub across processes.

A publisher process sends JointState at 100 Hz for 2 s; this process records it; the CLI
(``r2s2r bag play`` in another process) plays it back to a subscriber here, at rate 1 and 2.
"""
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import rclpy  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from rclpy.serialization import deserialize_message  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from real2sim2real_ros.core.bag_io import BagReader, to_dict  # noqa: E402
from real2sim2real_ros.ros.bag_tools import BagRecorder  # noqa: E402

TOPIC = '/bag_test/joint_states'
RATE_HZ, N_MSGS = 100.0, 200
REPO_PKG = Path(__file__).resolve().parents[2]


def test_domain_id() -> int:
    """A private domain of its own (these tests publish /joint_states like the cell does)."""
    from real2sim2real_ros.ros.dds_isolation import allocate_domain_id
    return allocate_domain_id()


test_domain_id.__test__ = False   # a helper, not a test


@pytest.fixture(scope='module')
def ros_env():
    domain = test_domain_id()
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), R2S2R_DOMAIN_ID=str(domain),
               ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST',
               PYTHONPATH=os.pathsep.join(
                   [str(REPO_PKG), *filter(None, [os.environ.get('PYTHONPATH')])]))
    old = {k: os.environ.get(k) for k in ('ROS_DOMAIN_ID', 'ROS_AUTOMATIC_DISCOVERY_RANGE')}
    os.environ.update(ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST')
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    node = rclpy.create_node('bag_test', context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    stop = threading.Event()
    spinner = threading.Thread(target=lambda: [executor.spin_once(timeout_sec=0.05)
                                               for _ in iter(stop.is_set, True)], daemon=True)
    spinner.start()
    procs = []
    try:
        yield env, node, procs
    finally:
        for p in procs:            # kill every process this module started, by its own handle
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        stop.set()
        spinner.join(timeout=5)
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


PUBLISHER = textwrap.dedent(f"""
    import sys, time
    import rclpy
    from sensor_msgs.msg import JointState
    rclpy.init()
    node = rclpy.create_node('bag_test_publisher')
    pub = node.create_publisher(JointState, {TOPIC!r}, 10)
    deadline = time.monotonic() + 20
    while pub.get_subscription_count() == 0:
        if time.monotonic() > deadline:
            sys.exit('no recorder subscribed')
        time.sleep(0.01)
    time.sleep(0.3)
    t0 = time.monotonic()
    for i in range({N_MSGS}):
        while time.monotonic() < t0 + i / {RATE_HZ}:
            time.sleep(0.0005)
        msg = JointState()
        msg.header.stamp = node.get_clock().now().to_msg()
        msg.header.frame_id = 'base_link'
        msg.name = ['shoulder', 'elbow']
        msg.position = [i * 0.001, -float(i)]
        msg.velocity = [0.5, 1e-9 * i]
        pub.publish(msg)
    time.sleep(1.0)   # let reliable delivery finish before the participant goes away
    node.destroy_node()
    rclpy.shutdown()
""")


@pytest.fixture(scope='module')
def recorded_bag(ros_env, tmp_path_factory):
    env, node, procs = ros_env
    path = tmp_path_factory.mktemp('bags') / 'joint_states_bag'
    recorder = BagRecorder(node, path, [TOPIC])
    pub = subprocess.Popen([sys.executable, '-c', PUBLISHER], env=env)
    procs.append(pub)
    assert pub.wait(timeout=40) == 0
    time.sleep(0.3)
    recorder.close()
    return path


def _median_period_s(stamps_ns):
    return statistics.median(b - a for a, b in zip(stamps_ns, stamps_ns[1:])) / 1e9


def test_recorder_captures_the_stream(recorded_bag):
    with BagReader(recorded_bag) as bag:
        topic = bag.topics[TOPIC]
        assert topic.msgtype == 'sensor_msgs/msg/JointState'
        assert topic.offered_qos[0]['reliability'] == 'reliable'
        msgs = [(ts, raw) for _t, _ty, ts, raw in bag.messages()]
        decoded = [to_dict(bag.deserialize(raw, 'sensor_msgs/msg/JointState'))
                   for _ts, raw in msgs]
    assert abs(len(msgs) - N_MSGS) <= 0.02 * N_MSGS
    assert [d['position'][1] for d in decoded] == [-float(i) for i in range(len(msgs))]
    assert decoded[7]['position'][0] == 7 * 0.001 and decoded[7]['name'] == ['shoulder', 'elbow']
    assert _median_period_s([ts for ts, _ in msgs]) == pytest.approx(1 / RATE_HZ, rel=0.1)
    # rclpy reads back exactly what is in the bag
    assert list(deserialize_message(msgs[3][1], JointState).position) == [0.003, -3.0]


def _play_and_receive(ros_env, bag, rate, expected):
    """Play ``bag`` with the CLI in another process; collect (source ns, raw) here.

    The player's pace is read from each sample's source timestamp (when the player wrote
    it), not from when this process got to it: a busy machine delays and bunches delivery
    without the player being off its schedule."""
    env, node, procs = ros_env
    received = []
    sub = node.create_subscription(
        JointState, TOPIC, lambda raw, info: received.append((info['source_timestamp'], raw)),
        QoSProfile(depth=500, reliability=ReliabilityPolicy.RELIABLE), raw=True)
    try:
        player = subprocess.Popen(
            [sys.executable, '-m', 'real2sim2real_ros.cli.bag_cli', 'play', str(bag),
             '--rate', str(rate), '--wait-for-subscribers', '15', '--delay', '0.5',
             '--no-progress'],
            env=env, stderr=subprocess.PIPE, text=True)
        procs.append(player)
        _out, err = player.communicate(timeout=60)
        assert player.returncode == 0, err
        assert 'warning' not in err, err    # every message acknowledged before it exited
        # Acknowledged means in this reader's history; the spinner may still be taking them.
        deadline = time.monotonic() + 10
        while len(received) < expected and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        node.destroy_subscription(sub)
    return received


@pytest.mark.parametrize('rate', [1.0, 2.0])
def test_player_replays_content_and_timing(ros_env, recorded_bag, rate):
    with BagReader(recorded_bag) as bag:
        recorded = [(ts, bytes(raw)) for _t, _ty, ts, raw in bag.messages()]
    received = _play_and_receive(ros_env, recorded_bag, rate, len(recorded))

    assert abs(len(received) - len(recorded)) <= 0.02 * len(recorded)
    # content exact: every received message is the recorded one, in order
    rec_raw = [raw for _ts, raw in recorded]
    got_raw = [bytes(raw) for _ts, raw in received]
    start = rec_raw.index(got_raw[0])
    assert got_raw == rec_raw[start:start + len(got_raw)]

    rec_ts = [ts for ts, _ in recorded][start:start + len(got_raw)]
    got_ts = [ts for ts, _ in received]
    pace = _schedule(rec_ts, got_ts, rate)
    print(f'rate {rate}: {len(received)}/{len(recorded)} msgs, fitted pace '
          f'{pace["slope"] * rate:.3f} x the schedule, early at most {pace["early_ms"]:.2f} ms, '
          f'late median {pace["late_median_ms"]:.1f} ms, max {pace["late_max_ms"]:.1f} ms, '
          f'median period {_median_period_s(got_ts) * 1e3:.2f} ms')
    # Never ahead of the schedule: message i goes out (bag time i - start) / rate after the
    # first or later. Measured 0.4-0.8 ms "early" (the first message's own publish cost),
    # with three busy processes beside the test in its scheduling group.
    assert pace['early_ms'] <= 5.0
    # The pace is the recorded one over rate: the least-squares slope of when each message
    # went out against when it was recorded. Not the median period: under that load the
    # player wakes 1-20 ms late and then catches up, which took the median period at rate 2
    # to 3.97-4.40 ms in 3 of 4 runs (and failed CI) while the slope stayed at 1.000.
    assert pace['slope'] == pytest.approx(1 / rate, rel=0.1)


def _schedule(rec_ts, got_ts, rate):
    """When each message went out against the player's schedule (first message = 0)."""
    import numpy as np
    rec = (np.asarray(rec_ts, float) - rec_ts[0]) / 1e9
    got = (np.asarray(got_ts, float) - got_ts[0]) / 1e9
    late = got - rec / rate
    return {'slope': float(np.polyfit(rec, got, 1)[0]), 'early_ms': float(-late.min() * 1e3),
            'late_median_ms': float(np.median(late) * 1e3),
            'late_max_ms': float(late.max() * 1e3)}


def test_cli_record_ends_cleanly_on_sigint(ros_env, tmp_path):
    """`r2s2r bag record` in its own process: SIGINT finishes a valid bag, exit code 0."""
    env, node, procs = ros_env
    out = tmp_path / 'cli_bag'
    rec = subprocess.Popen(
        [sys.executable, '-m', 'real2sim2real_ros.cli.bag_cli', 'record', '-o', str(out),
         '/bag_test/cli_topic'], env=env, stderr=subprocess.PIPE, text=True)
    procs.append(rec)
    from std_msgs.msg import String
    pub = node.create_publisher(String, '/bag_test/cli_topic', 10)
    try:
        deadline = time.monotonic() + 20
        while pub.get_subscription_count() == 0:
            assert time.monotonic() < deadline and rec.poll() is None, 'recorder never subscribed'
            time.sleep(0.02)
        time.sleep(0.3)
        for i in range(30):
            pub.publish(String(data=f'hello {i}'))
            time.sleep(0.01)
        time.sleep(0.5)
        assert not out.exists(), 'the bag must appear only when recording ends'
        rec.send_signal(signal.SIGINT)
        _out, err = rec.communicate(timeout=20)
    finally:
        node.destroy_publisher(pub)
    assert rec.returncode == 0, err
    with BagReader(out) as bag:
        got = [bag.deserialize(raw, ty).data for _t, ty, _ts, raw in bag.messages()]
    assert got == [f'hello {i}' for i in range(30)]


def test_player_publishes_recorded_clock(ros_env, recorded_bag):
    """With publish_clock, /clock walks through the recorded time, never backwards."""
    from rosgraph_msgs.msg import Clock

    from real2sim2real_ros.ros.bag_tools import BagPlayer
    _env, node, _procs = ros_env
    clocks = []
    sub = node.create_subscription(
        Clock, '/clock', lambda m: clocks.append(m.clock.sec * 10**9 + m.clock.nanosec),
        QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE))
    player = BagPlayer(node, recorded_bag, rate=4.0, publish_clock=True, clock_hz=200.0,
                       topics=[TOPIC], wait_for_subscribers_s=10)
    try:
        deadline = time.monotonic() + 10
        while player._clock_pub.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        published = player.play()
        time.sleep(0.3)
    finally:
        player.close()
        node.destroy_subscription(sub)
    with BagReader(recorded_bag) as bag:
        start, end = bag.start_ns, bag.end_ns
    assert published >= 0.98 * N_MSGS
    assert len(clocks) >= published          # one per message plus the ticks in between
    assert all(start <= c <= end for c in clocks), (start, end, clocks[:3], clocks[-3:])
    assert all(b >= a for a, b in zip(clocks, clocks[1:]))
    assert clocks[-1] == end
