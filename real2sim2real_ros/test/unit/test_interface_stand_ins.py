"""control_msgs and moveit_msgs where no registry has them: the stand-ins' interfaces equal
upstream's, and make setup's decision (scripts/stand_ins.py) builds a stand-in only where no
real package of its name is importable.

UPSTREAM records the upstream definitions as data: ros-controls/control_msgs as Jazzy and
Kilted ship it (5.3+: JointTrajectoryControllerState without the deprecated desired/actual
fields and with speed_scaling_factor, control_msgs#143, released to Jazzy in 5.3.0) and
moveit/moveit_msgs (ExecuteTrajectory with controller_names, MoveItErrorCodes with message
and source): field names, types and order, and constants. A stand-in that drifts from it
fails here."""
from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DECIDE = REPO / 'scripts' / 'stand_ins.py'

_POINT = 'trajectory_msgs/JointTrajectoryPoint'
_MDOF_POINT = 'trajectory_msgs/MultiDOFJointTrajectoryPoint'
UPSTREAM = {
    'control_msgs/msg/JointTolerance': (
        [('name', 'string'), ('position', 'double'), ('velocity', 'double'),
         ('acceleration', 'double')], {}),
    'control_msgs/msg/JointComponentTolerance': (
        [('joint_name', 'string'), ('component', 'uint16'), ('position', 'double'),
         ('velocity', 'double'), ('acceleration', 'double')],
        {'X_AXIS': 1, 'Y_AXIS': 2, 'Z_AXIS': 3, 'TRANSLATION': 4, 'ROTATION': 5}),
    'control_msgs/msg/JointTrajectoryControllerState': (
        [('header', 'std_msgs/Header'), ('joint_names', 'sequence<string>'),
         ('reference', _POINT), ('feedback', _POINT), ('error', _POINT), ('output', _POINT),
         ('multi_dof_joint_names', 'sequence<string>'), ('multi_dof_reference', _MDOF_POINT),
         ('multi_dof_feedback', _MDOF_POINT), ('multi_dof_error', _MDOF_POINT),
         ('multi_dof_output', _MDOF_POINT), ('speed_scaling_factor', 'double')], {}),
    'control_msgs/msg/GripperCommand': ([('position', 'double'), ('max_effort', 'double')], {}),
    'control_msgs/action/FollowJointTrajectory.Goal': (
        [('trajectory', 'trajectory_msgs/JointTrajectory'),
         ('multi_dof_trajectory', 'trajectory_msgs/MultiDOFJointTrajectory'),
         ('path_tolerance', 'sequence<control_msgs/JointTolerance>'),
         ('component_path_tolerance', 'sequence<control_msgs/JointComponentTolerance>'),
         ('goal_tolerance', 'sequence<control_msgs/JointTolerance>'),
         ('component_goal_tolerance', 'sequence<control_msgs/JointComponentTolerance>'),
         ('goal_time_tolerance', 'builtin_interfaces/Duration')], {}),
    'control_msgs/action/FollowJointTrajectory.Result': (
        [('error_code', 'int32'), ('error_string', 'string')],
        {'SUCCESSFUL': 0, 'INVALID_GOAL': -1, 'INVALID_JOINTS': -2, 'OLD_HEADER_TIMESTAMP': -3,
         'PATH_TOLERANCE_VIOLATED': -4, 'GOAL_TOLERANCE_VIOLATED': -5}),
    'control_msgs/action/FollowJointTrajectory.Feedback': (
        [('header', 'std_msgs/Header'), ('joint_names', 'sequence<string>'),
         ('desired', _POINT), ('actual', _POINT), ('error', _POINT),
         ('multi_dof_joint_names', 'sequence<string>'), ('multi_dof_desired', _MDOF_POINT),
         ('multi_dof_actual', _MDOF_POINT), ('multi_dof_error', _MDOF_POINT)], {}),
    'control_msgs/action/GripperCommand.Goal': ([('command', 'control_msgs/GripperCommand')], {}),
    'control_msgs/action/GripperCommand.Result': (
        [('position', 'double'), ('effort', 'double'), ('stalled', 'boolean'),
         ('reached_goal', 'boolean')], {}),
    'control_msgs/action/GripperCommand.Feedback': (
        [('position', 'double'), ('effort', 'double'), ('stalled', 'boolean'),
         ('reached_goal', 'boolean')], {}),
    'control_msgs/action/ParallelGripperCommand.Goal': (
        [('command', 'sensor_msgs/JointState')], {}),
    'control_msgs/action/ParallelGripperCommand.Result': (
        [('state', 'sensor_msgs/JointState'), ('stalled', 'boolean'),
         ('reached_goal', 'boolean')], {}),
    'control_msgs/action/ParallelGripperCommand.Feedback': (
        [('state', 'sensor_msgs/JointState')], {}),
    'moveit_msgs/msg/RobotTrajectory': (
        [('joint_trajectory', 'trajectory_msgs/JointTrajectory'),
         ('multi_dof_joint_trajectory', 'trajectory_msgs/MultiDOFJointTrajectory')], {}),
    'moveit_msgs/msg/MoveItErrorCodes': (
        [('val', 'int32'), ('message', 'string'), ('source', 'string')],
        {'SUCCESS': 1, 'UNDEFINED': 0, 'FAILURE': 99999, 'PLANNING_FAILED': -1,
         'INVALID_MOTION_PLAN': -2, 'MOTION_PLAN_INVALIDATED_BY_ENVIRONMENT_CHANGE': -3,
         'CONTROL_FAILED': -4, 'UNABLE_TO_AQUIRE_SENSOR_DATA': -5, 'TIMED_OUT': -6,
         'PREEMPTED': -7, 'START_STATE_IN_COLLISION': -10,
         'START_STATE_VIOLATES_PATH_CONSTRAINTS': -11, 'START_STATE_INVALID': -26,
         'GOAL_IN_COLLISION': -12, 'GOAL_VIOLATES_PATH_CONSTRAINTS': -13,
         'GOAL_CONSTRAINTS_VIOLATED': -14, 'GOAL_STATE_INVALID': -27,
         'UNRECOGNIZED_GOAL_TYPE': -28, 'INVALID_GROUP_NAME': -15,
         'INVALID_GOAL_CONSTRAINTS': -16, 'INVALID_ROBOT_STATE': -17, 'INVALID_LINK_NAME': -18,
         'INVALID_OBJECT_NAME': -19, 'FRAME_TRANSFORM_FAILURE': -21,
         'COLLISION_CHECKING_UNAVAILABLE': -22, 'ROBOT_STATE_STALE': -23,
         'SENSOR_INFO_STALE': -24, 'COMMUNICATION_FAILURE': -25, 'CRASH': -29, 'ABORT': -30,
         'NO_IK_SOLUTION': -31}),
    'moveit_msgs/action/ExecuteTrajectory.Goal': (
        [('trajectory', 'moveit_msgs/RobotTrajectory'),
         ('controller_names', 'sequence<string>')], {}),
    'moveit_msgs/action/ExecuteTrajectory.Result': (
        [('error_code', 'moveit_msgs/MoveItErrorCodes')], {}),
    'moveit_msgs/action/ExecuteTrajectory.Feedback': ([('state', 'string')], {}),
}


