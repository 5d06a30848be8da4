"""Record and replay rosbag2 bags from rclpy, without ``ros2 bag``.

The recorder subscribes with ``raw=True`` (serialized CDR straight into the bag, no Python
message objects) to topics it discovers in the graph, with a QoS that matches every
publisher, and stores the publishers' offered QoS in the bag as rosbag2 does. The player
publishes the recorded bytes at the recorded pace (scaled by ``rate``), with the recorded
offered QoS, and can drive ``/clock`` with the recorded time for ``use_sim_time`` nodes.
"""
from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from rclpy.duration import Duration
from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    LivelinessPolicy,
    QoSProfile,
    ReliabilityPolicy,
)

from ..core.bag_io import BagError, BagReader, BagWriter, MessageTypeError

# rosbag2 writes "infinite" durations as these two numbers.
_INFINITE_SEC, _INFINITE_NSEC = 2147483647, 4294967295
# Topics that are latched by convention even when a bag carries no QoS for them.
LATCHED_TOPIC_NAMES = ('robot_description', 'scene', 'scene/markers', 'physical_parameters',
                       'tf_static')
# ROS-internal topics that "record all" leaves out (rosbag2 records them; we do not want them).
INTERNAL_TOPICS = ('/rosout', '/parameter_events')
MAX_DELAY_S = 3600.0   # bag play --delay: the documented upper bound (s)


def message_class(msgtype: str):
    """The rclpy message class for ``pkg/msg/Name`` (rosidl_runtime_py is not always there)."""
    parts = msgtype.split('/')
    if len(parts) == 2:
        parts = [parts[0], 'msg', parts[1]]
    if len(parts) != 3:
        raise MessageTypeError(f'malformed message type {msgtype!r}; expected "pkg/msg/Name"')
    pkg, kind, name = parts
    try:
        return getattr(importlib.import_module(f'{pkg}.{kind}'), name)
    except (ImportError, AttributeError):
        raise MessageTypeError(f'message type {msgtype!r} is not installed '
                               f'(no Python module {pkg}.{kind}.{name})') from None


def _absolute(topic: str) -> str:
    return topic if topic.startswith('/') else '/' + topic


# --------------------------------------------------------------------------- QoS <-> rosbag2

def _duration_dict(d: Duration) -> dict:
    ns = d.nanoseconds
    if ns >= (1 << 63) - 1 or ns < 0:
        return {'sec': _INFINITE_SEC, 'nsec': _INFINITE_NSEC}
    sec, nsec = divmod(ns, 1_000_000_000)
    return {'sec': sec, 'nsec': nsec}


def qos_to_rosbag2(profile: QoSProfile) -> dict:
    """An rclpy QoS profile in rosbag2's ``offered_qos_profiles`` (v9) form."""
    def name(policy):
        return policy.name.lower()
    return {
        'history': name(profile.history),
        'depth': int(profile.depth),
        'reliability': name(profile.reliability),
        'durability': name(profile.durability),
        'deadline': _duration_dict(profile.deadline),
        'lifespan': _duration_dict(profile.lifespan),
        'liveliness': name(profile.liveliness),
        'liveliness_lease_duration': _duration_dict(profile.liveliness_lease_duration),
        'avoid_ros_namespace_conventions': bool(profile.avoid_ros_namespace_conventions),
    }


def playback_qos(offered: list[dict], topic: str) -> QoSProfile:
    """What the player offers: reliable and transient-local if any recorded publisher was
    (an offer that strong still matches weaker subscribers); reliable keep-last-100 when the
    bag has no QoS (a deep writer history lets a slow subscriber catch up instead of losing
    samples); conventionally latched topics stay transient-local."""
    reliable = not offered or any(q.get('reliability') == 'reliable' for q in offered)
    latched = any(q.get('durability') == 'transient_local' for q in offered)
    if not offered and topic.strip('/') in LATCHED_TOPIC_NAMES:
        latched = True
    default = 1 if latched else 100
    depths = [int(q.get('depth') or 0) for q in offered if q.get('history') == 'keep_last']
    depth = max(depths + [default]) if depths else default
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=max(depth, 1),
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)


def recording_qos(offered: list[QoSProfile]) -> QoSProfile:
    """A subscription that matches every publisher (rosbag2's adaptive rule): reliable only if
    all publishers are, transient-local only if all are (then late-joining gets the latch)."""
    reliable = bool(offered) and all(
        q.reliability == ReliabilityPolicy.RELIABLE for q in offered)
    latched = bool(offered) and all(
        q.durability == DurabilityPolicy.TRANSIENT_LOCAL for q in offered)
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=100,
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
        liveliness=LivelinessPolicy.AUTOMATIC)


# --------------------------------------------------------------------------- recorder

