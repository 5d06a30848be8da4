"""Named physical parameters of the twin: declarations (prior, bounds) and estimates (ROS-free).

Names follow PhysicalParameter.msg: ``<kind>/<element>/<field>``, e.g. ``body/box_0/mass``,
``geom/box_0/friction``, ``joint/shoulder_pan_joint/damping``, ``actuator/elbow_joint/kp``,
``global/command_latency``. Values are SI.

A :class:`ParameterSpec` declares what may be identified (prior, bounds, unit, scale); a
:class:`ParameterSet` holds estimates (value, 95% interval, identified flag). Both round-trip
through YAML/JSON as plain dicts.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

__all__ = [
    'EstimateBook',
    'InvalidBoundsError',
    'ParameterError',
    'ParameterEstimate',
    'ParameterSet',
    'ParameterSpec',
    'UnknownParameterError',
    'default_unit',
    'load_parameter_specs',
    'split_name',
]

KINDS = ('body', 'geom', 'joint', 'actuator', 'global')

_UNITS = {
    'mass': 'kg', 'com_offset_x': 'm', 'com_offset_y': 'm', 'com_offset_z': 'm',
    'linear_damping': 'N s/m', 'angular_damping': 'N m s/rad',
    'friction': '1', 'torsional_friction': 'm', 'rolling_friction': 'm',
    'damping': 'N m s/rad', 'frictionloss': 'N m', 'armature': 'kg m^2',
    'kp': 'N m/rad', 'kv': 'N m s/rad', 'command_latency': 's',
    'gravity_compensation': '1', 'finger_friction': '1',
}


class ParameterError(ValueError):
    """A parameter declaration or value is invalid; the message names the parameter."""


class UnknownParameterError(ParameterError):
    """A parameter name the model does not have (Identify/Rollout UNKNOWN_PARAMETER)."""


class InvalidBoundsError(ParameterError):
    """Bounds that are empty or exclude the prior (Identify INVALID_BOUNDS)."""


def split_name(name: str) -> tuple[str, str, str]:
    """('joint', 'elbow_joint', 'damping') from 'joint/elbow_joint/damping'.

    ``global/<field>`` gives ('global', '', field). Element names may contain '/'.
    """
    if not isinstance(name, str) or '/' not in name:
        raise UnknownParameterError(
            f"parameter name {name!r} must look like '<kind>/<element>/<field>' "
            f"or 'global/<field>'")
    kind, rest = name.split('/', 1)
    if kind not in KINDS:
        raise UnknownParameterError(f"parameter {name!r}: kind {kind!r} is not one of {KINDS}")
    if kind == 'global':
        if not rest or '/' in rest:
            raise UnknownParameterError(f"parameter {name!r}: expected 'global/<field>'")
        return kind, '', rest
    if '/' not in rest:
        raise UnknownParameterError(f"parameter {name!r}: expected '{kind}/<element>/<field>'")
    element, fld = rest.rsplit('/', 1)
    if not element or not fld:
        raise UnknownParameterError(f"parameter {name!r}: empty element or field")
    return kind, element, fld


def default_unit(name: str) -> str:
    """The default unit of a parameter from its name's last part ('' when none is known)."""
    return _UNITS.get(split_name(name)[2], '')


@dataclass
class ParameterSpec:
    """A parameter to identify: prior (start value), box bounds, unit and a typical scale.

    scale: the size of a meaningful change (optimiser variables are value / scale); 0 picks
    max(|prior|, (upper - lower) / 10).
    """

    name: str
    prior: float
    lower: float
    upper: float
    unit: str = ''
    scale: float = 0.0

    def __post_init__(self):
        split_name(self.name)
        for attr in ('prior', 'lower', 'upper', 'scale'):
            v = getattr(self, attr)
            try:
                v = float(v)
            except (TypeError, ValueError):
                raise ParameterError(f'{self.name}: {attr}={v!r} is not a number') from None
            setattr(self, attr, v)
        if not all(math.isfinite(getattr(self, a)) for a in ('prior', 'lower', 'upper')):
            raise InvalidBoundsError(f'{self.name}: prior and bounds must be finite')
        if not self.lower < self.upper:
            raise InvalidBoundsError(
                f'{self.name}: lower bound {self.lower} is not below upper bound {self.upper}')
        if not self.lower <= self.prior <= self.upper:
            raise InvalidBoundsError(
                f'{self.name}: bounds [{self.lower}, {self.upper}] exclude the prior '
                f'{self.prior}')
        if self.scale < 0 or not math.isfinite(self.scale):
            raise ParameterError(f'{self.name}: scale={self.scale} must be finite and >= 0')
        if self.scale == 0:
            self.scale = max(abs(self.prior), (self.upper - self.lower) / 10.0)
        if not self.unit:
            self.unit = default_unit(self.name)

    @classmethod
    def from_dict(cls, d: dict) -> ParameterSpec:
        """ParameterSpec from a dict with name and optional prior/lower/upper/unit/scale;
        ParameterError on a bad one."""
        if not isinstance(d, dict) or 'name' not in d:
            raise ParameterError(f'a parameter declaration needs a name: {d!r}')
        known = {'name', 'prior', 'lower', 'upper', 'unit', 'scale'}
        extra = sorted(set(d) - known)
        if extra:
            raise ParameterError(f"{d['name']}: unknown field(s) {extra}; known {sorted(known)}")
        missing = sorted({'prior', 'lower', 'upper'} - set(d))
        if missing:
            raise ParameterError(f"{d['name']}: missing field(s) {missing}")
        return cls(**d)


