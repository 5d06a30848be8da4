"""Identification config files (ROS-free): ``known`` values and declared ``parameters``.

Format (config/identification.yaml)::

    controller_config: controllers/default_arm.yaml         # servo gains (ros2_control YAML)
    known: {actuator/elbow_joint/kp: 2000.0, ...}           # more fixed values, not identified
    parameters: [{name, prior, lower, upper[, unit, scale]}, ...]
    #  templates, per ARM joint of the robot (RobotDescription.joint_names):
    #  {name: 'joint/*/damping', prior: urdf | effort | <value>, per_effort, urdf_band,
    #   lower | lower_factor, upper | upper_factor[, unit, scale]}
    objects:                                                # optional: object identification
      parameters: [{name: 'geom/{id}/friction', prior, lower, upper}, ...]   # per scene object
      strike_probes: 3                                      # strike probe executions
      strike: {...}                                         # StrikeConfig fields
      fit: {...}                                            # ObjectFitOptions fields

Object parameter templates name ``{id}``, the id of each object of the twin's scene (boxes and
cylinders); ``prior: scene`` takes the scene's value (the reconstructed mass), clipped into
the bounds. A centre of mass offset template may give ``extent_fraction: f`` instead of
``lower``/``upper``: bounds +-f x the object's reconstructed extent along that axis (a box's
centre of mass lies within half its extent; a fixed bound held a 150 mm box's 22 mm offset
at a 15 mm bound).

``controller_config`` (relative to the config file; core/controller_config.py) gives the
servo gains, ``actuator/<joint>/kp|kv``, as known values; ``known`` entries override them. A
caller may name another controller file (the lab's, e.g. the evaluation harness's per cell).
Only the robot's ARM joints take gains from it; a file that names none of them leaves the
robot description's servo gains (a note says so), one that names some but not all is an error.

Joint templates (``joint/*/<field>``) are expanded for the robot's arm joints: the arm chain
from its base to its tool link, never a gripper's fingers or mimic joints (they are held, not
identified). ``prior: urdf`` takes the URDF's ``<dynamics>`` value of that field (damping;
friction for frictionloss; armature) when it lies within ``urdf_band`` x ``per_effort`` x the
joint's effort limit, else ``per_effort`` x effort; ``prior: effort`` always the latter.
Bounds given as ``lower_factor`` / ``upper_factor`` scale with that prior.

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

__all__ = ['IdentificationConfig', 'controller_gains', 'expand_parameters',
           'load_identification_config', 'load_parameter_values']


class IdentificationConfig:
    """What to identify: parameter specs (priors, bounds), known values, object options, source
    file."""
    def __init__(self, specs: list[ParameterSpec], known: dict[str, float], source: str = '',
                 objects: dict | None = None, controller_config: str = '',
                 robot_name: str = '', notes=()):
        self.specs = specs
        self.known = known
        self.source = source
        self.controller_config = controller_config
        self.robot_name = robot_name     # the robot the joint templates were expanded for
        self.notes = list(notes)
        objects = objects or {}
        self.object_templates: list[dict] = list(objects.get('parameters') or [])
        self.strike_probes = int(objects.get('strike_probes', 3))
        self.strike = dict(objects.get('strike') or {})
        self.object_fit = dict(objects.get('fit') or {})

    def object_specs(self, object_ids, scene_value=None, extents=None) -> list[ParameterSpec]:
        """The object templates expanded for ``object_ids``; ``scene_value(name)`` gives the
        scene's value for ``prior: scene``, ``extents(id)`` the object's full extents (x, y,
        z; m) for ``extent_fraction`` bounds."""
        out = []
        for oid in object_ids:
            for t in self.object_templates:
                d = dict(t)
                d['name'] = str(t['name']).replace('{id}', oid)
                if 'extent_fraction' in d:
                    if extents is None:
                        raise ParameterError(f"{d['name']}: extent_fraction needs the scene's "
                                             f"object extents")
                    f = float(d.pop('extent_fraction'))
                    half = f * float(extents(oid)['xyz'.index(d['name'][-1])])
                    d['lower'], d['upper'] = -half, half
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
        """Parameter name -> start value: the known values, then each identified
        parameter's prior."""
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