class BagRecorder:
    """Record ``topics`` (None: every topic but /rosout and /parameter_events) into a new bag.

    Topics are picked up as their publishers appear (the graph is polled every
    ``discovery_period_s``), so the recorder may start before the publishers. Message
    timestamps are receive times on the node's clock, in ns, as in rosbag2. The node must be
    spun by the caller's executor. ``close()`` finishes the bag; until then it exists only
    under a hidden ``.NAME.partial`` folder.
    """

    def __init__(self, node, path: str | Path, topics: Iterable[str] | None = None,
                 qos_overrides: dict[str, QoSProfile] | None = None, *,
                 compress: bool = False, discovery_period_s: float = 0.2):
        self.node = node
        self.topics = None if topics is None else [_absolute(t) for t in topics]
        if self.topics is not None and not self.topics:
            raise BagError('no topics to record: give topic names or record all')
        self.qos_overrides = {_absolute(k): v for k, v in (qos_overrides or {}).items()}
        self._lock = threading.Lock()
        self._writer = BagWriter(path, compress=compress).open()
        self._subs: dict[str, object] = {}
        self._skipped: set[str] = set()
        self.counts: dict[str, int] = {}
        self._closed = False
        self._discover()
        self._timer = node.create_timer(discovery_period_s, self._discover)

    @property
    def path(self) -> Path:
        return self._writer.path

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def subscribed_topics(self) -> list[str]:
        return sorted(self._subs)

    def _discover(self):
        if self._closed:
            return
        for topic, types in self.node.get_topic_names_and_types():
            if topic in self._subs or topic in self._skipped or not types:
                continue
            if self.topics is None:
                if topic in INTERNAL_TOPICS:
                    continue
            elif topic not in self.topics:
                continue
            self._subscribe(topic, types)

    def _subscribe(self, topic: str, types: list[str]):
        msgtype = types[0]
        if len(types) > 1:
            self.node.get_logger().warning(
                f'{topic} is published with several types {types}; recording {msgtype}')
        offered = [i.qos_profile for i in self.node.get_publishers_info_by_topic(topic)]
        if not offered:
            return   # only subscribers so far: wait for a publisher to learn its QoS
        try:
            cls = message_class(msgtype)
            with self._lock:
                self._writer.add_topic(topic, msgtype, [qos_to_rosbag2(q) for q in offered])
        except (BagError, MessageTypeError) as exc:
            self.node.get_logger().error(f'not recording {topic}: {exc}')
            self._skipped.add(topic)
            return
        qos = self.qos_overrides.get(topic) or recording_qos(offered)
        self.counts[topic] = 0
        self._subs[topic] = self.node.create_subscription(
            cls, topic, lambda raw, t=topic: self._on_message(t, raw), qos, raw=True)
        self.node.get_logger().info(f'recording {topic} [{msgtype}]')

    def _on_message(self, topic: str, raw: bytes):
        stamp = self.node.get_clock().now().nanoseconds
        with self._lock:
            if self._closed:
                return
            self._writer.write_raw(topic, stamp, raw)
            self.counts[topic] += 1

    def close(self) -> Path:
        """Stop recording and finish the bag; returns its final path."""
        with self._lock:
            if self._closed:
                return self._writer.path
            self._closed = True
        self.node.destroy_timer(self._timer)
        for sub in self._subs.values():
            self.node.destroy_subscription(sub)
        with self._lock:
            return self._writer.close()

    def abort(self):
        """Drop the bag (nothing appears under its name)."""
        with self._lock:
            self._closed = True
            self._writer.abort()


# --------------------------------------------------------------------------- player

