"""Set the emulated_cell node's parameters over its set_parameters service (fault injection)."""
from __future__ import annotations


def set_cell(cmd, **values):
    """Set emulated_cell parameters (dots in names as '__')."""
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters
    params = []
    for key, v in values.items():
        pv = (ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=v)
              if isinstance(v, bool) else
              ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=v)
              if isinstance(v, str) else
              ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=float(v)))
        params.append(Parameter(name=key.replace('__', '.'), value=pv))
    resp = cmd.call(SetParameters, 'emulated_cell/set_parameters',
                    SetParameters.Request(parameters=params))
    assert all(r.successful for r in resp.results), resp.results
