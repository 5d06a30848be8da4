"""builtin_interfaces conversions (seconds <-> Duration/Time messages)."""
from builtin_interfaces.msg import Duration, Time


def duration_msg(seconds: float) -> Duration:
    sec = int(seconds // 1)
    return Duration(sec=sec, nanosec=int(round((seconds - sec) * 1e9)) % 1_000_000_000)


def duration_to_sec(d: Duration) -> float:
    return d.sec + d.nanosec * 1e-9


def time_to_sec(t: Time) -> float:
    return t.sec + t.nanosec * 1e-9


def time_to_ns(t: Time) -> int:
    return t.sec * 1_000_000_000 + t.nanosec


class NodeDeadline:
    """A deadline on a node's clock: simulated time under ``use_sim_time`` (an emulated cell
    that runs slower than real time then gets the time its motion needs), wall time otherwise.
    A clock that stops (no /clock for ``stall_s`` wall seconds) expires it too."""

    def __init__(self, node, seconds: float, stall_s: float = 30.0):
        import time
        self._monotonic = time.monotonic
        self._clock = node.get_clock()
        self._stall_s = float(stall_s)
        self._last = self.now()
        self._last_wall = self._monotonic()
        self.end = self._last + float(seconds)

    def now(self) -> float:
        return self._clock.now().nanoseconds * 1e-9

    def expired(self) -> bool:
        now = self.now()
        if now != self._last:
            self._last, self._last_wall = now, self._monotonic()
        elif self._monotonic() - self._last_wall > self._stall_s:
            return True
        return now > self.end

    def stalled(self) -> bool:
        """Whether the clock has not moved for ``stall_s`` wall seconds."""
        return self.now() == self._last and self._monotonic() - self._last_wall > self._stall_s
