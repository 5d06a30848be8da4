"""core/grasping/finger_trajectory.py: a FollowJointTrajectory goal for the gripper's finger
joint checked as JTC checks it (the message names the field), its reference and jaw speed,
and the executor's one-point timing."""
from __future__ import annotations

import math

import pytest

from real2sim2real_ros.core.grasping.finger_trajectory import (
    MIN_DURATION,
    finger_goal,
    one_point,
)
from real2sim2real_ros.core.grasping.jaw import GripperJoints
from real2sim2real_ros.core.trajectory_goal import INVALID_GOAL, INVALID_JOINTS, GoalRefused

JAW = GripperJoints('left_finger_joint', ('right_finger_joint',), 0.0, 0.04, 40.0, 0.2)


@pytest.mark.parametrize('names,points,code,field', [
    (['shoulder_pan_joint'], [([0.02], 1.0)], INVALID_JOINTS, 'joint_names'),
    (['left_finger_joint', 'right_finger_joint'], [([0.02, 0.02], 1.0)], INVALID_JOINTS,
     'joint_names'),
    (['left_finger_joint'], [], INVALID_GOAL, 'points:'),
    (['left_finger_joint'], [([0.05], 1.0)], INVALID_GOAL, 'points[0].positions[0]: 0.05 m'),
    (['left_finger_joint'], [([math.nan], 1.0)], INVALID_GOAL, 'points[0].positions[0]'),
    (['left_finger_joint'], [([0.01, 0.01], 1.0)], INVALID_GOAL, 'points[0].positions: give'),
    (['left_finger_joint'], [([0.01], 0.0)], INVALID_GOAL, 'points[0].time_from_start'),
    (['left_finger_joint'], [([0.01], 1.0), ([0.02], 1.0)], INVALID_GOAL,
     'points[1].time_from_start'),
])
def test_a_bad_finger_goal_is_refused_naming_the_field(names, points, code, field):
    with pytest.raises(GoalRefused) as err:
        finger_goal(names, points, JAW, 0.04, 0.0)
    assert err.value.code == code and field in err.value.message, err.value.message


def test_the_reference_runs_through_the_points_and_the_jaw_meets_the_last():
    g = finger_goal(['left_finger_joint'], [([0.02], 1.0), ([0.0], 3.0)], JAW, 0.04, 10.0)
    assert g.end_time == 13.0 and g.target == 0.0
    assert g.reference(9.0) == (0.04, 0.0)
    assert g.reference(10.5) == pytest.approx((0.03, -0.02))
    assert g.reference(12.0) == pytest.approx((0.01, -0.01))
    assert g.reference(20.0) == (0.0, 0.0)
    assert g.speed(0.2) == pytest.approx(0.04 / 3.0)      # reaches 0.0 at t = 3 s
    assert g.speed(0.005) == 0.005                        # capped at the joint's limit


def test_the_executors_one_point_goal_moves_at_the_asked_speed():
    assert one_point(0.0, 0.01, 0.04) == pytest.approx(4.0)
    assert one_point(0.04, 0.1, 0.0399) == MIN_DURATION
    with pytest.raises(ValueError, match='no joint state for the finger joint'):
        one_point(0.0, 0.01, math.nan)