def _type(key: str):
    package, kind, rest = key.split('/')
    name, _, part = rest.partition('.')
    cls = getattr(importlib.import_module(f'{package}.{kind}'), name)
    return getattr(cls, part) if part else cls


@pytest.mark.parametrize('key', sorted(UPSTREAM))
def test_interface_equals_upstream(key):
    fields, constants = UPSTREAM[key]
    cls = _type(key)
    assert list(cls.get_fields_and_field_types().items()) == fields
    for name, value in constants.items():
        assert getattr(cls, name) == value, name
    # rosidl's metaclass keeps the message's constants in its (name-mangled) __constants.
    table = next(v for k, v in vars(type(cls)).items() if k.endswith('__constants'))
    assert dict(table) == constants, 'exactly the upstream constants'


def test_messages_round_trip_through_serialization():
    """The built types serialize (what crosses the wire): a goal with tolerances."""
    from control_msgs.action import FollowJointTrajectory
    from control_msgs.msg import JointTolerance
    from rclpy.serialization import deserialize_message, serialize_message
    goal = FollowJointTrajectory.Goal()
    goal.trajectory.joint_names = ['a', 'b']
    goal.path_tolerance = [JointTolerance(name='a', position=0.1, velocity=-1.0)]
    goal.goal_time_tolerance.sec = 2
    back = deserialize_message(serialize_message(goal), FollowJointTrajectory.Goal)
    assert back == goal


def _decide(pythonpath: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    return subprocess.run([sys.executable, str(DECIDE), '--root', str(REPO)], env=env,
                          capture_output=True, text=True, timeout=60)


def test_setup_builds_no_stand_in_where_a_real_control_msgs_is_importable(tmp_path):
    fake = tmp_path / 'underlay'
    (fake / 'control_msgs').mkdir(parents=True)
    (fake / 'control_msgs' / '__init__.py').write_text('')
    proc = _decide(str(fake) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    assert proc.returncode == 0, proc.stderr
    assert 'control_msgs' not in proc.stdout.split()
    line = next(ln for ln in proc.stderr.splitlines() if 'control_msgs:' in ln)
    assert 'real package is importable' in line and str(fake) in line


def test_setup_builds_a_stand_in_where_only_its_own_earlier_build_is_importable():
    """Under `scripts/env.sh` the stand-in built into install/ is on PYTHONPATH: it is not a
    real package, so the decision stays 'build it' (and setup keeps it up to date)."""
    proc = _decide(os.environ.get('PYTHONPATH', ''))
    assert proc.returncode == 0, proc.stderr
    for name in ('control_msgs', 'moveit_msgs'):
        spec = importlib.util.find_spec(name)
        real = spec is not None and (REPO / 'install') not in Path(
            spec.origin or '').resolve().parents
        if real:   # a lab machine: the real package wins
            assert name not in proc.stdout.split()
        else:
            assert name in proc.stdout.split()
            assert f'{name}: not importable here; building' in proc.stderr
