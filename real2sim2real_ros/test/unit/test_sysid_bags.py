"""core.sysid.bags: the time axis of an executor recording (ROS-free, synthetic bags).

A command with an explicit start time (header.stamp, the executor's start_delay) puts every
joint state exactly at ``stamp - start``, however late messages were delivered or however
far the cell's clock lags the recorder's; a "start now" command falls back to an estimate.
"""
import numpy as np
import pytest

from real2sim2real_ros.core.bag_io import BagWriter
from real2sim2real_ros.core.sysid.bags import BagRecordingError, recording_from_bag

NAMES = ['a', 'b']
JS, TR = '/joint_states', '/joint_trajectory_controller/joint_trajectory'


def _time(t):
    sec = int(np.floor(t))
    return {'sec': sec, 'nanosec': int(round((t - sec) * 1e9))}


def _q(t):
    """Starts at rest, like a probe's envelope."""
    return 0.05 * (1 - np.cos(2 * np.pi * np.asarray(t)))


def write_bag(path, start_stamp, *, cell_lag=0.03, seed=0, duration=1.0):
    """Joint states every 10 ms on the cell's clock (recorder time - cell_lag), delivered
    1-40 ms late; q(t) = _q(t) after the start at cell time 100.0 + 0.05 s."""
    rng = np.random.default_rng(seed)
    t_send = 100.0 + cell_lag        # recorder clock; the motion starts 50 ms later
    cell_start = 100.05
    points = [{'positions': [_q(t), 0.0], 'velocities': [],
               'accelerations': [], 'effort': [], 'time_from_start': _time(t)}
              for t in np.arange(0.0, duration + 1e-9, 0.1)]
    with BagWriter(path) as bag:
        bag.add_topic(JS, 'sensor_msgs/msg/JointState')
        bag.add_topic(TR, 'trajectory_msgs/msg/JointTrajectory')
        bag.write(TR, int(t_send * 1e9), {
            'header': {'stamp': _time(start_stamp), 'frame_id': ''},
            'joint_names': NAMES, 'points': points})
        for stamp in np.arange(100.01, cell_start + duration + 0.1, 0.01):
            t = stamp - cell_start
            q = _q(t) if t > 0 else 0.0
            recv = stamp + cell_lag + rng.uniform(0.001, 0.04)
            bag.write(JS, int(recv * 1e9), {
                'header': {'stamp': _time(stamp), 'frame_id': ''}, 'name': NAMES,
                'position': [q + 0.01, 0.02], 'velocity': [], 'effort': []})
    return path


def test_explicit_start_time_gives_the_exact_time_axis(tmp_path):
    rec = recording_from_bag(write_bag(tmp_path / 'bag', 100.05), NAMES)
    expected = np.arange(0.0, 1.1, 0.01)
    np.testing.assert_allclose(rec.times[:expected.size], expected, atol=1e-6)
    np.testing.assert_allclose(rec.positions[:, 0], _q(rec.times) + 0.01,
                               atol=1e-9)
    # q0 from the rest samples on both sides of the start (the arm is still there).
    np.testing.assert_allclose(rec.q0, [0.01, 0.02], atol=3e-4)
    np.testing.assert_allclose(rec.reference_start, [0.0, 0.0])


def test_start_now_is_estimated_from_the_fastest_delivery(tmp_path):
    # header.stamp 0: start assumed at send time + the smallest delivery delay (~1 ms here);
    # the motion really started 50 ms after sending, so the axis is off by about that.
    rec = recording_from_bag(write_bag(tmp_path / 'bag', 0.0), NAMES)
    moving = np.flatnonzero(np.abs(rec.positions[:, 0] - 0.01) > 1e-9)[0]
    assert rec.times[moving] == pytest.approx(0.05 + 0.01 - 0.0, abs=0.003)


def test_a_recording_that_ends_early_is_an_error(tmp_path):
    # States stop 0.3 s into a 1 s trajectory.
    path = tmp_path / 'short'
    with BagWriter(path) as bag:
        bag.add_topic(JS, 'sensor_msgs/msg/JointState')
        bag.add_topic(TR, 'trajectory_msgs/msg/JointTrajectory')
        bag.write(TR, 1, {'header': {'stamp': _time(10.0), 'frame_id': ''}, 'joint_names': NAMES,
                          'points': [{'positions': [0.0, 0.0], 'velocities': [],
                                      'accelerations': [], 'effort': [],
                                      'time_from_start': _time(1.0)}]})
        for stamp in np.arange(10.0, 10.3, 0.01):
            bag.write(JS, int(stamp * 1e9), {'header': {'stamp': _time(stamp), 'frame_id': ''},
                                             'name': NAMES, 'position': [0.0, 0.0],
                                             'velocity': [], 'effort': []})
    with pytest.raises(BagRecordingError, match='covering 0.30 s of a 1.00 s'):
        recording_from_bag(path, NAMES)
