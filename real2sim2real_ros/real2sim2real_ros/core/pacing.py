"""Real-time pacing of a stepped world: step a chunk only when the wall clock is a chunk ahead.

Contract of :class:`RealTimePacer`:

* :meth:`~RealTimePacer.due` is asked before each chunk with the world time. While the world
  is less than one chunk behind the wall clock it sleeps (at most ``max_sleep`` s) and answers
  False; otherwise True.
* Overload: when the world is more than ``max_lag`` s behind, the wall clock's origin moves so
  that it is one chunk behind (time slips rather than bursts): ``slips`` counts these,
  ``on_slip(slips)`` is called for each, and ``slipped`` sums the seconds lost until
  :meth:`~RealTimePacer.take_slipped` hands them over (the emulated cell moves its clock
  origin by them between trajectories).

ROS-free; the clock and the sleep are injectable for tests.
"""
from __future__ import annotations

import time
from collections.abc import Callable


class RealTimePacer:
    """Paces chunks of ``chunk`` s of world time on the wall clock (see the module)."""

    def __init__(self, world_time: float, chunk: float, *, max_lag: float = 0.25,
                 max_sleep: float = 0.002, on_slip: Callable[[int], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.chunk = float(chunk)
        self.max_lag = float(max_lag)
        self.max_sleep = float(max_sleep)
        self._clock, self._sleep, self._on_slip = clock, sleep, on_slip
        self.wall0 = clock() - world_time     # wall time of world time 0
        self.slips = 0
        self.slipped = 0.0

    def due(self, world_time: float) -> bool:
        """Whether the next chunk may be stepped now (False after a short sleep)."""
        lag = (self._clock() - self.wall0) - world_time
        if lag < self.chunk:
            self._sleep(min(self.chunk - lag, self.max_sleep))
            return False
        if lag > self.max_lag:   # overloaded: let time slip rather than burst
            self.wall0 += lag - self.chunk
            self.slipped += lag - self.chunk
            self.slips += 1
            if self._on_slip is not None:
                self._on_slip(self.slips)
        return True

    def take_slipped(self) -> float:
        """The seconds slipped since the last call (then 0)."""
        slipped, self.slipped = self.slipped, 0.0
        return slipped
