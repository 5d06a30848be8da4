"""URDF -> MuJoCo: robot descriptions for the twin and the emulated cell (ROS-free).

The geometry and kinematics import is MuJoCo's own URDF importer (``MjSpec.from_string``);
this module only prepares the XML for it (mesh paths resolved and converted, the ``<mujoco>``
compiler extension that keeps fixed links and visuals), reads the limits itself for the
metadata MuJoCo does not keep (velocity limits), and adds one position actuator per actuated
joint.

Typical use::

    robot = load_robot(default_cell_urdf())
    world = mujoco.MjSpec()
    ... add table, objects, cameras to world ...
    robot.attach_to(world, pos=(0, 0, 0))
    model = world.compile()

Actuators are named after their joints. Gains: ``kp = kp_per_effort * effort`` unless given,
capped so that the explicit stiffness term stays stable at the model's time step, and
``kv`` from a damping ratio and the joint's inertia at the reference pose. Bodies get gravity
compensation routed through the actuators (``gravcomp`` + ``actgravcomp``), as a real
controller compensates gravity; it still counts against the effort limit.
"""
from __future__ import annotations

import math
import os
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from .mesh_conversion import (
    MeshError,
    default_mesh_cache_dir,
    find_package_dir,
    prepare_mesh,
    resolve_mesh_uri,
)

__all__ = [
    'ActuatorGains',
    'CELL_ARM_HOME',
    'JointInfo',
    'RobotDescription',
    'RobotDescriptionError',
    'default_cell_urdf',
    'find_package_dir',
    'load_robot',
    'urdf_to_mjcf_spec',
]

PACKAGE_NAME = 'real2sim2real_ros'

# A tool-down pose of the default cell arm: tool_tip at about (0.5, 0.0, 0.09) m, tool pointing
# straight down (-z). shoulder_lift + elbow + wrist_1 = pi/2 keeps the tool vertical.
CELL_ARM_HOME = (0.0, -1.3200, 1.5622, 1.3286, 0.0, 0.0)

_ACTUATED_TYPES = ('revolute', 'continuous', 'prismatic')
_UNSUPPORTED_TYPES = ('floating', 'planar')
_COMPILER_EXTENSION = {
    'discardvisual': 'false',   # keep visual geoms (group 1, no collisions) for rendering
    'fusestatic': 'false',      # keep fixed links (tool0, tool_tip) as bodies
    'balanceinertia': 'true',   # tolerate CAD inertias that break the triangle inequality
    'strippath': 'false',       # our mesh paths are absolute cache paths
}


class RobotDescriptionError(ValueError):
    """A robot description cannot be loaded; the message names the problem."""


