"""Servo gains from a lab's controller configuration (ROS-free).

A cell's position servo is configured, not identified: a ros2_control controller YAML (the
joint_trajectory_controller's ``gains: {<joint>: {p, d}}``, keyed by joint names) holds its
stiffness and damping. :func:`load_servo_gains` turns such a file into the twin's parameter
names (``actuator/<joint>/kp`` and ``/kv``). The identification config names the file
(``controller_config:`` in config/identification.yaml, relative to that file); the shipped
ones are in config/controllers/ (``default_arm.yaml``, ``ur5.yaml``, ``panda.yaml``,
``xarm7.yaml``).

The evaluation harness gives each emulated cell the controller file its lab would have:
:func:`cell_controller_config` (the spec's ``<stem>.controllers.yaml`` beside it, else the
file shipped for its robot).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import yaml

from .parameters import ParameterError

__all__ = ['CONTROLLERS_DIR', 'cell_controller_config', 'load_servo_gains']

CONTROLLERS_DIR = 'controllers'
ROBOT_CONTROLLERS = {'default': 'default_arm.yaml', 'gripper': 'gripper_arm.yaml',
                     'example-robot-data:ur5': 'ur5.yaml',
                     'example-robot-data:ur5+pusher': 'ur5.yaml',
                     'example-robot-data:panda': 'panda.yaml',
                     'example-robot-data:panda+pusher': 'panda.yaml',
                     'example-robot-data:xarm7': 'xarm7.yaml',
                     'example-robot-data:xarm7+pusher': 'xarm7.yaml'}


def _gain_sections(data, path) -> list[dict]:
    """Every ``gains`` mapping under a controller's ``ros__parameters`` (or at the top)."""
    if not isinstance(data, dict):
        raise ParameterError(f'{path}: a controller configuration is a YAML mapping')
    found = []
    if isinstance(data.get('gains'), dict):
        found.append(data['gains'])
    for value in data.values():
        if isinstance(value, dict):
            params = value.get('ros__parameters', value)
            if isinstance(params, dict) and isinstance(params.get('gains'), dict):
                found.append(params['gains'])
    return found


def load_servo_gains(path, joint_names=None) -> dict[str, float]:
    """{'actuator/<joint>/kp': p, 'actuator/<joint>/kv': d} of a ros2_control controller YAML.

    ``joint_names``: every one must have a ``p`` gain (ParameterError naming the missing
    joints otherwise); ``d`` defaults to 0 as in ros2_control's PID. Raises ParameterError
    for an unreadable file or non-numeric, negative or non-finite gains."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ParameterError(f'cannot read the controller configuration {path}: {exc}') \
            from None
    sections = _gain_sections(data, path)
    if not sections:
        raise ParameterError(f'{path}: no controller with ros__parameters.gains '
                             f'(<joint>: {{p, d}}) in this controller configuration')
    gains: dict[str, dict] = {}
    for sec in sections:
        for joint, g in sec.items():
            if not isinstance(g, dict) or 'p' not in g:
                raise ParameterError(f'{path}: gains.{joint} needs p (and d)')
            gains[str(joint)] = g
    missing = [j for j in (joint_names or []) if j not in gains]
    if missing:
        raise ParameterError(f'{path}: no servo gains for joint(s) {missing} (it has '
                             f'{sorted(gains)})')
    out = {}
    for joint in (joint_names or sorted(gains)):
        for key, field in (('p', 'kp'), ('d', 'kv')):
            try:
                v = float(gains[joint].get(key, 0.0))
            except (TypeError, ValueError):
                raise ParameterError(f'{path}: gains.{joint}.{key} = '
                                     f'{gains[joint].get(key)!r} is not a number') from None
            if not math.isfinite(v) or v < 0:
                raise ParameterError(f'{path}: gains.{joint}.{key} = {v} must be finite and '
                                     f'>= 0')
            out[f'actuator/{joint}/{field}'] = v
    return out


def write_controller_config(path, joint_names, kp, kv) -> Path:
    """A ros2_control controller YAML at ``path`` whose joint_trajectory_controller holds
    the servo gains ``kp`` / ``kv`` (one per joint of ``joint_names``, or one for all), in
    the layout :func:`load_servo_gains` reads (written atomically)."""
    from .artifacts import atomic_write_text
    names = list(joint_names)
    kp = np.broadcast_to(np.asarray(kp, float), (len(names),))
    kv = np.broadcast_to(np.asarray(kv, float), (len(names),))
    data = {'joint_trajectory_controller': {'ros__parameters': {
        'joints': names, 'command_interfaces': ['effort'],
        'state_interfaces': ['position', 'velocity'],
        'gains': {n: {'p': float(p), 'd': float(d)} for n, p, d in zip(names, kp, kv)}}}}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, yaml.safe_dump(data, sort_keys=False))
    return path


def package_config_dir() -> Path:
    here = Path(__file__).resolve().parents[2] / 'config'
    if (here / CONTROLLERS_DIR).is_dir():
        return here
    from ament_index_python.packages import get_package_share_directory
    return Path(get_package_share_directory('real2sim2real_ros')) / 'config'


def cell_controller_config(spec) -> Path:
    """The controller configuration a lab running the cell ``spec`` has: ``<stem>
    .controllers.yaml`` beside the spec file, else the one shipped for its robot
    (config/controllers/). ParameterError when there is none."""
    src = getattr(spec, 'source_path', '') or ''
    if src:
        beside = Path(src).with_suffix('.controllers.yaml')
        if beside.is_file():
            return beside
    robot = spec.robot.urdf
    name = ROBOT_CONTROLLERS.get(robot)
    if name is None:
        raise ParameterError(
            f'no controller configuration for the cell {spec.name!r} (robot {robot!r}): put a '
            f'ros2_control YAML with the servo gains beside the spec as '
            f'{Path(src).stem or "<spec>"}.controllers.yaml')
    return package_config_dir() / CONTROLLERS_DIR / name
