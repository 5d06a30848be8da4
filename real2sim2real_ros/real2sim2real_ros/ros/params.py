"""Node parameters: each with a description and, for numbers, a range.

:func:`declare` declares one; a node lists its parameters as :class:`Param` data and
:func:`bind` declares them all and keeps their live values (:class:`Params`), checked on
set and applied after it (the pattern of nav2's parameter handler). :func:`bind_checked` is
:func:`bind` for a node constructor: an unusable value is a ConfigurationError naming the node
(run_node prints one line and exits 2).
"""
from __future__ import annotations

from dataclasses import dataclass

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
)

_TYPES = {
    bool: ParameterType.PARAMETER_BOOL,
    int: ParameterType.PARAMETER_INTEGER,
    float: ParameterType.PARAMETER_DOUBLE,
    str: ParameterType.PARAMETER_STRING,
}


def declare(node, name: str, default, description: str, *, lo=None, hi=None,
            read_only: bool = False, choices=None, type_=None):
    """Declare ``name`` on ``node`` and return its value.

    ``lo``/``hi`` become an integer or floating-point range that rclpy enforces on set;
    ``choices`` is checked here and listed in the description (rclpy has no enum range).
    List parameters pass an empty list default together with ``type_`` (e.g. 'string_array').
    """
    desc = ParameterDescriptor(description=description, read_only=read_only)
    if choices:
        desc.additional_constraints = f'one of: {", ".join(map(str, choices))}'
    if type_ is not None:
        desc.type = {
            'string_array': ParameterType.PARAMETER_STRING_ARRAY,
            'double_array': ParameterType.PARAMETER_DOUBLE_ARRAY,
            'integer_array': ParameterType.PARAMETER_INTEGER_ARRAY,
            'bool_array': ParameterType.PARAMETER_BOOL_ARRAY,
        }[type_]
    elif type(default) in _TYPES:
        desc.type = _TYPES[type(default)]
    if lo is not None or hi is not None:
        if isinstance(default, float):
            desc.floating_point_range = [FloatingPointRange(
                from_value=float(lo), to_value=float(hi), step=0.0)]
        elif isinstance(default, int) and not isinstance(default, bool):
            desc.integer_range = [IntegerRange(from_value=int(lo), to_value=int(hi), step=0)]
        else:
            raise TypeError(f'range given for non-numeric parameter {name}')
    value = node.declare_parameter(name, default, desc).value
    if choices and value not in choices:
        raise ValueError(f'parameter {name}={value!r} is not one of {list(choices)}')
    return value


@dataclass(frozen=True)
class Param:
    """One node parameter: what :func:`declare` needs, as data (a node's table of them is
    its parameter reference: ``bind`` declares it, ``describe`` documents it)."""
    name: str
    default: object
    description: str
    lo: float | int | None = None
    hi: float | int | None = None
    read_only: bool = False
    choices: tuple | None = None
    type_: str | None = None


# The lab's servo gains: one parameter, the same on every node that builds a twin from an
# identification config (system_identification, sim_server, policy_trainer).
CONTROLLER_CONFIG = Param(
    'controller_config', '',
    "The lab's ros2_control controllers YAML with the arm's servo gains (known values, never "
    "identified; core/controller_config.py); '' = the one the identification config names "
    '(config/controllers/default_arm.yaml: the default cell arm).', read_only=True)


class Params:
    """The live values of a node's parameters, by name (``params.max_tracking_error``).

    Made by :func:`bind`. Values that are not read-only follow ``ros2 param set``: rclpy
    checks types and ranges, :func:`bind` the choices and the node's own ``check``, and the
    values change after the set succeeds (then ``on_change`` runs). A goal that copied a
    value keeps it.
    """

    def __init__(self, values: dict):
        object.__setattr__(self, '_values', dict(values))

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f'no parameter {name!r}') from None

    def __setattr__(self, name, value):
        raise AttributeError('parameters change through ros2 param set, not by assignment')

    def __contains__(self, name) -> bool:
        return name in self._values

    def as_dict(self) -> dict:
        return dict(self._values)


def bind(node, specs, check=None, on_change=None) -> Params:
    """Declare every :class:`Param` of ``specs`` on ``node`` and return their :class:`Params`.

    ``check(values) -> str | None``: called before a set is accepted with the values it would
    leave (current ones updated by the request); a string refuses the set with that reason.
    ``on_change(params)`` runs after an accepted set. rclpy's errors while declaring (range,
    type) and a value outside ``choices`` raise ``ValueError``/rclpy exceptions for the caller
    to turn into its configuration error.
    """
    by_name = {s.name: s for s in specs}
    params = Params({s.name: declare(node, s.name, s.default, s.description, lo=s.lo,
                                     hi=s.hi, read_only=s.read_only, choices=s.choices,
                                     type_=s.type_) for s in specs})

    def validate(changes):
        from rcl_interfaces.msg import SetParametersResult
        values = params.as_dict()
        for p in changes:
            spec = by_name.get(p.name)
            if spec is not None and spec.choices and p.value not in spec.choices:
                return SetParametersResult(successful=False, reason=(
                    f'{p.name}={p.value!r} is not one of {list(spec.choices)}'))
            if spec is not None:
                values[p.name] = p.value
        reason = check(values) if check is not None else None
        return SetParametersResult(successful=reason is None, reason=reason or '')

    def apply(changes):
        updated = {p.name: p.value for p in changes if p.name in by_name}
        if updated:
            params._values.update(updated)
            if on_change is not None:
                on_change(params)

    node.add_on_set_parameters_callback(validate)
    node.add_post_set_parameters_callback(apply)
    return params


def shipped_config(name: str) -> str:
    """The path of the package's own ``config/<name>`` (its share directory): the default of
    a file parameter left empty."""
    from pathlib import Path

    from ament_index_python.packages import get_package_share_directory
    return str(Path(get_package_share_directory('real2sim2real_ros')) / 'config' / name)


def bind_checked(node, specs, node_name: str, *, prefix: str | None = None, check=None,
                 on_change=None) -> Params:
    """:func:`bind`, with rclpy's declaration errors (range, type) and a value outside
    ``choices`` raised as ``ConfigurationError(prefix + error, node_name)``; ``prefix``
    defaults to ``'<node_name> parameters: '``."""
    from rclpy.exceptions import ParameterException

    from .ros_main import ConfigurationError
    try:
        return bind(node, specs, check=check, on_change=on_change)
    except (ParameterException, ValueError, TypeError) as exc:
        head = f'{node_name} parameters: ' if prefix is None else prefix
        raise ConfigurationError(f'{head}{exc}', node_name) from None
