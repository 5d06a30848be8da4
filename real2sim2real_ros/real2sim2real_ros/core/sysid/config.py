"""Identification config files (ROS-free): ``known`` values and declared ``parameters``.

Format (config/identification.yaml)::

    known: {actuator/elbow_joint/kp: 2000.0, ...}          # fixed, not identified
    parameters: [{name, prior, lower, upper[, unit, scale]}, ...]

A parameter-set file written by identification (``parameters: [{name, value, lower_95, ...}]``)
is read by :func:`load_parameter_values` too, so sim_server starts from either.
"""
from __future__ import annotations

import math
from pathlib import Path

import yaml

from ..parameters import (
    ParameterError,
    ParameterSpec,
    UnknownParameterError,
    load_parameter_specs,
    split_name,
)

__all__ = ['IdentificationConfig', 'load_identification_config', 'load_parameter_values']


class IdentificationConfig:
    def __init__(self, specs: list[ParameterSpec], known: dict[str, float], source: str = ''):
        self.specs = specs
        self.known = known
        self.source = source

    def select(self, names) -> list[ParameterSpec]:
        """The declared specs for ``names`` (empty: all), in the given order."""
        if not names:
            return list(self.specs)
        by_name = {s.name: s for s in self.specs}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise UnknownParameterError(
                f'parameter(s) {missing} are not declared in {self.source or "the config"}; '
                f'declared: {list(by_name)}')
        return [by_name[n] for n in names]

    def start_values(self) -> dict[str, float]:
        values = dict(self.known)
        values.update({s.name: s.prior for s in self.specs})
        return values


def _read(path) -> dict:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ParameterError(f'cannot read {path}: {exc}') from None
    if not isinstance(data, dict):
        raise ParameterError(f'{path}: expected a mapping with known: and/or parameters:')
    return data


def _known(data: dict, path) -> dict[str, float]:
    known = data.get('known') or {}
    if not isinstance(known, dict):
        raise ParameterError(f'{path}: known must map parameter names to values')
    out = {}
    for name, value in known.items():
        split_name(name)
        try:
            out[name] = float(value)
        except (TypeError, ValueError):
            raise ParameterError(f'{path}: known {name}={value!r} is not a number') from None
        if not math.isfinite(out[name]):
            raise ParameterError(f'{path}: known {name} is not finite')
    return out


def load_identification_config(path) -> IdentificationConfig:
    """Raises ParameterError (InvalidBoundsError, UnknownParameterError for bad names)."""
    data = _read(path)
    return IdentificationConfig(load_parameter_specs(data.get('parameters') or []),
                                _known(data, path), str(path))


def load_parameter_values(path) -> dict[str, float]:
    """{name: value} from an identification config (known + priors) or a parameter set."""
    data = _read(path)
    values = _known(data, path)
    for item in data.get('parameters') or []:
        if not isinstance(item, dict) or 'name' not in item:
            raise ParameterError(f'{path}: parameter entry {item!r} has no name')
        key = 'value' if 'value' in item else 'prior'
        if key not in item:
            raise ParameterError(f"{path}: {item['name']} has neither value nor prior")
        split_name(item['name'])
        values[item['name']] = float(item[key])
    return values
