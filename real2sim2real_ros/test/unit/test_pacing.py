"""core.pacing.RealTimePacer: chunks on the wall clock, slips instead of bursts (fake clock)."""
import pytest

from real2sim2real_ros.core.pacing import RealTimePacer


class FakeClock:
    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.sleeps.append(s)
        self.now += s


def test_steps_only_when_a_chunk_is_due_and_sleeps_short():
    clock = FakeClock()
    pacer = RealTimePacer(0.0, 0.001, clock=clock, sleep=clock.sleep)
    world = 0.0
    assert not pacer.due(world)                      # no wall time has passed: wait
    assert clock.sleeps == [pytest.approx(0.001)]
    assert pacer.due(world)                          # one chunk later: step
    world += 0.001
    clock.now += 0.0005
    assert not pacer.due(world) and clock.sleeps[-1] == pytest.approx(0.0005)
    clock.now += 0.1                                 # 0.1 s behind: step, no slip yet
    assert pacer.due(world) and pacer.slips == 0 and pacer.take_slipped() == 0.0
    # A long sleep never exceeds max_sleep.
    pacer = RealTimePacer(1.0, 0.01, clock=clock, sleep=clock.sleep)
    assert not pacer.due(1.0) and clock.sleeps[-1] == 0.002


def test_overload_slips_to_one_chunk_behind_and_reports_each_slip():
    clock = FakeClock()
    seen = []
    pacer = RealTimePacer(0.0, 0.001, on_slip=seen.append, clock=clock, sleep=clock.sleep)
    clock.now += 1.0                                 # 1 s behind: more than max_lag
    assert pacer.due(0.0)
    assert seen == [1] and pacer.slipped == pytest.approx(0.999)
    assert (clock.now - pacer.wall0) - 0.0 == pytest.approx(0.001)   # one chunk behind now
    clock.now += 0.5
    assert pacer.due(0.0) and seen == [1, 2]
    assert pacer.take_slipped() == pytest.approx(0.999 + 0.500)
    assert pacer.slipped == 0.0 and pacer.slips == 2