def _known(data: dict, path) -> dict[str, float]:
    """The literal ``known:`` values (the controller file's gains: :func:`_known_for`)."""
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


_TEMPLATE_FIELDS = {'name', 'prior', 'lower', 'upper', 'unit', 'scale', 'per_effort',
                    'urdf_band', 'lower_factor', 'upper_factor'}
_URDF_FIELD = {'damping': 'damping', 'frictionloss': 'friction', 'armature': 'armature'}


def _is_template(item) -> bool:
    return isinstance(item, dict) and '*' in str(item.get('name', ''))


def _num(value, what: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f'{what}={value!r} is not a number') from None
    if not math.isfinite(v):
        raise ParameterError(f'{what} is not finite')
    return v


def _expand_template(t: dict, robot, path) -> list[ParameterSpec]:
    name = str(t['name'])
    kind, el, fld = (name.split('/', 2) + ['', ''])[:3]
    if kind != 'joint' or el != '*' or not fld or '*' in fld:
        raise ParameterError(f"{path}: template {name!r}: only 'joint/*/<field>' templates "
                             f'exist (one per arm joint)')
    extra = sorted(set(t) - _TEMPLATE_FIELDS)
    if extra:
        raise ParameterError(f'{path}: {name}: unknown field(s) {extra}; known '
                             f'{sorted(_TEMPLATE_FIELDS)}')
    prior = t.get('prior')
    if prior is None:
        raise ParameterError(f'{path}: {name}: missing field prior')
    band = t.get('urdf_band', (0.0, math.inf))
    if not isinstance(band, (list, tuple)) or len(band) != 2:
        raise ParameterError(f'{path}: {name}: urdf_band must be [low, high]')
    band = (_num(band[0], f'{name} urdf_band'), float(band[1]))
    out = []
    for joint in robot.joint_names:
        info = robot.arm_joint(joint)
        what = f"{path}: {name} for joint '{joint}'"
        scaled = None
        if 'per_effort' in t:
            if not math.isfinite(info.effort):
                raise ParameterError(f'{what}: per_effort needs the joint\'s effort limit, '
                                     f'which its URDF does not give')
            scaled = _num(t['per_effort'], f'{name} per_effort') * info.effort
        if prior == 'urdf':
            if fld not in _URDF_FIELD:
                raise ParameterError(f"{what}: prior 'urdf' exists for {sorted(_URDF_FIELD)}")
            value = float(getattr(info, _URDF_FIELD[fld]))
            if scaled is not None and not band[0] * scaled <= value <= band[1] * scaled:
                value = scaled
        elif prior == 'effort':
            if scaled is None:
                raise ParameterError(f"{what}: prior 'effort' needs per_effort")
            value = scaled
        else:
            value = _num(prior, f'{name} prior')
        value = float(f'{value:.6g}')
        d = {'name': f'joint/{joint}/{fld}', 'prior': value}
        for side in ('lower', 'upper'):
            if side in t:
                d[side] = _num(t[side], f'{name} {side}')
            elif f'{side}_factor' in t:
                d[side] = float(f"{_num(t[f'{side}_factor'], name) * value:.6g}")
            else:
                raise ParameterError(f'{path}: {name}: give {side} or {side}_factor')
        for key in ('unit', 'scale'):
            if key in t:
                d[key] = t[key]
        out.append(ParameterSpec.from_dict(d))
    return out


def expand_parameters(items, robot, path='') -> list[ParameterSpec]:
    """The declared parameters with every ``joint/*/<field>`` template expanded, in place, for
    ``robot``'s arm joints (a core.robot_description.RobotDescription)."""
    if not isinstance(items, list):
        raise ParameterError(f'{path}: parameters must be a list')
    out: list = []
    for item in items:
        if _is_template(item):
            out.extend(_expand_template(item, robot, path))
        else:
            out.append(item)
    return load_parameter_specs(out)