class BagPlayer:
    """Publish a bag's recorded bytes at the recorded pace.

    ``play()`` blocks until the end (or ``stop()``); ``progress(elapsed_bag_ns, duration_ns,
    published)`` is called at most every 50 ms. With ``publish_clock`` /clock carries the
    recorded time at ``clock_hz`` and before every message. ``wait_for_subscribers_s`` waits
    (up to that long) for every publisher to match a subscriber before the first message,
    so volatile topics do not lose their first messages to discovery; ``delay_s`` then sleeps
    before each pass (``ros2 bag play --delay``): a publisher that has matched a subscriber
    does not mean the subscriber has matched it (discovery runs on each side), and reliable
    messages sent in between arrive late and bunched.
    """

    def __init__(self, node, path: str | Path, rate: float = 1.0,
                 topics: Iterable[str] | None = None, publish_clock: bool = False,
                 loop: bool = False, start_paused: bool = False, *,
                 clock_hz: float = 100.0, wait_for_subscribers_s: float = 0.0,
                 delay_s: float = 0.0, qos_overrides: dict[str, QoSProfile] | None = None):
        if not rate > 0:
            raise BagError(f'rate must be > 0, got {rate}')
        if publish_clock and not clock_hz > 0:
            raise BagError(f'clock_hz must be > 0, got {clock_hz}')
        if not 0.0 <= delay_s <= MAX_DELAY_S:
            raise BagError(f'delay must be 0 .. {MAX_DELAY_S:.0f} s, got {delay_s}')
        self.node = node
        self.rate = float(rate)
        self.loop = loop
        self.clock_period_s = 1.0 / clock_hz if publish_clock else None
        self.wait_for_subscribers_s = wait_for_subscribers_s
        self.delay_s = float(delay_s)
        self.bag = BagReader(path)
        bag_topics = self.bag.topics
        wanted = list(bag_topics) if topics is None else [_absolute(t) for t in topics]
        if missing := sorted(set(wanted) - set(bag_topics)):
            raise BagError(f'{path} has no topic(s) {missing}; it has {sorted(bag_topics)}')
        overrides = {_absolute(k): v for k, v in (qos_overrides or {}).items()}
        self._pubs = {}
        for topic in wanted:
            info = bag_topics[topic]
            if info.count == 0:
                continue
            try:
                cls = message_class(info.msgtype)
            except MessageTypeError as exc:
                node.get_logger().error(f'not playing {topic}: {exc}')
                continue
            qos = overrides.get(topic) or playback_qos(info.offered_qos, topic)
            self._pubs[topic] = node.create_publisher(cls, topic, qos)
        if not self._pubs:
            raise BagError(f'{path}: no playable topics (asked for {wanted})')
        self._clock_pub = None
        if publish_clock:
            from rosgraph_msgs.msg import Clock
            self._clock_msg = Clock
            # Reliable offers match both reliable and best-effort /clock subscribers.
            self._clock_pub = node.create_publisher(Clock, '/clock', QoSProfile(
                depth=1, reliability=ReliabilityPolicy.RELIABLE))
        self._stop = threading.Event()
        self._running = threading.Event()
        if not start_paused:
            self._running.set()
        self.published = 0

    @property
    def topics(self) -> list[str]:
        return sorted(self._pubs)

    def stop(self):
        self._stop.set()
        self._running.set()   # wake a paused play() so it can see the stop

    def pause(self):
        self._running.clear()

    def resume(self):
        self._running.set()

    @property
    def is_paused(self) -> bool:
        return not self._running.is_set()

    def wait_for_all_acked(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` in all for every reliable subscriber to acknowledge what was
        published (as ``ros2 bag play --wait-for-all-acked``): a player that exits at once
        takes its unacknowledged tail with it when a subscriber is slow. True when all were."""
        from rclpy.duration import Duration
        deadline = time.monotonic() + max(timeout_s, 0.0)
        acked = True
        for pub in [*self._pubs.values(), *filter(None, [self._clock_pub])]:
            left = max(deadline - time.monotonic(), 0.0)
            acked &= bool(pub.wait_for_all_acked(Duration(nanoseconds=int(left * 1e9))))
        return acked

    def close(self):
        for pub in self._pubs.values():
            self.node.destroy_publisher(pub)
        if self._clock_pub is not None:
            self.node.destroy_publisher(self._clock_pub)
        self._pubs.clear()
        self.bag.close()

    def play(self, progress: Callable[[int, int, int], None] | None = None) -> int:
        """Play (loops until stop() when ``loop``); returns the number of messages published."""
        self._wait_for_subscribers()
        while not self._stop.wait(self.delay_s):
            self._play_once(progress)
            if not self.loop:
                break
        return self.published

    def _wait_for_subscribers(self):
        deadline = time.monotonic() + self.wait_for_subscribers_s
        while time.monotonic() < deadline and not self._stop.is_set():
            if all(p.get_subscription_count() > 0 for p in self._pubs.values()):
                return
            time.sleep(0.01)

    def _play_once(self, progress):
        start, duration = self.bag.start_ns, self.bag.duration_ns
        if start is None:
            return
        self._running.wait()
        wall0 = time.monotonic_ns()
        last_report = 0
        for topic, _msgtype, stamp, raw in self.bag.messages(self.topics):
            target = wall0 + int((stamp - start) / self.rate)
            wall0 += self._sleep_until(target, start, wall0)
            if self._stop.is_set():
                return
            if self._clock_pub is not None:
                self._publish_clock(stamp)
            self._pubs[topic].publish(bytes(raw))
            self.published += 1
            if progress is not None and time.monotonic_ns() - last_report > 50_000_000:
                last_report = time.monotonic_ns()
                progress(stamp - start, duration, self.published)
        if progress is not None:
            progress(duration, duration, self.published)

    def _sleep_until(self, target_ns: int, start: int, wall0: int) -> int:
        """Sleep until ``target_ns`` (monotonic), publishing /clock meanwhile; returns how long
        play was paused, which shifts the rest of the schedule."""
        paused_ns = 0
        while not self._stop.is_set():
            if not self._running.is_set():
                t_pause = time.monotonic_ns()
                self._running.wait()
                paused_ns += time.monotonic_ns() - t_pause
                target_ns += time.monotonic_ns() - t_pause
                continue
            now = time.monotonic_ns()
            remaining = (target_ns - now) / 1e9
            if remaining <= 0:
                break
            if self._clock_pub is not None:
                bag_now = start + int((now - wall0 - paused_ns) * self.rate)
                self._publish_clock(bag_now)
                time.sleep(min(remaining, self.clock_period_s))
            else:
                time.sleep(min(remaining, 0.05))
        return paused_ns

    def _publish_clock(self, stamp_ns: int):
        msg = self._clock_msg()
        msg.clock.sec, msg.clock.nanosec = divmod(int(stamp_ns), 1_000_000_000)
        self._clock_pub.publish(msg)
