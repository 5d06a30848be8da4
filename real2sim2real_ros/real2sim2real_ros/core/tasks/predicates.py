"""Success predicates (ROS-free): the registry a task YAML's ``success`` conjunction names.

Each predicate is a pure function ``fn(state, params, context) -> bool`` of

* ``state``: the task's state dict (``object_xy``, ``object_z``, ``object_yaw``, ``goal_xy``,
  ``goal_yaw``, optionally ``object_up_z``, ``object_speed``, ``joint_positions``,
  ``robot_contacts``, ``held_steps``, ``jaw_position`` / ``jaw_open_at``; see each
  predicate);
* ``params``: its parameters from the YAML, ``config.<field>`` references already resolved;
* ``context``: what the task derives from its config (``rest_z``: the object's centre height
  resting upright on the table).

``PREDICATES`` maps a name to ``(fn, required params, optional params with defaults)``; the
spec loader (spec.py) checks a YAML's predicates and parameters against it. A state that
lacks a key a predicate needs raises TaskError (a task that declares ``at_rest`` must put
``object_speed`` in its state).
"""
from __future__ import annotations

import numpy as np

from ..geometry import wrap_angle
from .base import TaskError


def _need(state: dict, key: str, predicate: str):
    if key not in state:
        raise TaskError(f'success predicate {predicate!r} needs state[{key!r}]; the state '
                        f'has {sorted(state)}')
    return state[key]


def goal_distance(state: dict) -> float:
    """|object_xy - goal_xy| (m)."""
    return float(np.linalg.norm(np.asarray(state['object_xy']) - state['goal_xy']))


def yaw_gap(state: dict) -> float:
    """|wrap(object_yaw - goal_yaw)| (rad)."""
    return abs(wrap_angle(state['object_yaw'] - state['goal_yaw']))


def object_within(state: dict, p: dict, context: dict) -> bool:
    """The object's centre within ``radius`` (m) of the goal point in the table plane."""
    return goal_distance(state) <= p['radius']


def object_in_square(state: dict, p: dict, context: dict) -> bool:
    """The object's centre inside the axis-aligned square of half-width ``half_width`` (m)
    about the goal point (a target region on the table)."""
    d = np.abs(np.asarray(state['object_xy'], float) - state['goal_xy'])
    return bool(np.all(d <= p['half_width']))


def gripper_open(state: dict, p: dict, context: dict) -> bool:
    """The jaw open, the object released: ``state['jaw_position']`` within ``tolerance`` (m)
    of the open position ``state['jaw_open_at']``."""
    pos = float(_need(state, 'jaw_position', 'gripper_open'))
    return pos >= float(_need(state, 'jaw_open_at', 'gripper_open')) - p['tolerance']


def on_top_of(state: dict, p: dict, context: dict) -> bool:
    """The object resting on another's top face: its centre within ``radius`` (m) of the
    goal point in the table plane and within ``height_tolerance`` (m) of ``state['goal_z']``
    (the centre height it has resting there)."""
    return (goal_distance(state) <= p['radius'] and
            abs(state['object_z'] - float(_need(state, 'goal_z', 'on_top_of')))
            < p['height_tolerance'])


def level(state: dict, p: dict, context: dict) -> bool:
    """Not tilted: ``state['object_up_z']`` (the cosine of the largest tilt) above
    ``min_up_z`` (wherever the object rests; ``upright`` also needs the table)."""
    return p['min_up_z'] is None or float(_need(state, 'object_up_z', 'level')) > p['min_up_z']


def upright(state: dict, p: dict, context: dict) -> bool:
    """Resting on the table right way up: the centre within ``height_tolerance`` (m) of its
    rest height and, when ``min_up_z`` is given, the object's z axis . world z above it (the
    cosine of the largest tilt: 0.95 is 18.2 deg; a state without ``object_up_z`` counts as
    untilted)."""
    if not abs(state['object_z'] - context['rest_z']) < p['height_tolerance']:
        return False
    return p['min_up_z'] is None or state.get('object_up_z', 1.0) > p['min_up_z']


def yaw_within(state: dict, p: dict, context: dict) -> bool:
    """The object's yaw within ``tolerance`` (rad) of the goal yaw."""
    return yaw_gap(state) <= p['tolerance']


def at_rest(state: dict, p: dict, context: dict) -> bool:
    """The object's speed (``state['object_speed']``, m/s) below ``speed``."""
    return float(_need(state, 'object_speed', 'at_rest')) < p['speed']


def held_for(state: dict, p: dict, context: dict) -> bool:
    """The rest of the conjunction has held for ``steps`` consecutive control ticks before
    this one (``state['held_steps']``, counted by the task's runner)."""
    return int(_need(state, 'held_steps', 'held_for')) >= p['steps']


def joint_past(state: dict, p: dict, context: dict) -> bool:
    """Joint ``joint`` (an index into ``state['joint_positions']``) past ``threshold``:
    above it for ``direction: above`` (the default), below it for ``below``."""
    q = float(np.asarray(_need(state, 'joint_positions', 'joint_past'))[p['joint']])
    return q > p['threshold'] if p['direction'] == 'above' else q < p['threshold']


def no_robot_contact(state: dict, p: dict, context: dict) -> bool:
    """No contact between the robot and the object (``state['robot_contacts']``: a count)."""
    return int(_need(state, 'robot_contacts', 'no_robot_contact')) == 0


# name -> (function, required parameters, optional parameters with their defaults)
PREDICATES = {
    'object_within': (object_within, ('radius',), {}),
    'object_in_square': (object_in_square, ('half_width',), {}),
    'gripper_open': (gripper_open, (), {'tolerance': 0.005}),
    'on_top_of': (on_top_of, ('radius',), {'height_tolerance': 0.01}),
    'level': (level, (), {'min_up_z': 0.95}),
    'upright': (upright, (), {'height_tolerance': 0.01, 'min_up_z': None}),
    'yaw_within': (yaw_within, ('tolerance',), {}),
    'at_rest': (at_rest, ('speed',), {}),
    'held_for': (held_for, ('steps',), {}),
    'joint_past': (joint_past, ('joint', 'threshold'), {'direction': 'above'}),
    'no_robot_contact': (no_robot_contact, (), {}),
}

# The checks each parameter must pass: (test, what the error says it must be).
_POSITIVE = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0,
             'must be a number > 0')
PARAM_CHECKS = {
    'radius': _POSITIVE,
    'half_width': _POSITIVE,
    'tolerance': _POSITIVE,
    'height_tolerance': _POSITIVE,
    'speed': _POSITIVE,
    'min_up_z': (lambda v: v is None or (isinstance(v, (int, float))
                                         and not isinstance(v, bool) and -1 <= v < 1),
                 'must be a number in [-1, 1) or null'),
    'steps': (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
              'must be an integer >= 1'),
    'joint': (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
              'must be an integer >= 0'),
    'threshold': (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
                  'must be a number'),
    'direction': (lambda v: v in ('above', 'below'), "must be 'above' or 'below'"),
}


def all_hold(success: list, state: dict, context: dict) -> bool:
    """The conjunction: every ``(name, params)`` in ``success`` holds (in order, stopping at
    the first that fails)."""
    return all(PREDICATES[name][0](state, params, context) for name, params in success)