@dataclass
class ActuatorGains:
    """Position-actuator settings for every actuated joint.

    kp: stiffness [N m/rad or N/m] for every joint; None -> kp_per_effort * effort limit.
    kv: damping [N m s/rad]; None -> 2 * damping_ratio * sqrt(kp * inertia at the ref pose).
    armature: reflected rotor inertia of every joint [kg m^2]; None keeps the URDF's
        (<dynamics armature=".."/>, a non-standard attribute; 0 when absent).
    max_omega_dt: cap on sqrt(kp / inertia) * timestep for auto kp (explicit-stiffness stability).
    per_joint: {joint_name: {'kp': .., 'kv': .., 'armature': ..}} overrides.
    """

    kp: float | None = None
    kp_per_effort: float = 20.0
    kv: float | None = None
    damping_ratio: float = 1.0
    armature: float | None = None
    gravity_compensation: bool = True
    max_omega_dt: float = 0.5
    timestep: float = 0.002
    per_joint: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def from_value(cls, value: ActuatorGains | dict | None) -> ActuatorGains:
        """ActuatorGains from None (defaults), an ActuatorGains or a dict; RobotDescriptionError on
        a bad one."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise RobotDescriptionError(
                f'actuator gains must be ActuatorGains, a dict or None, not {type(value).__name__}')
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise RobotDescriptionError(
                f'unknown actuator gain field(s) {unknown}; known: {sorted(known)}')
        gains = cls(**value)
        gains.validate()
        return gains

    def validate(self) -> None:
        """RobotDescriptionError when a gain is not finite or negative."""
        for name in ('kp', 'kv', 'armature'):
            v = getattr(self, name)
            if v is not None and (not math.isfinite(v) or v < 0):
                raise RobotDescriptionError(f'actuator gain {name}={v} must be finite and >= 0')
        for name in ('kp_per_effort', 'damping_ratio', 'max_omega_dt', 'timestep'):
            v = getattr(self, name)
            if not math.isfinite(v) or v <= 0:
                raise RobotDescriptionError(f'actuator gain {name}={v} must be finite and > 0')
        for joint, over in self.per_joint.items():
            bad = sorted(set(over) - {'kp', 'kv', 'armature'})
            if bad:
                raise RobotDescriptionError(
                    f"per_joint['{joint}'] has unknown key(s) {bad}; known: kp, kv, armature")


@dataclass(frozen=True)
class JointInfo:
    """One URDF joint as written (limits in SI units; inf where the URDF gives none)."""

    name: str
    type: str
    parent: str
    child: str
    lower: float
    upper: float
    velocity: float
    effort: float
    mimic: str | None = None
    damping: float = 0.0
    friction: float = 0.0
    armature: float = 0.0   # non-standard <dynamics armature=".."/>, read only by this module

    @property
    def actuated(self) -> bool:
        """True for a moving, non-mimic joint."""
        return self.type in _ACTUATED_TYPES and self.mimic is None


@dataclass
class _ParsedUrdf:
    name: str
    root: ET.Element
    links: list[str]
    joints: list[JointInfo]
    root_link: str


@dataclass
class RobotDescription:
    """A loaded robot: MuJoCo spec with actuators plus the limits a controller needs.

    Joints by role (``joint_roles``), derived from the URDF: ``joint_names`` are the ARM
    joints, the actuated joints on the chain from ``base_link`` to ``tip_link``, in
    kinematic-tree order (the order of their qpos entries in the compiled model); every array
    (limits, gains) is ordered like them, and probes, identified parameters, limits and
    trajectories are about them only. ``held_joint_names``: the other actuated joints
    (fingers of a gripper, ...), each held at ``held_positions`` by its own position actuator
    (with ctrl 0: the hold is in the actuator's bias), so nothing that commands the arm needs
    to know they exist. ``passive_joint_names``: mimic joints (MuJoCo's equality constraint
    couples them to their leader) and joints without a limit or actuator.
    """

    spec: mujoco.MjSpec
    name: str
    joint_names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    velocity_limits: np.ndarray
    effort_limits: np.ndarray
    kp: np.ndarray
    kv: np.ndarray
    base_link: str
    tip_link: str
    source: str
    joints: tuple[JointInfo, ...] = ()
    notes: tuple[str, ...] = ()
    held_joint_names: tuple[str, ...] = ()
    held_positions: np.ndarray = field(default_factory=lambda: np.zeros(0))
    passive_joint_names: tuple[str, ...] = ()
    _model: mujoco.MjModel | None = field(default=None, repr=False)
    _data: mujoco.MjData | None = field(default=None, repr=False)

    @property
    def actuator_names(self) -> tuple[str, ...]:
        """The arm's actuators: named after their joints."""
        return self.joint_names

    def joint_roles(self) -> dict[str, str]:
        """{joint name: 'arm' | 'held' | 'passive'} for every moving joint of the URDF."""
        roles = {n: 'passive' for n in self.passive_joint_names}
        roles.update({n: 'held' for n in self.held_joint_names})
        roles.update({n: 'arm' for n in self.joint_names})
        return roles

    def arm_joint(self, name: str) -> JointInfo:
        """The URDF joint ``name`` (an arm joint)."""
        for j in self.joints:
            if j.name == name:
                return j
        raise RobotDescriptionError(f"joint '{name}' is not a joint of {self.name}")

    @property
    def n_joints(self) -> int:
        """Number of actuated joints."""
        return len(self.joint_names)

    def compile(self) -> mujoco.MjModel:
        """A fresh MjModel of the robot alone (world = robot base fixed at the origin)."""
        try:
            return self.spec.compile()
        except ValueError as exc:
            raise RobotDescriptionError(f'{self.source}: MuJoCo compile failed: {exc}') from exc

    def _kinematics(self) -> tuple[mujoco.MjModel, mujoco.MjData]:
        if self._model is None:
            self._model = self.compile()
            self._data = mujoco.MjData(self._model)
        return self._model, self._data

    def qpos_indices(self, model: mujoco.MjModel, prefix: str = '') -> np.ndarray:
        """qpos addresses of the actuated joints in ``model`` (e.g. a world it was attached to)."""
        ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, prefix + j)
               for j in self.joint_names]
        missing = [prefix + j for j, i in zip(self.joint_names, ids) if i < 0]
        if missing:
            raise RobotDescriptionError(f'joints {missing} are not in the given model')
        return np.array([model.jnt_qposadr[i] for i in ids], dtype=int)

    def fk(self, q, link: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """World pose of ``link`` (default ``tip_link``) at joint positions ``q``.

        Returns (position [3] in m, quaternion [4] w, x, y, z) with the robot base at the origin.
        """
        q = np.asarray(q, dtype=float).reshape(-1)
        if q.shape[0] != self.n_joints or not np.all(np.isfinite(q)):
            raise RobotDescriptionError(
                f'fk expects {self.n_joints} finite joint positions {list(self.joint_names)}, '
                f'got {q.tolist()}')
        model, data = self._kinematics()
        body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, link or self.tip_link)
        if body < 0:
            raise RobotDescriptionError(f"link '{link}' is not a body of {self.name}")
        data.qpos[:] = model.qpos0
        data.qpos[self.qpos_indices(model)] = q
        mujoco.mj_kinematics(model, data)
        return data.xpos[body].copy(), data.xquat[body].copy()

    def within_limits(self, q, tol: float = 0.0) -> bool:
        """True when every joint position in ``q`` is within its limits (+/- ``tol``)."""
        q = np.asarray(q, dtype=float).reshape(-1)
        return bool(np.all(q >= self.lower - tol) and np.all(q <= self.upper + tol))

    def attach_to(self, world_spec: mujoco.MjSpec, pos=(0.0, 0.0, 0.0),
                  quat=(1.0, 0.0, 0.0, 0.0), prefix: str = '') -> mujoco.MjsFrame:
        """Insert a copy of the robot (bodies, meshes, actuators) into ``world_spec``.

        The robot base goes at ``pos`` / ``quat`` (w, x, y, z) in the world frame. Element names
        get ``prefix`` (default none: joint and actuator names stay the URDF joint names).
        The world's own <option> (time step, integrator) is kept; the gains assume a time step
        no larger than ``ActuatorGains.timestep`` and the implicitfast integrator.
        Returns the frame the robot was attached to.
        """
        frame = world_spec.worldbody.add_frame(
            pos=np.asarray(pos, dtype=float), quat=np.asarray(quat, dtype=float))
        child = self.spec.copy()
        # The world's options win anyway; aligning them avoids MuJoCo's conflict warnings.
        child.option.integrator = world_spec.option.integrator
        child.option.timestep = world_spec.option.timestep
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings('ignore', message='.*empty prefix.*')
                world_spec.attach(child, prefix=prefix, frame=frame)
        except ValueError as exc:
            raise RobotDescriptionError(
                f'cannot attach {self.name} to the world spec (name clash? use prefix=): {exc}'
            ) from exc
        return frame


