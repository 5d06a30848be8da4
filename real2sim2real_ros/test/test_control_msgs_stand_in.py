"""control_msgs where no registry has it: the stand-in's interfaces equal upstream's, and
make setup's decision (scripts/stand_ins.py) builds it only where no real one is importable.

UPSTREAM records ros-controls/control_msgs as Jazzy and Kilted ship it (5.x/6.x; the
JointTrajectoryControllerState layout without the deprecated desired/actual fields): field
names, types and order, and constants. A stand-in that drifts from it fails here."""
from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DECIDE = REPO / 'scripts' / 'stand_ins.py'

_POINT = 'trajectory_msgs/JointTrajectoryPoint'
_MDOF_POINT = 'trajectory_msgs/MultiDOFJointTrajectoryPoint'
UPSTREAM = {
    'msg/JointTolerance': (
        [('name', 'string'), ('position', 'double'), ('velocity', 'double'),
         ('acceleration', 'double')], {}),
    'msg/JointComponentTolerance': (
        [('joint_name', 'string'), ('component', 'uint16'), ('position', 'double'),
         ('velocity', 'double'), ('acceleration', 'double')],
        {'X_AXIS': 1, 'Y_AXIS': 2, 'Z_AXIS': 3, 'TRANSLATION': 4, 'ROTATION': 5}),
    'msg/JointTrajectoryControllerState': (
        [('header', 'std_msgs/Header'), ('joint_names', 'sequence<string>'),
         ('reference', _POINT), ('feedback', _POINT), ('error', _POINT), ('output', _POINT),
         ('multi_dof_joint_names', 'sequence<string>'), ('multi_dof_reference', _MDOF_POINT),
         ('multi_dof_feedback', _MDOF_POINT), ('multi_dof_error', _MDOF_POINT),
         ('multi_dof_output', _MDOF_POINT)], {}),
    'msg/GripperCommand': ([('position', 'double'), ('max_effort', 'double')], {}),
    'action/FollowJointTrajectory.Goal': (
        [('trajectory', 'trajectory_msgs/JointTrajectory'),
         ('multi_dof_trajectory', 'trajectory_msgs/MultiDOFJointTrajectory'),
         ('path_tolerance', 'sequence<control_msgs/JointTolerance>'),
         ('component_path_tolerance', 'sequence<control_msgs/JointComponentTolerance>'),
         ('goal_tolerance', 'sequence<control_msgs/JointTolerance>'),
         ('component_goal_tolerance', 'sequence<control_msgs/JointComponentTolerance>'),
         ('goal_time_tolerance', 'builtin_interfaces/Duration')], {}),
    'action/FollowJointTrajectory.Result': (
        [('error_code', 'int32'), ('error_string', 'string')],
        {'SUCCESSFUL': 0, 'INVALID_GOAL': -1, 'INVALID_JOINTS': -2, 'OLD_HEADER_TIMESTAMP': -3,
         'PATH_TOLERANCE_VIOLATED': -4, 'GOAL_TOLERANCE_VIOLATED': -5}),
    'action/FollowJointTrajectory.Feedback': (
        [('header', 'std_msgs/Header'), ('joint_names', 'sequence<string>'),
         ('desired', _POINT), ('actual', _POINT), ('error', _POINT),
         ('multi_dof_joint_names', 'sequence<string>'), ('multi_dof_desired', _MDOF_POINT),
         ('multi_dof_actual', _MDOF_POINT), ('multi_dof_error', _MDOF_POINT)], {}),
    'action/GripperCommand.Goal': ([('command', 'control_msgs/GripperCommand')], {}),
    'action/GripperCommand.Result': (
        [('position', 'double'), ('effort', 'double'), ('stalled', 'boolean'),
         ('reached_goal', 'boolean')], {}),
    'action/GripperCommand.Feedback': (
        [('position', 'double'), ('effort', 'double'), ('stalled', 'boolean'),
         ('reached_goal', 'boolean')], {}),
    'action/ParallelGripperCommand.Goal': ([('command', 'sensor_msgs/JointState')], {}),
    'action/ParallelGripperCommand.Result': (
        [('state', 'sensor_msgs/JointState'), ('stalled', 'boolean'),
         ('reached_goal', 'boolean')], {}),
    'action/ParallelGripperCommand.Feedback': ([('state', 'sensor_msgs/JointState')], {}),
}


def _type(key: str):
    kind, rest = key.split('/')
    name, _, part = rest.partition('.')
    cls = getattr(importlib.import_module(f'control_msgs.{kind}'), name)
    return getattr(cls, part) if part else cls


@pytest.mark.parametrize('key', sorted(UPSTREAM))
def test_interface_equals_upstream(key):
    pytest.importorskip('control_msgs.action')
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
    pytest.importorskip('control_msgs.action')
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
    assert proc.stdout.split() == []
    assert 'real package is importable' in proc.stderr and str(fake) in proc.stderr


def test_setup_builds_the_stand_in_where_only_its_own_earlier_build_is_importable():
    """Under `scripts/env.sh` the stand-in built into install/ is on PYTHONPATH: it is not a
    real package, so the decision stays 'build it' (and setup keeps it up to date)."""
    spec = importlib.util.find_spec('control_msgs')
    ours = REPO / 'install'
    real = spec is not None and ours not in Path(spec.origin or '').resolve().parents
    proc = _decide(os.environ.get('PYTHONPATH', ''))
    assert proc.returncode == 0, proc.stderr
    if real:   # a lab machine: the real package wins
        assert proc.stdout.split() == []
    else:
        assert proc.stdout.split() == ['control_msgs']
        assert 'building the wire-compatible stand-in' in proc.stderr
