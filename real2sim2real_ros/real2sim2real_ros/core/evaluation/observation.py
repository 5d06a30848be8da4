"""What a policy on an emulated cell observes: the depth tracker's poses, as the live graph
gives them.

:class:`TrackedObservation` is the object_tracker node's core (core/object_tracking, through
:class:`~.object_identification.DepthTracker`: the cell's camera rendered with its depth
noise, the camera pose a calibration with the spec's error would publish, the arm masked from
its URDF at the measured joint states) run on a frame grid of ``rate`` Hz of cell time (the
node's ``max_rate``, config/params.yaml), each pose usable ``latency`` s after its frame was
taken. The policy gets the newest usable pose; none younger than ``timeout`` (the executor's
``observation_timeout``) is :class:`ObservationLost`, as the executor's
OBSERVATION_UNAVAILABLE.

Frames are rendered only while someone may consume them: at an episode's start (the start
pose, at rest) and, with ``stream``, during motion (closed-loop tasks). Cost figures
(frames, render and tracking seconds) accumulate in :attr:`TrackedObservation.cost`; frames
without the object, by the tracker's reason, in :attr:`TrackedObservation.missed`.
"""
from __future__ import annotations

import math
import time
from collections import deque

import numpy as np

from ..geometry import yaw_quat
from ..tasks.worlds import ObservationLost

TRACKER_RATE = 5.0        # Hz: object_tracker max_rate and the cell's camera_rate (params.yaml)
TRACKER_LATENCY = 0.035   # s: frame to pose, the tracker's CPU per frame when it (re)acquires
OBSERVATION_TIMEOUT = 1.0  # s: robot_executor observation_timeout
START_FRAMES = 3           # frames at rest before an episode (the executor's first fresh pose)