# --------------------------------------------------------------------------- URDF input


def _package_urdf(filename: str, what: str) -> Path:
    try:
        from ament_index_python.packages import get_package_share_directory
        path = Path(get_package_share_directory(PACKAGE_NAME)) / 'urdf' / filename
        if path.is_file():
            return path
    except Exception:  # not installed / ament_index not importable
        pass
    path = Path(__file__).resolve().parents[2] / 'urdf' / filename
    if not path.is_file():
        raise RobotDescriptionError(f'{what} URDF not found (looked for {path})')
    return path


def default_cell_urdf() -> Path:
    """The default cell arm's URDF (installed share dir when available, else source tree)."""
    return _package_urdf('cell_arm.urdf', 'default cell')


def gripper_cell_urdf() -> Path:
    """The default cell arm with a parallel-jaw gripper instead of the pusher
    (urdf/cell_arm_gripper.urdf; a cell spec's ``robot.urdf: gripper``)."""
    return _package_urdf('cell_arm_gripper.urdf', 'gripper cell')


def _read_urdf(urdf: str | os.PathLike, base_dir: Path | None) -> tuple[str, Path | None, str]:
    """(xml text, directory for relative paths, a label for messages)."""
    if isinstance(urdf, str) and urdf.lstrip().startswith('<'):
        return urdf, (Path(base_dir) if base_dir else None), '<URDF string>'
    path = Path(urdf).expanduser()
    if not path.is_file():
        raise RobotDescriptionError(f"URDF file '{path}' does not exist")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise RobotDescriptionError(f"cannot read URDF file '{path}': {exc}") from exc
    return text, (Path(base_dir) if base_dir else path.parent), str(path)


