"""core/trajectory_goal.py: JTC's FollowJointTrajectory goal check, tolerances and monitor."""
from __future__ import annotations

import numpy as np
import pytest

from real2sim2real_ros.core import trajectory_goal as tg

J = ['a', 'b']


def _defaults(path=0.0, goal=0.0, stopped=0.05, goal_time=0.0):
    return tg.ControllerConstraints(path={j: tg.Bound(path) for j in J},
                                    goal={j: tg.Bound(goal, stopped) for j in J},
                                    goal_time=goal_time)


@pytest.mark.parametrize('joints,points,start,code', [
    ([], 2, None, tg.INVALID_JOINTS),
    (['a'], 2, None, tg.INVALID_JOINTS),             # partial goal
    (['a', 'b', 'c'], 2, None, tg.INVALID_JOINTS),   # unknown joint
    (['a', 'a'], 2, None, tg.INVALID_JOINTS),
    (['b', 'a'], 0, None, tg.INVALID_GOAL),
    (['b', 'a'], 2, 5.0, tg.OLD_HEADER_TIMESTAMP),   # starts at 5 s, ends at 6 s, now is 10 s
])
def test_goal_check_refuses_with_the_jtc_code(joints, points, start, code):
    with pytest.raises(tg.GoalRefused) as info:
        tg.check_goal(J, joints, points, start, 1.0, now=10.0)
    assert info.value.code == code and info.value.message


def test_goal_check_accepts_any_joint_order_and_a_future_start():
    tg.check_goal(J, ['b', 'a'], 2, None, 1.0, now=10.0)
    tg.check_goal(J, ['a', 'b'], 2, 9.5, 1.0, now=10.0)   # ends at 10.5 s: still running


def test_tolerances_zero_keeps_default_minus_one_removes_positive_replaces():
    tol = tg.resolve_tolerances(J, _defaults(path=0.1, goal=0.02, goal_time=1.0), [
        tg.ToleranceEntry('a', position=-1.0), tg.ToleranceEntry('b', position=0.3)],
        [tg.ToleranceEntry('a', velocity=0.2)], goal_time_tolerance=0.5)
    assert [b.position for b in tol.path] == [0.0, 0.3]
    assert tol.goal[0] == tg.Bound(0.02, 0.2) and tol.goal[1] == tg.Bound(0.02, 0.05)
    assert tol.goal_time == 0.5
    assert tg.resolve_tolerances(J, _defaults(goal_time=1.0)).goal_time == 1.0


@pytest.mark.parametrize('entry,code', [
    (tg.ToleranceEntry('z', position=0.1), tg.INVALID_JOINTS),
    (tg.ToleranceEntry('a', position=-0.5), tg.INVALID_GOAL),
    (tg.ToleranceEntry('a', velocity=float('nan')), tg.INVALID_GOAL),
])
def test_bad_tolerance_entries_are_refused(entry, code):
    with pytest.raises(tg.GoalRefused) as info:
        tg.resolve_tolerances(J, _defaults(), [entry])
    assert info.value.code == code


def test_monitor_path_violation_names_joint_and_size():
    tol = tg.resolve_tolerances(J, _defaults(path=0.05))
    mon = tg.GoalMonitor(tol, start_time=1.0, end_time=3.0)
    z = np.zeros(2)
    assert mon.update(0.5, z, z, [0.0, 0.5], z) is None      # before the start: not checked
    assert mon.update(1.5, z, z, [0.0, 0.049], z) is None
    out = mon.update(2.0, z, z, [0.0, 0.06], z)
    assert out.code == tg.PATH_TOLERANCE_VIOLATED
    assert "'b'" in out.message and '-0.0600' in out.message and '0.0500' in out.message


def test_monitor_goal_success_waits_for_rest_and_times_out_after_goal_time():
    tol = tg.resolve_tolerances(J, _defaults(goal=0.01, goal_time=0.5))
    mon = tg.GoalMonitor(tol, start_time=0.0, end_time=2.0)
    z = np.zeros(2)
    assert mon.update(2.1, z, z, [0.02, 0.0], z) is None     # 0.02 rad off: still waiting
    assert mon.update(2.2, z, z, z, [0.1, 0.0]) is None       # moving 0.1 rad/s > 0.05
    assert mon.update(2.3, z, z, [0.005, 0.0], [0.01, 0.0]).succeeded
    late = tg.GoalMonitor(tol, 0.0, 2.0).update(2.6, z, z, [0.02, 0.0], z)
    assert late.code == tg.GOAL_TOLERANCE_VIOLATED and '0.600 s after' in late.message


def test_goal_time_zero_waits_indefinitely():
    tol = tg.resolve_tolerances(J, _defaults(goal=0.01, goal_time=0.0))
    mon = tg.GoalMonitor(tol, 0.0, 1.0)
    z = np.zeros(2)
    assert mon.update(1000.0, z, z, [0.5, 0.0], z) is None


def test_error_names():
    assert tg.error_name(-4) == 'PATH_TOLERANCE_VIOLATED' and tg.error_name(7) == 'error_code 7'
