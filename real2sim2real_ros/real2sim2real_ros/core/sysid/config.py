"""Identification config files (ROS-free): ``known`` values and declared ``parameters``.

Format (config/identification.yaml)::

    controller_config: controllers/default_arm.yaml        # servo gains (ros2_control YAML)
    known: {actuator/elbow_joint/kp: 2000.0, ...}          # fixed, not identified
    parameters: [{name, prior, lower, upper[, unit, scale]}, ...]
    objects:                                                # optional: object identification
      parameters: [{name: 'geom/{id}/friction', prior, lower, upper}, ...]   # per scene object
      strike_probes: 3                                      # strike probe executions
      strike: {...}                                         # StrikeConfig fields
      fit: {...}                                            # ObjectFitOptions fields

Object parameter templates name ``{id}``, the id of each object of the twin's scene (boxes and
cylinders); ``prior: scene`` takes the scene's value (the reconstructed mass), clipped into
the bounds.

``controller_config`` (relative to the config file; core/controller_config.py) gives the
servo gains, ``actuator/<joint>/kp|kv``, as known values; ``known`` entries override them. A
caller may name another controller file (the lab's, e.g. the evaluation harness's per cell).

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
    def __init__(self, specs: list[ParameterSpec], known: dict[str, float], source: str = '',
                 objects: dict | None = None, controller_config: str = ''):
        self.specs = specs
        self.known = known
        self.source = source
        self.controller_config = controller_config
        objects = objects or {}
        self.object_templates: list[dict] = list(objects.get('parameters') or [])
        self.strike_probes = int(objects.get('strike_probes', 3))
        self.strike = dict(objects.get('strike') or {})
        self.object_fit = dict(objects.get('fit') or {})

    def object_specs(self, object_ids, scene_value=None) -> list[ParameterSpec]:
        """The object templates expanded for ``object_ids``; ``scene_value(name)`` gives the
        scene's value for ``prior: scene``."""
        out = []
        for oid in object_ids:
            for t in self.object_templates:
                d = dict(t)
                d['name'] = str(t['name']).replace('{id}', oid)
                if d.get('prior') == 'scene':
                    if scene_value is None:
                        raise ParameterError(f"{d['name']}: prior 'scene' needs the scene")
                    v = float(scene_value(d['name']))
                    d['prior'] = min(max(v, float(d['lower'])), float(d['upper']))
                out.append(ParameterSpec.from_dict(d))
        return out

    def split(self, names, object_specs: list[ParameterSpec]):
        """(arm specs, object specs) for the goal's ``names`` (empty: everything declared)."""
        if not names:
            return list(self.specs), list(object_specs)
        arm = {s.name: s for s in self.specs}
        obj = {s.name: s for s in object_specs}
        missing = [n for n in names if n not in arm and n not in obj]
        if missing:
            raise UnknownParameterError(
                f'parameter(s) {missing} are not declared in {self.source or "the config"}; '
                f'declared: {list(arm) + list(obj)}')
        return [arm[n] for n in names if n in arm], [obj[n] for n in names if n in obj]

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
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ParameterError(f'cannot read {path}: {exc}') from None
    if not isinstance(data, dict):
        raise ParameterError(f'{path}: expected a mapping with known: and/or parameters:')
    return data


def _controller_path(data: dict, path, controller_config=None) -> str:
    if controller_config:
        return str(Path(controller_config).expanduser())
    ref = data.get('controller_config')
    if not ref:
        return ''
    if not isinstance(ref, str):
        raise ParameterError(f'{path}: controller_config must be a file path')
    p = Path(ref).expanduser()
    return str(p if p.is_absolute() else Path(path).parent / p)


def _known(data: dict, path, controller_config=None) -> dict[str, float]:
    from ..controller_config import load_servo_gains
    known = data.get('known') or {}
    if not isinstance(known, dict):
        raise ParameterError(f'{path}: known must map parameter names to values')
    ctrl = _controller_path(data, path, controller_config)
    out = load_servo_gains(ctrl) if ctrl else {}
    for name, value in known.items():
        split_name(name)
        try:
            out[name] = float(value)
        except (TypeError, ValueError):
            raise ParameterError(f'{path}: known {name}={value!r} is not a number') from None
        if not math.isfinite(out[name]):
            raise ParameterError(f'{path}: known {name} is not finite')
    return out


def load_identification_config(path, controller_config=None) -> IdentificationConfig:
    """``controller_config``: a controller YAML instead of the file's own. Raises
    ParameterError (InvalidBoundsError, UnknownParameterError for bad names)."""
    data = _read(path)
    objects = data.get('objects') or {}
    if not isinstance(objects, dict):
        raise ParameterError(f'{path}: objects must be a mapping (parameters, strike_probes, '
                             f'strike, fit)')
    extra = sorted(set(objects) - {'parameters', 'strike_probes', 'strike', 'fit'})
    if extra:
        raise ParameterError(f'{path}: objects: unknown field(s) {extra}')
    for t in objects.get('parameters') or []:
        if not isinstance(t, dict) or '{id}' not in str(t.get('name', '')):
            raise ParameterError(f"{path}: objects.parameters entries need a name with '{{id}}':"
                                 f' {t!r}')
        probe = dict(t, name=str(t['name']).replace('{id}', 'x'))
        if probe.get('prior') == 'scene':
            probe['prior'] = probe.get('lower')
        ParameterSpec.from_dict(probe)       # validates bounds and fields now
    return IdentificationConfig(load_parameter_specs(data.get('parameters') or []),
                                _known(data, path, controller_config), str(path), objects,
                                _controller_path(data, path, controller_config))


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