def _float_attr(elem: ET.Element, attr: str, default: float, what: str) -> float:
    raw = elem.get(attr)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        raise RobotDescriptionError(f"{what}: {attr}='{raw}' is not a number") from None


def _parse_urdf(text: str, label: str, require_limits: bool) -> _ParsedUrdf:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line, col = exc.position
        raise RobotDescriptionError(
            f'malformed URDF XML in {label}: line {line}, column {col}: {exc}') from None
    if root.tag != 'robot':
        raise RobotDescriptionError(f"{label}: root element is <{root.tag}>, expected <robot>")
    links = [ln.get('name') for ln in root.findall('link')]
    if not links or any(not n for n in links):
        raise RobotDescriptionError(f'{label}: every <link> needs a name and there must be one')
    dup = sorted({n for n in links if links.count(n) > 1})
    if dup:
        raise RobotDescriptionError(f'{label}: duplicate link name(s) {dup}')
    joints: list[JointInfo] = []
    children: set[str] = set()
    for j in root.findall('joint'):
        name, jtype = j.get('name'), j.get('type')
        what = f"{label}: joint '{name}'"
        if not name or not jtype:
            raise RobotDescriptionError(f'{label}: a <joint> lacks its name or type')
        if jtype in _UNSUPPORTED_TYPES:
            raise RobotDescriptionError(f'{what} has type {jtype}, which is not supported')
        if jtype not in _ACTUATED_TYPES + ('fixed',):
            raise RobotDescriptionError(f"{what} has unknown type '{jtype}'")
        parent, child = j.find('parent'), j.find('child')
        parent = parent.get('link') if parent is not None else None
        child = child.get('link') if child is not None else None
        for role, link in (('parent', parent), ('child', child)):
            if link not in links:
                raise RobotDescriptionError(f"{what}: {role} link '{link}' is not defined")
        children.add(child)
        limit = j.find('limit')
        mimic = j.find('mimic')
        lower, upper = -math.inf, math.inf
        velocity, effort = math.inf, math.inf
        if jtype in _ACTUATED_TYPES:
            if limit is None:
                if require_limits and mimic is None:
                    raise RobotDescriptionError(f'{what} ({jtype}) has no <limit> element')
            else:
                velocity = _float_attr(limit, 'velocity', math.inf, what)
                effort = _float_attr(limit, 'effort', math.inf, what)
                if jtype != 'continuous':
                    lower = _float_attr(limit, 'lower', math.nan, what)
                    upper = _float_attr(limit, 'upper', math.nan, what)
                if require_limits and mimic is None:
                    missing = [a for a in ('velocity', 'effort') if limit.get(a) is None]
                    if jtype != 'continuous':
                        missing += [a for a in ('lower', 'upper') if limit.get(a) is None]
                    if missing:
                        raise RobotDescriptionError(f'{what}: <limit> lacks {missing}')
                if not lower <= upper:  # also catches NaN from a missing lower/upper
                    if math.isnan(lower) or math.isnan(upper):
                        lower, upper = -math.inf, math.inf
                    else:
                        raise RobotDescriptionError(
                            f'{what}: lower limit {lower} is above upper limit {upper}')
        dyn = j.find('dynamics')
        dyn_values = {a: 0.0 if dyn is None else _float_attr(dyn, a, 0.0, what)
                      for a in ('damping', 'friction', 'armature')}
        joints.append(JointInfo(name, jtype, parent, child, lower, upper, velocity, effort,
                                mimic.get('joint') if mimic is not None else None,
                                **dyn_values))
    names = [j.name for j in joints]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise RobotDescriptionError(f'{label}: duplicate joint name(s) {dup}')
    roots = [ln for ln in links if ln not in children]
    if len(roots) != 1:
        raise RobotDescriptionError(
            f'{label}: the links must form one tree; root candidates: {roots}')
    return _ParsedUrdf(root.get('name') or 'robot', root, links, joints, roots[0])