def load_parameter_specs(source) -> list[ParameterSpec]:
    """Specs from a YAML/JSON file path, or a list of dicts (``{'parameters': [...]}`` too)."""
    data = source
    if isinstance(source, (str, Path)):
        path = Path(source)
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ParameterError(f'cannot read parameter declarations {path}: {exc}') from None
    if isinstance(data, dict):
        data = data.get('parameters', [])
    if not isinstance(data, list):
        raise ParameterError('parameter declarations must be a list')
    specs = [s if isinstance(s, ParameterSpec) else ParameterSpec.from_dict(s) for s in data]
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ParameterError(f'duplicate parameter declaration(s) {dup}')
    return specs


@dataclass
class ParameterEstimate:
    """One entry of a PhysicalParameterSet."""

    name: str
    value: float
    lower_95: float
    upper_95: float
    prior: float
    unit: str = ''
    identified: bool = False

    @property
    def half_width(self) -> float:
        """Half the width of the 95% interval."""
        return 0.5 * (self.upper_95 - self.lower_95)

    def contains(self, value: float) -> bool:
        """True when ``value`` lies in the 95% interval."""
        return self.lower_95 <= value <= self.upper_95


class EstimateBook:
    """What was said about a twin's values beyond the values (sim_server's
    ``~/set_physical_parameters``): per name the 95% interval, prior, identified flag and
    unit; ``priors`` are the twin's own values (the prior of a name never set, or set
    without ``identified``).

    :meth:`record` keeps an interval only when it holds the value and has a width (else
    [value, value]); :meth:`describe` answers for any name at its current value.
    """

    def __init__(self):
        self.priors: dict[str, float] = {}
        self._by_name: dict[str, ParameterEstimate] = {}

    def record(self, name: str, value: float, lower_95: float, upper_95: float, prior: float,
               identified: bool, unit: str = ''):
        """Keep what was said about ``name``: its interval (when it holds ``value`` and has a
        width), prior (when ``identified``), unit and identified flag."""
        bounded = lower_95 <= value <= upper_95 and lower_95 < upper_95
        self._by_name[name] = ParameterEstimate(
            name, value, lower_95 if bounded else value, upper_95 if bounded else value,
            prior if identified else self.priors.get(name, value), unit or default_unit(name),
            bool(identified))

    def describe(self, name: str, value: float) -> ParameterEstimate:
        """The ParameterEstimate of ``name`` at its current ``value``: the recorded interval, or
        [value, value] with the twin's prior when nothing was recorded."""
        est = self._by_name.get(name)
        if est is None:
            return ParameterEstimate(name, float(value), float(value), float(value),
                                     float(self.priors.get(name, value)), default_unit(name),
                                     False)
        return ParameterEstimate(name, float(value), float(est.lower_95),
                                 float(est.upper_95), float(est.prior), est.unit,
                                 bool(est.identified))


@dataclass
class ParameterSet:
    """Estimates by name (insertion-ordered)."""

    estimates: dict[str, ParameterEstimate] = field(default_factory=dict)

    def __getitem__(self, name: str) -> ParameterEstimate:
        try:
            return self.estimates[name]
        except KeyError:
            raise UnknownParameterError(
                f'no parameter {name!r} in the set; have {list(self.estimates)}') from None

    def __contains__(self, name: str) -> bool:
        return name in self.estimates

    def __iter__(self):
        return iter(self.estimates.values())

    def __len__(self) -> int:
        return len(self.estimates)

    def add(self, est: ParameterEstimate) -> None:
        """Add (or replace) the estimate ``est``; ParameterError on a malformed name."""
        split_name(est.name)
        self.estimates[est.name] = est

    def values(self) -> dict[str, float]:
        """Parameter name -> estimated value."""
        return {n: e.value for n, e in self.estimates.items()}

    @classmethod
    def from_priors(cls, specs: list[ParameterSpec]) -> ParameterSet:
        """A set holding each spec's prior as its value (and interval), marked not identified."""
        out = cls()
        for s in specs:
            out.add(ParameterEstimate(s.name, s.prior, s.prior, s.prior, s.prior, s.unit, False))
        return out

    def to_dict(self) -> dict:
        """The set as a JSON/YAML-ready dict: {'parameters': [estimate dicts]}."""
        return {'parameters': [asdict(e) for e in self.estimates.values()]}

    @classmethod
    def from_dict(cls, d: dict) -> ParameterSet:
        """ParameterSet from a {'parameters': [...]} dict; ParameterError on a malformed one."""
        items = d.get('parameters') if isinstance(d, dict) else None
        if not isinstance(items, list):
            raise ParameterError("a parameter set needs a 'parameters' list")
        out = cls()
        for item in items:
            try:
                out.add(ParameterEstimate(**item))
            except TypeError as exc:
                raise ParameterError(f'bad parameter entry {item!r}: {exc}') from None
        return out

    def save(self, path) -> Path:
        """Write YAML (.yaml/.yml) or JSON (anything else), atomically."""
        from .artifacts import atomic_write_text
        path = Path(path)
        text = (yaml.safe_dump(self.to_dict(), sort_keys=False)
                if path.suffix in ('.yaml', '.yml') else json.dumps(self.to_dict(), indent=2))
        atomic_write_text(path, text)
        return path

    @classmethod
    def load(cls, path) -> ParameterSet:
        """ParameterSet from a YAML/JSON file; ParameterError when it cannot be read or parsed."""
        path = Path(path)
        try:
            return cls.from_dict(yaml.safe_load(path.read_text()))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ParameterError(f'cannot read parameter set {path}: {exc}') from None