def controller_gains(path, joint_names) -> dict[str, float]:
    """Known servo gains of ``joint_names`` from a ros2_control controller file
    (core/controller_config.py): {} when the file names none of them; ParameterError when it
    names some but not all."""
    from ..controller_config import load_servo_gains
    every = load_servo_gains(path)
    have = {n.split('/')[1] for n in every}
    covered = [j for j in joint_names if j in have]
    if not covered:
        return {}
    missing = [j for j in joint_names if j not in have]
    if missing:
        raise ParameterError(f'{path}: controller gains for {covered} but not for the arm '
                             f'joint(s) {missing}')
    return load_servo_gains(path, list(joint_names))


def _default_robot():
    from ..robot_description import default_cell_urdf, load_robot
    return load_robot(default_cell_urdf())


def _known_for(data: dict, path, robot, controller_config=None):
    known, notes = {}, []
    ctrl = _controller_path(data, path, controller_config)
    if ctrl:
        known.update(controller_gains(ctrl, list(robot.joint_names)))
        if not known:
            notes.append(f'{ctrl} names none of the arm joints of {robot.name}: the '
                         f"servo gains stay the robot description's")
    known.update(_known(data, path))
    return known, notes


def load_identification_config(path, robot=None,
                               controller_config=None) -> IdentificationConfig:
    """Raises ParameterError (InvalidBoundsError, UnknownParameterError for bad names).

    ``robot``: the RobotDescription the joint templates and controller gains are for (None:
    the default cell arm). ``controller_config``: a controller YAML instead of the file's
    own."""
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
        if 'extent_fraction' in probe:
            _check_extent_fraction(path, probe)
            f = float(probe.pop('extent_fraction'))
            probe['lower'], probe['upper'] = -f, f
        if probe.get('prior') == 'scene':
            probe['prior'] = probe.get('lower')
        ParameterSpec.from_dict(probe)       # validates bounds and fields now
    robot = robot if robot is not None else _default_robot()
    specs = expand_parameters(list(data.get('parameters') or []), robot, path)
    known, notes = _known_for(data, path, robot, controller_config)
    return IdentificationConfig(specs, known, str(path), objects,
                                _controller_path(data, path, controller_config), robot.name,
                                notes)


def _check_extent_fraction(path, t: dict) -> None:
    name, f = str(t['name']), t['extent_fraction']
    if not (name.endswith('/com_offset_x') or name.endswith('/com_offset_y')):
        raise ParameterError(f'{path}: {name}: extent_fraction is for com_offset_x|y only')
    if 'lower' in t or 'upper' in t:
        raise ParameterError(f'{path}: {name}: give extent_fraction or lower/upper, not both')
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0.0 < f <= 0.5:
        raise ParameterError(f'{path}: {name}: extent_fraction must be a number in (0, 0.5] '
                             f'(a centre of mass lies within half the extent), got {f!r}')


def load_parameter_values(path, robot=None, controller_config=None) -> dict[str, float]:
    """{name: value} from an identification config (known + priors, its templates expanded
    for ``robot``, None = the default cell arm) or a parameter set. ``controller_config``: the
    lab's controller YAML instead of the config's own; beside a parameter set, its servo
    gains fill in the gains the set does not hold."""
    data = _read(path)
    if data.get('controller_config') or any(_is_template(i)
                                            for i in data.get('parameters') or []):
        return load_identification_config(path, robot, controller_config).start_values()
    if controller_config and robot is None:
        robot = _default_robot()
    values, _notes = _known_for(data, path, robot, controller_config)
    for item in data.get('parameters') or []:
        if not isinstance(item, dict) or 'name' not in item:
            raise ParameterError(f'{path}: parameter entry {item!r} has no name')
        key = 'value' if 'value' in item else 'prior'
        if key not in item:
            raise ParameterError(f"{path}: {item['name']} has neither value nor prior")
        split_name(item['name'])
        values[item['name']] = float(item[key])
    return values
