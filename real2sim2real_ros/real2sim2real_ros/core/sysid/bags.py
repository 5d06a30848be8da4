"""Identification inputs from the executor's recordings (ROS-free).

The robot_executor records each execution to a rosbag2 MCAP folder holding the commanded
``trajectory_msgs/JointTrajectory`` (stamped with the executor's clock when it was sent) and
the ``sensor_msgs/JointState`` stream (bag time: when the executor received it; header stamp:
when the cell measured it). :func:`recording_from_bag` turns one into a
:class:`~.fit.Recording` on the trajectory's time axis:

* sample time = header stamp - the command's start time, when the command carries one
  (header.stamp != 0: the executor's ``start_delay``; the controller starts it then, on the
  clock that stamps ``joint_states``), which is exact whatever the delivery delays;
* for a "start now" command (header.stamp = 0) the start is estimated: sample time = header
  stamp + clock offset - send time, the clock offset being the smallest (receive time -
  header stamp) over the bag. That assumes the command travelled as fast as the fastest joint
  state and that the cell's clock did not lag more when the command arrived than at its
  best; either error shifts the whole recording (measured: 0.5-2 ms on the emulated cell);
* q0 = mean of the samples in the ``rest_window`` seconds before the start and after it (the
  arm is at rest there: the probe envelope starts flat and the command latency delays any
  motion), which averages the sensor noise out of the initial state.

A bag without either topic raises :class:`MissingTopicsError` (Identify MISSING_TOPICS).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..bag_io import BagError, BagReader
from .fit import Recording

__all__ = ['STRIKE_INFO_TOPIC', 'BagRecordingError', 'MissingTopicsError', 'is_strike_bag',
           'recording_from_bag', 'strike_recording_from_bag', 'write_strike_bag']

JOINT_STATE_TYPE = 'sensor_msgs/msg/JointState'
TRAJECTORY_TYPE = 'trajectory_msgs/msg/JointTrajectory'


class BagRecordingError(ValueError):
    """A bag cannot be turned into a recording (unreadable, too short, wrong joints)."""


class MissingTopicsError(BagRecordingError):
    """The bag lacks a joint_states or a joint_trajectory topic."""


def _stamp(t) -> float:
    return t.sec + t.nanosec * 1e-9


def _pick_topic(topics: dict, msgtype: str, wanted: str | None, path) -> str | None:
    if wanted:
        t = topics.get(wanted)
        return wanted if t is not None and t.msgtype == msgtype and t.count else None
    hits = [n for n, t in topics.items() if t.msgtype == msgtype and t.count]
    return sorted(hits, key=lambda n: -topics[n].count)[0] if hits else None


def recording_from_bag(path, joint_names, *, joint_states_topic: str | None = None,
                       trajectory_topic: str | None = None, rest_window: float = 0.03,
                       name: str | None = None) -> Recording:
    """A Recording (joints in ``joint_names`` order) from one executor bag.

    Topics are found by type unless named. The first JointTrajectory message is the
    commanded one (later ones are stop ramps).
    """
    path = Path(path)
    names = list(joint_names)
    try:
        reader = BagReader(path)
    except (BagError, OSError, ValueError) as exc:
        raise MissingTopicsError(f'cannot read bag {path}: {exc}') from None
    with reader:
        topics = reader.topics
        js_topic = _pick_topic(topics, JOINT_STATE_TYPE, joint_states_topic, path)
        tr_topic = _pick_topic(topics, TRAJECTORY_TYPE, trajectory_topic, path)
        missing = [f'{what} ({t})' for what, t, got in (
            (joint_states_topic or 'joint_states', JOINT_STATE_TYPE, js_topic),
            (trajectory_topic or 'joint_trajectory', TRAJECTORY_TYPE, tr_topic)) if got is None]
        if missing:
            raise MissingTopicsError(
                f'bag {path} has no {" and no ".join(missing)} messages; it has '
                f'{sorted((n, t.msgtype) for n, t in topics.items())}')
        command, t_send, t_start = None, None, 0.0
        recv, stamps, rows = [], [], []
        for topic, msgtype, ts, raw in reader.messages([js_topic, tr_topic]):
            msg = reader.deserialize(raw, msgtype)
            if topic == tr_topic:
                if command is None:
                    command, t_send = msg, ts * 1e-9
                    t_start = _stamp(msg.header.stamp)
                continue
            index = {n: i for i, n in enumerate(msg.name)}
            if any(n not in index for n in names) or len(msg.position) < len(msg.name):
                continue
            recv.append(ts * 1e-9)
            stamps.append(_stamp(msg.header.stamp))
            rows.append([msg.position[index[n]] for n in names])
    cmd_index = {n: i for i, n in enumerate(command.joint_names)}
    absent = [n for n in names if n not in cmd_index]
    if absent:
        raise BagRecordingError(f'bag {path}: the commanded trajectory lacks joints {absent}')
    if not command.points:
        raise BagRecordingError(f'bag {path}: the commanded trajectory has no points')
    order = [cmd_index[n] for n in names]
    traj_times = np.array([_stamp(p.time_from_start) for p in command.points])
    traj_pos = np.array([np.asarray(p.positions, float)[order] for p in command.points])
    has_vel = all(len(p.velocities) == len(cmd_index) for p in command.points)
    traj_vel = (np.array([np.asarray(p.velocities, float)[order] for p in command.points])
                if has_vel else None)
    recv, stamps, q = np.array(recv), np.array(stamps), np.array(rows, float)
    stamped = stamps.size and np.all(stamps > 0)
    if stamped and t_start > 0:
        times = stamps - t_start
    elif stamped:
        times = stamps + np.min(recv - stamps) - t_send
    else:   # unstamped states: receive times are all there is
        times = recv - t_send
    rest = (times > -rest_window) & (times < rest_window)
    q0 = q[rest].mean(axis=0) if rest.any() else None
    keep = times >= 0.0
    times, q = times[keep], q[keep]
    # The executor stops recording once the arm is at the goal: the last state may come a
    # few ms before the last point's time.
    if times.size < 10 or times[-1] < 0.9 * traj_times[-1]:
        raise BagRecordingError(
            f'bag {path}: {times.size} joint states after the command, covering '
            f'{times[-1] if times.size else 0:.2f} s of a {traj_times[-1]:.2f} s trajectory')
    order_t = np.argsort(times, kind='stable')
    times, q = times[order_t], q[order_t]
    times, first = np.unique(times, return_index=True)
    q = q[first]
    if q0 is None:
        q0 = q[0]
    ref0 = traj_pos[0] if traj_times[0] == 0.0 else q0
    return Recording(times, q, q0, traj_times, traj_pos, traj_vel, None, ref0,
                     name=name or path.name)


# ------------------------------------------------------------------ strike probes

TRACKED_TYPE = 'real2sim2real_msgs/msg/TrackedObjects'
INFO_TYPE = 'std_msgs/msg/String'
STRIKE_INFO_TOPIC = '/system_identification/strike_probe'


def write_strike_bag(executor_bag, out_path, tracked, info: dict,
                     tracked_topic: str = '/tracked_objects') -> Path:
    """The probe bag of one strike execution: every message of the executor's recording
    (command, joint states), the tracked object poses received meanwhile, and the strike
    plan (``info``: JSON on ``STRIKE_INFO_TOPIC``), so that identification from the bag alone
    reproduces the live run.

    tracked: [(receive time ns, CDR bytes or a dict of the message)].
    """
    import json

    from ..bag_io import BagWriter
    out_path = Path(out_path)
    src = BagReader(Path(executor_bag))
    with src, BagWriter(out_path) as bag:
        first = None
        for name, t in src.topics.items():
            bag.add_topic(name, t.msgtype, t.offered_qos or None)
        for topic, _, ts, raw in src.messages():
            first = ts if first is None else first
            bag.write_raw(topic, ts, raw)
        bag.add_topic(tracked_topic, TRACKED_TYPE)
        for ts, msg in tracked:
            if isinstance(msg, (bytes, bytearray, memoryview)):
                bag.write_raw(tracked_topic, int(ts), msg)
            else:
                bag.write(tracked_topic, int(ts), msg)
        bag.add_topic(STRIKE_INFO_TOPIC, INFO_TYPE)
        bag.write(STRIKE_INFO_TOPIC, int(first or 0), {'data': json.dumps(info)})
    return out_path


def is_strike_bag(path) -> bool:
    """A bag written by :func:`write_strike_bag` (it carries the strike plan)."""
    try:
        with BagReader(Path(path)) as reader:
            return STRIKE_INFO_TOPIC in reader.topics
    except (BagError, OSError, ValueError):
        return False


def strike_recording_from_bag(path, joint_names, *, name: str | None = None):
    """A StrikeRecording (core/sysid/object_fit.py) from a strike probe bag: the joints and
    command as :func:`recording_from_bag` reads them, the tracked poses on the same time axis
    (header stamp - the command's start stamp), the strikes and the plan's metadata.

    Raises MissingTopicsError when the bag has no tracked poses or no strike plan."""
    import json

    from ..geometry import quat_yaw
    from .object_fit import ObjectTrack, StrikeRecording
    from .object_probes import StrikeInfo
    path = Path(path)
    rec = recording_from_bag(path, joint_names, name=name)
    try:
        reader = BagReader(path)
    except (BagError, OSError, ValueError) as exc:
        raise MissingTopicsError(f'cannot read bag {path}: {exc}') from None
    with reader:
        topics = reader.topics
        tr_topic = _pick_topic(topics, TRACKED_TYPE, None, path)
        if STRIKE_INFO_TOPIC not in topics:
            raise MissingTopicsError(f'bag {path} has no strike plan ({STRIKE_INFO_TOPIC}): not '
                                     f'a strike probe bag')
        if tr_topic is None:
            raise MissingTopicsError(
                f'bag {path} has no tracked object poses ({TRACKED_TYPE} messages): the '
                f'object tracker published nothing during the strikes')
        traj_topic = _pick_topic(topics, TRAJECTORY_TYPE, None, path)
        info, t_start, t_send, rows = None, None, None, []
        for topic, msgtype, ts, raw in reader.messages([STRIKE_INFO_TOPIC, tr_topic,
                                                        traj_topic]):
            msg = reader.deserialize(raw, msgtype)
            if topic == STRIKE_INFO_TOPIC:
                info = json.loads(msg.data)
            elif topic == traj_topic:
                if t_start is None:
                    t_start, t_send = _stamp(msg.header.stamp), ts * 1e-9
            else:
                rows.append((ts * 1e-9, _stamp(msg.header.stamp), msg))
    if t_start is None:
        raise MissingTopicsError(f'bag {path} has no commanded trajectory')
    tracks: dict[str, list] = {}
    for recv, stamp, msg in rows:
        t = stamp - t_start if t_start > 0 and stamp > 0 else recv - t_send
        for oid, pose in zip(msg.ids, msg.poses):
            p, q = pose.position, pose.orientation
            tracks.setdefault(oid, []).append(
                (t, (p.x, p.y, p.z), quat_yaw((q.w, q.x, q.y, q.z))))
    out = {}
    for oid, items in tracks.items():
        items.sort(key=lambda x: x[0])
        out[oid] = ObjectTrack(np.array([i[0] for i in items]),
                               np.array([i[1] for i in items], float),
                               np.array([i[2] for i in items], float))
    strikes = [StrikeInfo.from_dict(s) for s in info.get('strikes', [])]
    return StrikeRecording(rec, out, strikes, name or path.name, info)
