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