class TrackedObservation:
    """Tracked poses of one object on an EmulatedWorld at the tracker's rate and latency."""

    source = 'tracker'

    def __init__(self, world, robot, models, table_height: float, object_id: str,
                 rate: float = TRACKER_RATE, latency: float = TRACKER_LATENCY,
                 timeout: float = OBSERVATION_TIMEOUT, seed: int | None = None):
        from .object_identification import DepthTracker
        if rate <= 0 or latency < 0 or timeout <= 0:
            raise ValueError(f'tracker rate {rate} > 0, latency {latency} >= 0 and timeout '
                             f'{timeout} > 0 expected')
        self.tracker = DepthTracker(world, robot, models, table_height, rate=rate, seed=seed)
        self.object_id = object_id
        self.rate, self.latency, self.timeout = float(rate), float(latency), float(timeout)
        self._pending: list[tuple[float, np.ndarray, float]] = []   # (stamp, xyz, yaw)
        self._latest: tuple[float, np.ndarray, float] | None = None
        self._last_frame = -math.inf
        self._frames: deque = deque(maxlen=2 * START_FRAMES)   # (stamp, {id: xyz}) of all seen
        self.cost = {'frames': 0, 'render_s': 0.0, 'track_s': 0.0, 'episodes': 0,
                     'not_seen_at_start': 0, 'lost': 0}
        self.missed: dict[str, int] = {}    # the tracker's reason -> frames without the object

    def config(self) -> dict:
        """The observation model's settings and missed-frame counts, as a dict for the report."""
        return {'source': self.source, 'rate_hz': self.rate, 'latency_s': self.latency,
                'timeout_s': self.timeout, 'camera': self.tracker.camera,
                'missed_frames_by_reason': dict(self.missed)}

    # ------------------------------------------------------------ frames
    def _frame(self, world) -> None:
        stamp = world.time
        if abs(stamp - self._last_frame) < 1e-9:
            return                              # this instant's frame is taken
        self._last_frame = stamp
        t0, c0 = time.perf_counter(), self.tracker.cpu
        seen = self.tracker.observe(world)
        wall = time.perf_counter() - t0
        track = self.tracker.cpu - c0
        self.cost['frames'] += 1
        self.cost['track_s'] += track
        self.cost['render_s'] += max(wall - track, 0.0)
        self._frames.append((stamp, {k: np.asarray(v[0], float) for k, v in seen.items()}))
        if self.object_id in seen:
            xyz, yaw = seen[self.object_id]
            self._pending.append((stamp, np.asarray(xyz, float), float(yaw)))
        else:
            why = self.tracker.last_missing.get(self.object_id, 'not reported')
            self.missed[why] = self.missed.get(why, 0) + 1

    def _deliver(self, now: float) -> None:
        while self._pending and self._pending[0][0] + self.latency <= now + 1e-9:
            self._latest = self._pending.pop(0)

    def _next_frame_time(self, t: float) -> float:
        return math.ceil(t * self.rate - 1e-9) / self.rate

    # ------------------------------------------------------------ episode
    def begin(self, world) -> tuple[np.ndarray, float] | None:
        """A new episode, the object just placed, the arm at rest: ``START_FRAMES`` frames on
        the grid, then the newest usable pose as (xyz, yaw), or None (not seen)."""
        self.cost['episodes'] += 1
        self.tracker.tracker.reset(keep_positions=True)   # a gap in the stream
        self.restart_clock()
        for k in range(START_FRAMES):
            if k:
                world.step_for(1.0 / self.rate)
            self._frame(world)
        self.step(world, self.latency, stream=False)
        self._deliver(world.time)
        if self._latest is None:
            self.cost['not_seen_at_start'] += 1
            return None
        return self._latest[1].copy(), self._latest[2]

    def restart_clock(self) -> None:
        """The world's clock went back (EmulatedWorld.reset): drop stamps, keep the tracker."""
        self._pending.clear()
        self._frames.clear()
        self._latest = None
        self._last_frame = -math.inf

    def step(self, world, duration: float, stream: bool = True) -> None:
        """Advance ``world`` by ``duration`` s; with ``stream`` take the frames on the grid."""
        end = world.time + duration
        dt = world.timestep
        while world.time < end - 0.5 * dt:
            nxt = self._next_frame_time(world.time) if stream else math.inf
            if stream and nxt <= world.time + 0.5 * dt:
                self._frame(world)
                nxt = self._next_frame_time(world.time + dt)
            world.step_for(max(min(nxt, end) - world.time, dt))
            self._deliver(world.time)
        if stream and self._next_frame_time(world.time) <= world.time + 0.5 * dt:
            self._frame(world)
        self._deliver(world.time)

    def pose(self, world) -> tuple[np.ndarray, np.ndarray]:
        """The newest usable pose (xyz, quat wxyz); ObservationLost when none is younger than
        ``timeout`` (or none was taken since the clock restarted: one frame is taken and
        waited for, as the executor waits for its first fresh pose)."""
        self._deliver(world.time)
        if self._latest is None and not self._pending:
            self._frame(world)
            self.step(world, self.latency, stream=False)
        if self._latest is None or world.time - self._latest[0] > self.timeout:
            self.cost['lost'] += 1
            raise ObservationLost(f'no pose of {self.object_id!r} from the tracker younger '
                                  f'than {self.timeout:g} s at t = {world.time:.2f} s')
        _, xyz, yaw = self._latest
        return xyz.copy(), yaw_quat(yaw)

    def position_of(self, object_id: str, world) -> np.ndarray | None:
        """The newest usable tracked position (m) of ANY object the tracker reports (the
        task's ids: a stack's base) from the frames taken so far, or None when none younger
        than ``timeout`` has it (counted in ``cost['others_not_seen']``)."""
        now = world.time
        for stamp, poses in reversed(self._frames):
            if stamp + self.latency <= now + 1e-9 and object_id in poses:
                if now - stamp <= self.timeout:
                    return poses[object_id].copy()
                break
        self.cost['others_not_seen'] = self.cost.get('others_not_seen', 0) + 1
        return None


__all__ = ['OBSERVATION_TIMEOUT', 'START_FRAMES', 'TRACKER_LATENCY', 'TRACKER_RATE',
           'TrackedObservation']
