"""One helper for declaring node parameters with a description and, for numbers, a range."""
from __future__ import annotations

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