def _rewrite_meshes(parsed: _ParsedUrdf, label: str, base_dir: Path | None,
                    package_dirs: dict[str, Path] | None, cache_dir: Path) -> int:
    """Point every <mesh filename> at a MuJoCo-readable cached copy; returns the count."""
    count = 0
    for link in parsed.root.findall('link'):
        for kind in ('visual', 'collision'):
            for elem in link.findall(kind):
                for mesh in elem.iter('mesh'):
                    uri = mesh.get('filename')
                    where = f"{label}: link '{link.get('name')}' {kind} mesh"
                    if not uri:
                        raise RobotDescriptionError(f'{where} has no filename')
                    try:
                        src = resolve_mesh_uri(uri, base_dir=base_dir,
                                               package_dirs=package_dirs)
                        if not src.is_file():
                            raise MeshError(f"mesh file '{uri}' not found (resolved to '{src}')")
                        dst = prepare_mesh(src, cache_dir, variant=mesh.get('scale', ''))
                    except MeshError as exc:
                        raise RobotDescriptionError(f'{where}: {exc}') from None
                    mesh.set('filename', str(dst))
                    count += 1
    return count


def _set_compiler_extension(root: ET.Element) -> None:
    ext = root.find('mujoco')
    if ext is None:
        ext = ET.Element('mujoco')
        root.insert(0, ext)
    compiler = ext.find('compiler')
    if compiler is None:
        compiler = ET.SubElement(ext, 'compiler')
    for key, value in _COMPILER_EXTENSION.items():
        compiler.set(key, value)
    compiler.attrib.pop('meshdir', None)  # paths are absolute now


# --------------------------------------------------------------------------- conversion


@dataclass
class _Conversion:
    spec: mujoco.MjSpec
    parsed: _ParsedUrdf
    joint_order: list[str]
    kp: np.ndarray
    kv: np.ndarray
    mesh_count: int
    notes: list[str]
    label: str
    base_link: str = ''
    tip_link: str = ''
    held: list[str] = field(default_factory=list)
    held_positions: list[float] = field(default_factory=list)
    passive: list[str] = field(default_factory=list)


# Words that name an end effector's joints (a gripper's fingers, jaws, knuckles).
_END_EFFECTOR_WORDS = ('finger', 'gripper', 'jaw', 'claw', 'knuckle')


def _end_effector_joints(parsed: _ParsedUrdf) -> set[str]:
    """Moving joints of an end effector: mimic joints and the joints they follow, joints
    named like a gripper's (_END_EFFECTOR_WORDS; the joint's name only: an SO-101's
    wrist_roll moves its 'gripper_link' and is an arm joint), and every moving joint below
    one of those."""
    moving = [j for j in parsed.joints if j.type != 'fixed']
    ee = set()
    for j in moving:
        if j.mimic is not None:
            ee.update((j.name, j.mimic))
        if any(w in j.name.lower() for w in _END_EFFECTOR_WORDS):
            ee.add(j.name)
    by_parent: dict[str, list[JointInfo]] = {}
    for j in parsed.joints:
        by_parent.setdefault(j.parent, []).append(j)
    stack = [j.child for j in moving if j.name in ee]
    while stack:
        for j in by_parent.get(stack.pop(), []):
            if j.type != 'fixed':
                ee.add(j.name)
            stack.append(j.child)
    return ee


def _chain(parsed: _ParsedUrdf, base: str, tip: str, label: str) -> list[JointInfo]:
    """The joints from ``base`` down to ``tip`` (root first)."""
    into = {j.child: j for j in parsed.joints}
    path, link = [], tip
    while link != base:
        if link not in into:
            raise RobotDescriptionError(
                f"{label}: tip_link '{tip}' is not below base_link '{base}'")
        path.append(into[link])
        link = into[link].parent
    return path[::-1]


def _default_base(parsed: _ParsedUrdf) -> str:
    base = parsed.root_link
    if base == 'world':
        kids = [j.child for j in parsed.joints if j.parent == 'world']
        base = kids[0] if len(kids) == 1 else base
    return base


def _convert(urdf, *, package_dirs, base_dir, actuator, mesh_cache_dir,
             require_limits: bool = True, tip_link: str | None = None,
             base_link: str | None = None) -> _Conversion:
    gains = ActuatorGains.from_value(actuator)
    gains.validate()
    text, base, label = _read_urdf(urdf, base_dir)
    parsed = _parse_urdf(text, label, require_limits)
    tip = tip_link or _default_tip(parsed)
    base_name = base_link or _default_base(parsed)
    for role, link in (('tip_link', tip), ('base_link', base_name)):
        if link not in parsed.links:
            raise RobotDescriptionError(f"{label}: {role} '{link}' is not a link of the URDF")
    arm_set = {j.name for j in _chain(parsed, base_name, tip, label) if j.actuated}
    cache_dir = Path(mesh_cache_dir) if mesh_cache_dir else default_mesh_cache_dir()
    mesh_count = _rewrite_meshes(parsed, label, base, package_dirs, cache_dir)
    _set_compiler_extension(parsed.root)
    try:
        spec = mujoco.MjSpec.from_string(ET.tostring(parsed.root, encoding='unicode'))
    except ValueError as exc:
        raise RobotDescriptionError(f'MuJoCo could not import {label}: {exc}') from exc
    spec.modelname = parsed.name
    spec.option.timestep = gains.timestep
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST

    by_name = {j.name: j for j in parsed.joints}
    unknown = sorted(set(gains.per_joint) - set(by_name))
    if unknown:
        raise RobotDescriptionError(f'{label}: per_joint gains name unknown joint(s) {unknown}')
    for jspec in spec.joints:
        info = by_name.get(jspec.name)
        if info is None:
            continue
        armature = gains.per_joint.get(jspec.name, {}).get('armature', gains.armature)
        jspec.armature = float(info.armature if armature is None else armature)
        if info.actuated and gains.gravity_compensation:
            jspec.actgravcomp = True
    if gains.gravity_compensation:
        for body in spec.bodies[1:]:  # [0] is the world
            body.gravcomp = 1.0
    _exclude_adjacent_links(spec, parsed, arm_set)

    try:
        model = spec.compile()
    except ValueError as exc:
        raise RobotDescriptionError(f'MuJoCo could not compile {label}: {exc}') from exc
    # Actuated joints in tree order (= qpos order): the arm chain's, then the held ones.
    tree = [model.joint(i).name for i in range(model.njnt) if model.joint(i).name in by_name]
    actuated = [n for n in tree if by_name[n].actuated]
    joint_order = [n for n in actuated if n in arm_set]
    held = [n for n in actuated if n not in arm_set]
    passive = [n for n in tree if n not in arm_set and n not in held]
    kp_all, kv_all, notes = _gains_for(model, joint_order + held, by_name, gains)
    held_pos = []
    for k, name in enumerate(joint_order + held):
        info = by_name[name]
        act = spec.add_actuator(name=name, target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        act.set_to_position(kp=float(kp_all[k]), kv=float(kv_all[k]))
        if math.isfinite(info.effort):
            act.forcelimited = True
            act.forcerange = [-info.effort, info.effort]
        if name in arm_set:
            if math.isfinite(info.lower) and math.isfinite(info.upper):
                act.ctrllimited = True
                act.ctrlrange = [info.lower, info.upper]
            continue
        # Held joint: ctrl 0 holds it where it starts (its zero, clipped into its limits);
        # the offset is in the bias, kp (h + ctrl - q) - kv qdot.
        h = float(np.clip(0.0, info.lower, info.upper))
        bias = list(act.biasprm)
        bias[0] = float(kp_all[k]) * h
        act.biasprm = bias
        act.ctrllimited = False
        held_pos.append(h)
    n_arm = len(joint_order)
    return _Conversion(spec, parsed, joint_order, kp_all[:n_arm], kv_all[:n_arm], mesh_count,
                       notes, label, base_name, tip, held, held_pos, passive)


def _exclude_adjacent_links(spec: mujoco.MjSpec, parsed: _ParsedUrdf,
                            arm_joints: set[str] = frozenset()) -> None:
    """No contacts between links joined by a joint (as an SRDF's 'Adjacent' entries), nor
    among the links of the end effector (everything below the last arm joint: a hand, its
    fingers and a tool it carries touch by construction, as an SRDF's 'Never' entries).

    MuJoCo already filters parent-child contacts, except when the parent is welded to the
    world (a fixed base_link): then the first moving link's geoms would collide with the base
    wherever their CAD shapes overlap at the joint.
    """
    bodies = {b.name for b in spec.bodies[1:]}
    for j in parsed.joints:
        if j.parent in bodies and j.child in bodies:
            spec.add_exclude(bodyname1=j.parent, bodyname2=j.child)
    last = [j for j in parsed.joints if j.name in arm_joints]
    if not last:
        return
    # The deepest arm joint: the one no other arm joint is below.
    below = {}
    for j in parsed.joints:
        below.setdefault(j.parent, []).append(j)

    def subtree(link):
        out, stack = [], [link]
        while stack:
            ln = stack.pop()
            out.append(ln)
            stack.extend(j.child for j in below.get(ln, []))
        return out
    tool_root = next(j.child for j in last
                     if not any(k.name in arm_joints for ln in subtree(j.child)
                                for k in below.get(ln, [])))
    ee = [ln for ln in subtree(tool_root) if ln in bodies]
    adjacent = {frozenset((j.parent, j.child)) for j in parsed.joints}
    for a in range(len(ee)):
        for b in range(a + 1, len(ee)):
            if frozenset((ee[a], ee[b])) not in adjacent:
                spec.add_exclude(bodyname1=ee[a], bodyname2=ee[b])


def _gains_for(model: mujoco.MjModel, joint_order: list[str], by_name: dict[str, JointInfo],
               gains: ActuatorGains) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """kp, kv per actuated joint from config, effort limits and the reference-pose inertia."""
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    mass = np.zeros((model.nv, model.nv))
    mujoco.mj_fullM(model, data, mass)
    inv_mass = np.linalg.inv(mass) if model.nv else mass
    omega_max = gains.max_omega_dt / gains.timestep
    kp, kv, notes = [], [], []
    for name in joint_order:
        dof = model.jnt_dofadr[model.joint(name).id]
        over = gains.per_joint.get(name, {})
        inertia_locked = mass[dof, dof]            # others held: for the damping
        inertia_free = 1.0 / inv_mass[dof, dof]    # others free: lowest, bounds stability
        k = over.get('kp', gains.kp)
        if k is None:
            effort = by_name[name].effort
            if not math.isfinite(effort):
                raise RobotDescriptionError(
                    f"joint '{name}' has no effort limit: give its kp in actuator gains")
            k = gains.kp_per_effort * effort
            k_cap = inertia_free * omega_max ** 2
            if k > k_cap:
                notes.append(f"{name}: kp {k:.4g} capped to {k_cap:.4g} for stability at "
                             f"dt={gains.timestep} (inertia {inertia_free:.3g}); add armature "
                             f"or lower the time step for a stiffer servo")
                k = k_cap
        d = over.get('kv', gains.kv)
        if d is None:
            d = 2.0 * gains.damping_ratio * math.sqrt(k * inertia_locked)
        kp.append(float(k))
        kv.append(float(d))
    return np.array(kp), np.array(kv), notes


def urdf_to_mjcf_spec(urdf: str | os.PathLike, *, package_dirs: dict[str, Path] | None = None,
                      base_dir: Path | None = None,
                      actuator: ActuatorGains | dict[str, Any] | None = None,
                      mesh_cache_dir: Path | None = None) -> mujoco.MjSpec:
    """MuJoCo spec (with position actuators) of a URDF file path or URDF XML string.

    See ``load_robot`` for the limits and helpers that come with it.
    """
    return _convert(urdf, package_dirs=package_dirs, base_dir=base_dir, actuator=actuator,
                    mesh_cache_dir=mesh_cache_dir).spec


def _default_tip(parsed: _ParsedUrdf) -> str:
    """Leaf at the end of the longest chain from the root (first in document order on ties)
    of the tree without its end-effector joints (_end_effector_joints: a gripper's fingers
    are cut off, so the tip is the hand's deepest link, not a finger)."""
    ee = _end_effector_joints(parsed)
    children: dict[str, list[str]] = {}
    for j in parsed.joints:
        if j.name not in ee:
            children.setdefault(j.parent, []).append(j.child)
    best, best_depth = parsed.root_link, 0
    stack = [(parsed.root_link, 0)]
    while stack:
        link, depth = stack.pop()
        kids = children.get(link, [])
        if not kids and depth > best_depth:
            best, best_depth = link, depth
        stack.extend((k, depth + 1) for k in reversed(kids))
    return best


def load_robot(urdf: str | os.PathLike, *, package_dirs: dict[str, Path] | None = None,
               base_dir: Path | None = None, actuator: ActuatorGains | dict | None = None,
               mesh_cache_dir: Path | None = None, tip_link: str | None = None,
               base_link: str | None = None, require_limits: bool = True) -> RobotDescription:
    """Load a URDF (file path, or the XML string published on /robot_description).

    package_dirs maps package names to share directories for ``package://`` URIs (otherwise
    the ament index and known roots are searched); base_dir resolves relative mesh paths
    (default: the URDF file's directory). Converted meshes go to ``mesh_cache_dir``
    (default ~/.cache/real2sim2real_ros/meshes). tip_link defaults to the last link of the
    longest chain that passes no gripper joint; base_link to the root link (its child when
    the root is a bare 'world'). The arm joints (``joint_names``) are the actuated joints
    between them; the other actuated joints are held (see RobotDescription).
    """
    conv = _convert(urdf, package_dirs=package_dirs, base_dir=base_dir, actuator=actuator,
                    mesh_cache_dir=mesh_cache_dir, require_limits=require_limits,
                    tip_link=tip_link, base_link=base_link)
    parsed = conv.parsed
    by_name = {j.name: j for j in parsed.joints}
    infos = [by_name[n] for n in conv.joint_order]
    return RobotDescription(
        spec=conv.spec,
        name=parsed.name,
        joint_names=tuple(conv.joint_order),
        lower=np.array([j.lower for j in infos]),
        upper=np.array([j.upper for j in infos]),
        velocity_limits=np.array([j.velocity for j in infos]),
        effort_limits=np.array([j.effort for j in infos]),
        kp=conv.kp,
        kv=conv.kv,
        base_link=conv.base_link,
        tip_link=conv.tip_link,
        source=conv.label,
        joints=tuple(parsed.joints),
        notes=tuple(conv.notes),
        held_joint_names=tuple(conv.held),
        held_positions=np.array(conv.held_positions, float),
        passive_joint_names=tuple(conv.passive),
    )
