"""Cell spec: the hidden truth of an emulated physical cell, loaded from YAML and validated.

Every physical value here (masses, friction, COM offsets, damping, latency, noise, contact
settings) is the *truth* of the emulated "reality". Only the emulated cell and the evaluator
read a cell spec; the pipeline (reconstruction, identification, training) never does: it sees
the cell through ROS topics exactly as it would see a real one. See docs/cell_spec.md.

Errors raise :class:`CellSpecError` whose message starts with the field path, e.g.
``objects[1].mass: must be > 0``.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from .geometry import quat_xyzw_to_matrix

SHAPES = ('box', 'cylinder')
DEPTH_FORMATS = ('32FC1', '16UC1')
INTEGRATORS = ('Euler', 'RK4', 'implicit', 'implicitfast')
CONES = ('pyramidal', 'elliptic')
ENGINES = ('mujoco', 'drake')
DRAKE_CONTACT_MODELS = ('hydroelastic_with_fallback', 'point')


class CellSpecError(ValueError):
    """A cell spec field is missing or invalid; the message names the field path."""


@dataclass(frozen=True)
class DepthNoiseSpec:
    """RealSense D435-like stereo depth noise (see core/depth_noise.py)."""
    enabled: bool = True
    baseline: float = 0.050          # m, D435 stereo baseline
    focal_px: float = 383.0          # px, D435 depth imager focal length at 640x480
    subpixel_std: float = 0.08       # px, disparity noise -> sigma_z = z^2 * std / (f * b)
    edge_threshold: float = 0.03     # m, a jump to a 4-neighbour larger than this is a hole
    edge_hole_width: int = 1         # px, holes are dilated this much around edges
    dropout: float = 0.002           # fraction of random invalid pixels
    min_depth: float = 0.2           # m, closer than this reads as a hole
    max_depth: float = 4.0           # m, farther than this reads as a hole
    quantization: float = 0.001      # m, depth step (16UC1 is 1 mm)


@dataclass(frozen=True)
class CameraSpec:
    """One camera of a cell: image size and pinhole intrinsics (px), pose in the world, noise and
    calibration error."""
    name: str
    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    position: tuple[float, float, float]
    # Rotation of the REP 103 optical frame (x right, y down, z forward) in the world frame.
    rotation: tuple[tuple[float, ...], ...]
    depth_format: str = '32FC1'
    rate: float = 15.0
    depth_noise: DepthNoiseSpec = field(default_factory=DepthNoiseSpec)
    # Extrinsic calibration error of the pose the cell *publishes* (a real calibration is
    # never perfect): translation in m, rotation in rad, drawn once from the spec seed.
    calibration_error_translation: float = 0.0
    calibration_error_rotation: float = 0.0

    @property
    def rotation_matrix(self) -> np.ndarray:
        """The camera's 3x3 world rotation as a numpy array."""
        return np.array(self.rotation, dtype=float)


@dataclass(frozen=True)
class RobotSpec:
    """The cell's robot: URDF source, actuator gains, dynamics truth and initial joint positions."""
    urdf: str = 'default'                 # 'default', a path (relative to the spec file) or
    #                                       'example-robot-data:<robot>[+pusher]' (core/tools.py)
    kp: tuple[float, ...] | float = 800.0  # N m/rad, actuator servo stiffness
    kv: tuple[float, ...] | float = 40.0   # N m s/rad, actuator servo damping
    joint_damping: tuple[float, ...] | float = 0.5
    joint_frictionloss: tuple[float, ...] | float = 0.05
    armature: tuple[float, ...] | float = 0.02
    gravity_compensation: float = 1.0      # fraction of gravity the servo cancels
    command_latency: float = 0.008        # s, setpoint reaches the actuators this late
    joint_state_noise_std: float = 0.0002  # rad, on published positions
    initial_positions: tuple[float, ...] | None = None

    def per_joint(self, name: str, n: int) -> np.ndarray:
        """Value of a scalar-or-list field broadcast to ``n`` joints."""
        value = getattr(self, name)
        arr = np.full(n, float(value)) if np.isscalar(value) else np.asarray(value, float)
        if arr.shape != (n,):
            raise CellSpecError(f'robot.{name}: has {arr.size} values, the robot has {n} joints')
        return arr


@dataclass(frozen=True)
class TableSpec:
    """The table: top-surface height, size and centre in the world frame (m) and its friction."""
    height: float = 0.0                    # m, z of the top surface in the world frame
    size: tuple[float, float, float] = (0.8, 1.0, 0.04)  # x, y extents and thickness, m
    center: tuple[float, float] = (0.6, 0.0)             # x, y of the top's centre, m
    friction: tuple[float, float, float] = (0.8, 0.005, 0.0001)


@dataclass(frozen=True)
class ObjectSpec:
    """One object on the table: shape, size and pose (m, rad) and its physical truth (mass,
    friction, ...)."""
    id: str
    shape: str
    size: tuple[float, ...]                # box: x, y, z extents; cylinder: diameter, height
    xyz: tuple[float, float, float]        # centre of the shape in the world frame, m
    yaw: float                             # rad about world z
    mass: float
    com_offset: tuple[float, float, float] = (0.0, 0.0, 0.0)
    friction: tuple[float, float, float] = (0.6, 0.005, 0.0001)
    edge_radius: float = 0.0
    rgba: tuple[float, float, float, float] = (0.8, 0.3, 0.2, 1.0)

    @property
    def half_height(self) -> float:
        """Half the object's height (m): box z extent or cylinder height, over two."""
        return (self.size[2] if self.shape == 'box' else self.size[1]) / 2.0

    @property
    def extents(self) -> tuple[float, float, float]:
        """Full extents along the object axes (cylinder: diameter, diameter, height)."""
        if self.shape == 'box':
            return tuple(self.size)
        return (self.size[0], self.size[0], self.size[1])


@dataclass(frozen=True)
class ContactSpec:
    """MuJoCo contact and solver settings of the cell (timestep s, integrator, cone, solref,
    solimp)."""
    timestep: float = 0.001
    integrator: str = 'implicitfast'
    cone: str = 'elliptic'
    solref: tuple[float, float] = (0.004, 1.0)
    solimp: tuple[float, float, float, float, float] = (0.95, 0.99, 0.001, 0.5, 2.0)
    impratio: float = 1.0
    iterations: int = 100


@dataclass(frozen=True)
class DrakeSpec:
    """What only the Drake engine has (read when ``engine: drake``; see docs/cell_spec.md).

    Objects are compliant-hydroelastic (the table rigid-hydroelastic, the robot point
    contact); ``point`` makes every contact point contact. Static friction is
    ``static_friction_ratio`` times each pair's dynamic friction (the spec's ``friction[0]``).
    """
    contact_model: str = 'hydroelastic_with_fallback'
    hydroelastic_modulus: float = 5.0e6        # Pa, objects' compliant layer
    hunt_crossley_dissipation: float = 5.0     # s/m, every geometry
    static_friction_ratio: float = 1.3         # static / dynamic, >= 1
    point_stiffness: float = 2.0e5             # N/m, point contact (robot, fallback)
    resolution_hint: float = 0.01              # m, compliant meshes' edge length


@dataclass(frozen=True)
class CellSpec:
    """A whole emulated cell: robot, table, objects, contact settings and cameras (the hidden
    truth)."""
    name: str
    robot: RobotSpec
    table: TableSpec
    objects: tuple[ObjectSpec, ...]
    contact: ContactSpec
    cameras: tuple[CameraSpec, ...]
    seed: int = 0
    engine: str = 'mujoco'                 # hidden truth: only core.world.make_world reads it
    drake: DrakeSpec = field(default_factory=DrakeSpec)
    source_path: str | None = None         # where the YAML came from, for relative paths
    hidden_truth_note: str = ''

    def object(self, object_id: str) -> ObjectSpec:
        """The object with id ``object_id``; KeyError when the cell has none."""
        for obj in self.objects:
            if obj.id == object_id:
                return obj
        raise KeyError(f'no object {object_id!r} in cell {self.name!r}')

    def camera(self, name: str) -> CameraSpec:
        """The camera named ``name``; KeyError when the cell has none."""
        for cam in self.cameras:
            if cam.name == name:
                return cam
        raise KeyError(f'no camera {name!r} in cell {self.name!r}')

    def urdf_path(self) -> str | None:
        """Absolute URDF path, or None for the package's default cell arm (``default``);
        ``gripper`` is that arm with a parallel-jaw gripper (urdf/cell_arm_gripper.urdf).

        ``example-robot-data:<robot>[+pusher]`` names a robot of that package, with the
        default arm's pusher when ``+pusher`` (a generated file: core.tools.resolve_robot_urdf).
        """
        if self.robot.urdf == 'default':
            return None
        if self.robot.urdf == 'gripper':
            from .robot_description import gripper_cell_urdf
            return str(gripper_cell_urdf())
        if self.robot.urdf.startswith('example-robot-data:'):
            from .tools import ToolError, resolve_robot_urdf
            try:
                return str(resolve_robot_urdf(self.robot.urdf))
            except ToolError as exc:
                raise CellSpecError(f'robot.urdf: {exc}') from None
        path = Path(os.path.expanduser(self.robot.urdf))
        if not path.is_absolute() and self.source_path:
            path = Path(self.source_path).parent / path
        return str(path)

    def hidden_truth(self, joint_names: list[str] | None = None) -> dict[str, float]:
        """The true physical parameters, named like PhysicalParameter.msg ("<kind>/<el>/<f>").

        For the evaluator only. Per-joint robot values need ``joint_names``.
        """
        truth: dict[str, float] = {
            'global/command_latency': self.robot.command_latency,
            'global/joint_state_noise_std': self.robot.joint_state_noise_std,
            'global/gravity_compensation': self.robot.gravity_compensation,
            'global/timestep': self.contact.timestep,
            'geom/table/friction': self.table.friction[0],
            'global/table_height': self.table.height,
        }
        for obj in self.objects:
            truth[f'body/{obj.id}/mass'] = obj.mass
            for axis, value in zip('xyz', obj.com_offset):
                truth[f'body/{obj.id}/com_offset_{axis}'] = value
            truth[f'geom/{obj.id}/friction'] = obj.friction[0]
            truth[f'geom/{obj.id}/torsional_friction'] = obj.friction[1]
            truth[f'geom/{obj.id}/edge_radius'] = obj.edge_radius
            if self.engine == 'drake':   # friction[0] is the dynamic value; static above it
                truth[f'geom/{obj.id}/static_friction'] = (obj.friction[0]
                                                          * self.drake.static_friction_ratio)
        if joint_names:
            n = len(joint_names)
            for fname, kind, key in (('joint_damping', 'joint', 'damping'),
                                     ('joint_frictionloss', 'joint', 'frictionloss'),
                                     ('armature', 'joint', 'armature'),
                                     ('kp', 'actuator', 'kp'), ('kv', 'actuator', 'kv')):
                for jn, v in zip(joint_names, self.robot.per_joint(fname, n)):
                    truth[f'{kind}/{jn}/{key}'] = float(v)
        return truth


# --------------------------------------------------------------------------- parsing helpers

def _fail(path: str, msg: str):
    raise CellSpecError(f'{path}: {msg}')


def _section(data: dict, key: str, path: str, required: bool = False) -> dict:
    value = data.get(key)
    if value is None:
        if required:
            _fail(path, 'is required')
        return {}
    if not isinstance(value, dict):
        _fail(path, f'must be a mapping, got {type(value).__name__}')
    return value


def _check_keys(data: dict, allowed: set[str], path: str):
    unknown = sorted(set(data) - allowed)
    if unknown:
        prefix = f'{path}.' if path else ''
        _fail(f'{prefix}{unknown[0]}', f'unknown field (known: {", ".join(sorted(allowed))})')


def _num(data: dict, key: str, path: str, default=None, *, gt=None, ge=None, le=None,
         lt=None, integer=False):
    value = data.get(key, default)
    if value is None:
        _fail(path, 'is required')
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(path, f'must be a number, got {value!r}')
    if integer and int(value) != value:
        _fail(path, f'must be an integer, got {value!r}')
    value = int(value) if integer else float(value)
    if not math.isfinite(value):
        _fail(path, 'must be finite')
    if gt is not None and not value > gt:
        _fail(path, f'must be > {gt}')
    if ge is not None and not value >= ge:
        _fail(path, f'must be >= {ge}')
    if lt is not None and not value < lt:
        _fail(path, f'must be < {lt}')
    if le is not None and not value <= le:
        _fail(path, f'must be <= {le}')
    return value


def _vec(data: dict, key: str, path: str, n: int | tuple[int, ...], default=None, *,
         ge=None, gt=None) -> tuple[float, ...]:
    value = data.get(key, default)
    if value is None:
        _fail(path, 'is required')
    sizes = (n,) if isinstance(n, int) else n
    if not isinstance(value, (list, tuple)) or len(value) not in sizes:
        want = ' or '.join(map(str, sizes))
        _fail(path, f'must be a list of {want} numbers, got {value!r}')
    out = []
    for i, v in enumerate(value):
        out.append(_num({'v': v}, 'v', f'{path}[{i}]', gt=gt, ge=ge))
    return tuple(out)


def _scalar_or_list(data: dict, key: str, path: str, default, *, ge=None, gt=None):
    value = data.get(key, default)
    if isinstance(value, (list, tuple)):
        return _vec(data, key, path, len(value), ge=ge, gt=gt) if value else _fail(
            path, 'must not be empty')
    return _num(data, key, path, default, ge=ge, gt=gt)


def _choice(data: dict, key: str, path: str, choices, default=None) -> str:
    value = data.get(key, default)
    if value not in choices:
        _fail(path, f'must be one of {list(choices)}, got {value!r}')
    return value


def _bool(data: dict, key: str, path: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        _fail(path, f'must be true or false, got {value!r}')
    return value


# --------------------------------------------------------------------------- sections

def look_at_rotation(eye, target, up=(0.0, 0.0, 1.0)) -> np.ndarray:
    """World rotation of an optical frame at ``eye`` looking at ``target`` (columns x,y,z).

    REP 103 optical convention: z forward, x right, y down (image rows grow downward).
    """
    eye, target, up = (np.asarray(v, float) for v in (eye, target, up))
    z = target - eye
    norm = np.linalg.norm(z)
    if norm < 1e-9:
        raise ValueError('look_at target coincides with the camera position')
    z /= norm
    x = np.cross(z, up)
    if np.linalg.norm(x) < 1e-6:
        raise ValueError('look_at direction is parallel to the up vector')
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    return np.column_stack([x, y, z])


def _depth_noise(data: dict, path: str) -> DepthNoiseSpec:
    d = DepthNoiseSpec()
    _check_keys(data, set(DepthNoiseSpec.__dataclass_fields__), path)
    spec = DepthNoiseSpec(
        enabled=_bool(data, 'enabled', f'{path}.enabled', d.enabled),
        baseline=_num(data, 'baseline', f'{path}.baseline', d.baseline, gt=0),
        focal_px=_num(data, 'focal_px', f'{path}.focal_px', d.focal_px, gt=0),
        subpixel_std=_num(data, 'subpixel_std', f'{path}.subpixel_std', d.subpixel_std, ge=0),
        edge_threshold=_num(data, 'edge_threshold', f'{path}.edge_threshold',
                            d.edge_threshold, gt=0),
        edge_hole_width=_num(data, 'edge_hole_width', f'{path}.edge_hole_width',
                             d.edge_hole_width, ge=0, integer=True),
        dropout=_num(data, 'dropout', f'{path}.dropout', d.dropout, ge=0, lt=1),
        min_depth=_num(data, 'min_depth', f'{path}.min_depth', d.min_depth, ge=0),
        max_depth=_num(data, 'max_depth', f'{path}.max_depth', d.max_depth, gt=0),
        quantization=_num(data, 'quantization', f'{path}.quantization', d.quantization, ge=0),
    )
    if spec.max_depth <= spec.min_depth:
        _fail(f'{path}.max_depth', 'must be > min_depth')
    return spec


def _camera(data: dict, path: str) -> CameraSpec:
    allowed = {'name', 'width', 'height', 'fx', 'fy', 'cx', 'cy', 'pose', 'depth_format',
               'rate', 'depth_noise', 'calibration_error'}
    _check_keys(data, allowed, path)
    name = data.get('name')
    if not isinstance(name, str) or not name.isidentifier():
        _fail(f'{path}.name', f'must be a name of letters, digits and _, got {name!r}')
    width = _num(data, 'width', f'{path}.width', gt=0, integer=True)
    height = _num(data, 'height', f'{path}.height', gt=0, integer=True)
    fx = _num(data, 'fx', f'{path}.fx', gt=0)
    fy = _num(data, 'fy', f'{path}.fy', gt=0)
    cx = _num(data, 'cx', f'{path}.cx', (width - 1) / 2.0, ge=0, le=width)
    cy = _num(data, 'cy', f'{path}.cy', (height - 1) / 2.0, ge=0, le=height)
    pose = _section(data, 'pose', f'{path}.pose', required=True)
    _check_keys(pose, {'xyz', 'look_at', 'quat_xyzw'}, f'{path}.pose')
    xyz = _vec(pose, 'xyz', f'{path}.pose.xyz', 3)
    if ('look_at' in pose) == ('quat_xyzw' in pose):
        _fail(f'{path}.pose', 'needs exactly one of look_at or quat_xyzw')
    if 'look_at' in pose:
        target = _vec(pose, 'look_at', f'{path}.pose.look_at', 3)
        try:
            rot = look_at_rotation(xyz, target)
        except ValueError as exc:
            _fail(f'{path}.pose.look_at', str(exc))
    else:
        quat = _vec(pose, 'quat_xyzw', f'{path}.pose.quat_xyzw', 4)
        if np.linalg.norm(quat) < 1e-9:
            _fail(f'{path}.pose.quat_xyzw', 'must not be zero')
        rot = quat_xyzw_to_matrix(quat)
    calib = _section(data, 'calibration_error', f'{path}.calibration_error')
    _check_keys(calib, {'translation', 'rotation'}, f'{path}.calibration_error')
    noise = _section(data, 'depth_noise', f'{path}.depth_noise')
    return CameraSpec(
        name=name, width=width, height=height, fx=fx, fy=fy, cx=cx, cy=cy,
        position=xyz, rotation=tuple(tuple(r) for r in rot.tolist()),
        depth_format=_choice(data, 'depth_format', f'{path}.depth_format', DEPTH_FORMATS,
                             '32FC1'),
        rate=_num(data, 'rate', f'{path}.rate', 15.0, gt=0, le=90),
        depth_noise=_depth_noise(noise, f'{path}.depth_noise'),
        calibration_error_translation=_num(calib, 'translation',
                                           f'{path}.calibration_error.translation', 0.0, ge=0),
        calibration_error_rotation=_num(calib, 'rotation',
                                        f'{path}.calibration_error.rotation', 0.0, ge=0),
    )


def _robot(data: dict, path: str) -> RobotSpec:
    d = RobotSpec()
    _check_keys(data, set(RobotSpec.__dataclass_fields__), path)
    urdf = data.get('urdf', 'default')
    if not isinstance(urdf, str) or not urdf:
        _fail(f'{path}.urdf', f"must be 'default', a file path or "
              f"'example-robot-data:<robot>[+pusher]', got {urdf!r}")
    if urdf.startswith('example-robot-data:'):
        from .tools import ToolError, parse_robot_name
        try:
            parse_robot_name(urdf)
        except ToolError as exc:
            _fail(f'{path}.urdf', str(exc))
    init = data.get('initial_positions')
    if init is not None:
        init = _vec(data, 'initial_positions', f'{path}.initial_positions', len(init) or 1)
    return RobotSpec(
        urdf=urdf,
        kp=_scalar_or_list(data, 'kp', f'{path}.kp', d.kp, gt=0),
        kv=_scalar_or_list(data, 'kv', f'{path}.kv', d.kv, ge=0),
        joint_damping=_scalar_or_list(data, 'joint_damping', f'{path}.joint_damping',
                                      d.joint_damping, ge=0),
        joint_frictionloss=_scalar_or_list(data, 'joint_frictionloss',
                                           f'{path}.joint_frictionloss',
                                           d.joint_frictionloss, ge=0),
        armature=_scalar_or_list(data, 'armature', f'{path}.armature', d.armature, ge=0),
        gravity_compensation=_num(data, 'gravity_compensation',
                                  f'{path}.gravity_compensation', d.gravity_compensation,
                                  ge=0, le=1),
        command_latency=_num(data, 'command_latency', f'{path}.command_latency',
                             d.command_latency, ge=0, le=1.0),
        joint_state_noise_std=_num(data, 'joint_state_noise_std',
                                   f'{path}.joint_state_noise_std',
                                   d.joint_state_noise_std, ge=0, le=0.1),
        initial_positions=init,
    )


def _table(data: dict, path: str) -> TableSpec:
    d = TableSpec()
    _check_keys(data, set(TableSpec.__dataclass_fields__), path)
    return TableSpec(
        height=_num(data, 'height', f'{path}.height', d.height, ge=-1.0, le=2.0),
        size=_vec(data, 'size', f'{path}.size', 3, d.size, gt=0),
        center=_vec(data, 'center', f'{path}.center', 2, d.center),
        friction=_friction(data, f'{path}.friction', d.friction),
    )


def _friction(data: dict, path: str, default) -> tuple[float, float, float]:
    value = data.get('friction', default)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value, default[1], default[2]]
    fr = _vec({'f': value}, 'f', path, 3, ge=0)
    if fr[0] <= 0:
        _fail(f'{path}[0]', 'sliding friction must be > 0')
    return fr


def _object(data: dict, path: str, table: TableSpec) -> ObjectSpec:
    allowed = {'id', 'shape', 'size', 'pose', 'mass', 'com_offset', 'friction',
               'edge_radius', 'rgba'}
    _check_keys(data, allowed, path)
    oid = data.get('id')
    if not isinstance(oid, str) or not oid.isidentifier():
        _fail(f'{path}.id', f'must be a name of letters, digits and _, got {oid!r}')
    shape = _choice(data, 'shape', f'{path}.shape', SHAPES)
    size = _vec(data, 'size', f'{path}.size', 3 if shape == 'box' else 2, gt=0)
    pose = _section(data, 'pose', f'{path}.pose', required=True)
    _check_keys(pose, {'xyz', 'yaw'}, f'{path}.pose')
    xyz = _vec(pose, 'xyz', f'{path}.pose.xyz', (2, 3))
    half_h = (size[2] if shape == 'box' else size[1]) / 2.0
    if len(xyz) == 2:   # resting on the table top
        xyz = (xyz[0], xyz[1], table.height + half_h)
    radius = _num(data, 'edge_radius', f'{path}.edge_radius', 0.0, ge=0)
    smallest = min(size) if shape == 'box' else min(size[0], size[1])
    if radius >= smallest / 2:
        _fail(f'{path}.edge_radius', f'must be < half the smallest dimension ({smallest / 2})')
    return ObjectSpec(
        id=oid, shape=shape, size=size, xyz=xyz,
        yaw=_num(pose, 'yaw', f'{path}.pose.yaw', 0.0),
        mass=_num(data, 'mass', f'{path}.mass', gt=0),
        com_offset=_vec(data, 'com_offset', f'{path}.com_offset', 3, (0.0, 0.0, 0.0)),
        friction=_friction(data, f'{path}.friction', ObjectSpec.__dataclass_fields__[
            'friction'].default),
        edge_radius=radius,
        rgba=_vec(data, 'rgba', f'{path}.rgba', 4, (0.8, 0.3, 0.2, 1.0), ge=0),
    )


def _contact(data: dict, path: str) -> ContactSpec:
    d = ContactSpec()
    _check_keys(data, set(ContactSpec.__dataclass_fields__), path)
    solref = _vec(data, 'solref', f'{path}.solref', 2, d.solref)
    if solref[0] <= 0:
        _fail(f'{path}.solref[0]', 'time constant must be > 0 (this spec uses the standard '
              'positive solref form)')
    solimp = _vec(data, 'solimp', f'{path}.solimp', 5, d.solimp)
    for i in (0, 1):
        if not 0 < solimp[i] < 1:
            _fail(f'{path}.solimp[{i}]', 'must be in (0, 1)')
    timestep = _num(data, 'timestep', f'{path}.timestep', d.timestep, gt=0, le=0.01)
    return ContactSpec(
        timestep=timestep,
        integrator=_choice(data, 'integrator', f'{path}.integrator', INTEGRATORS, d.integrator),
        cone=_choice(data, 'cone', f'{path}.cone', CONES, d.cone),
        solref=solref, solimp=solimp,
        impratio=_num(data, 'impratio', f'{path}.impratio', d.impratio, ge=1),
        iterations=_num(data, 'iterations', f'{path}.iterations', d.iterations, gt=0,
                        integer=True),
    )


def _drake(data: dict, path: str) -> DrakeSpec:
    d = DrakeSpec()
    _check_keys(data, set(DrakeSpec.__dataclass_fields__), path)
    return DrakeSpec(
        contact_model=_choice(data, 'contact_model', f'{path}.contact_model',
                              DRAKE_CONTACT_MODELS, d.contact_model),
        hydroelastic_modulus=_num(data, 'hydroelastic_modulus', f'{path}.hydroelastic_modulus',
                                  d.hydroelastic_modulus, ge=1e3, le=1e12),
        hunt_crossley_dissipation=_num(data, 'hunt_crossley_dissipation',
                                       f'{path}.hunt_crossley_dissipation',
                                       d.hunt_crossley_dissipation, ge=0, le=1e3),
        static_friction_ratio=_num(data, 'static_friction_ratio',
                                   f'{path}.static_friction_ratio', d.static_friction_ratio,
                                   ge=1.0, le=5.0),
        point_stiffness=_num(data, 'point_stiffness', f'{path}.point_stiffness',
                             d.point_stiffness, gt=0),
        resolution_hint=_num(data, 'resolution_hint', f'{path}.resolution_hint',
                             d.resolution_hint, gt=0, le=0.1),
    )


def load_cell_spec(source: str | os.PathLike | dict[str, Any]) -> CellSpec:
    """Parse and validate a cell spec from a YAML path or an already-loaded mapping."""
    source_path = None
    if isinstance(source, dict):
        data = source
    else:
        source_path = str(Path(source).resolve())
        try:
            with open(source, encoding='utf-8') as fh:
                data = yaml.safe_load(fh)
        except OSError as exc:
            raise CellSpecError(f'(file): cannot read {source}: {exc.strerror}') from None
        except UnicodeDecodeError:
            raise CellSpecError(f'(file): {source} is not a text (YAML) file') from None
        except yaml.YAMLError as exc:
            raise CellSpecError(f'(file): {source} is not valid YAML: {exc}') from None
    if not isinstance(data, dict):
        raise CellSpecError('(root): a cell spec must be a YAML mapping')
    _check_keys(data, {'name', 'seed', 'robot', 'table', 'objects', 'contact', 'cameras',
                       'hidden_truth', 'engine', 'drake'}, '')
    name = data.get('name', Path(source_path).stem if source_path else 'cell')
    if not isinstance(name, str) or not name:
        _fail('name', 'must be a non-empty string')
    seed = _num(data, 'seed', 'seed', 0, ge=0, integer=True)
    table = _table(_section(data, 'table', 'table'), 'table')
    raw_objects = data.get('objects', [])
    if not isinstance(raw_objects, list):
        _fail('objects', 'must be a list')
    objects = []
    for i, raw in enumerate(raw_objects):
        if not isinstance(raw, dict):
            _fail(f'objects[{i}]', 'must be a mapping')
        objects.append(_object(raw, f'objects[{i}]', table))
    ids = [o.id for o in objects]
    for i, oid in enumerate(ids):
        if oid in ids[:i]:
            _fail(f'objects[{i}].id', f'duplicate id {oid!r}')
    raw_cams = data.get('cameras', [])
    if not isinstance(raw_cams, list):
        _fail('cameras', 'must be a list')
    cameras = []
    for i, raw in enumerate(raw_cams):
        if not isinstance(raw, dict):
            _fail(f'cameras[{i}]', 'must be a mapping')
        cameras.append(_camera(raw, f'cameras[{i}]'))
    names = [c.name for c in cameras]
    for i, cname in enumerate(names):
        if cname in names[:i]:
            _fail(f'cameras[{i}].name', f'duplicate camera name {cname!r}')
    note = data.get('hidden_truth', '')
    if not isinstance(note, str):
        _fail('hidden_truth', 'must be a string (a note on who may read this file)')
    return CellSpec(
        name=name, seed=seed,
        robot=_robot(_section(data, 'robot', 'robot'), 'robot'),
        table=table, objects=tuple(objects),
        contact=_contact(_section(data, 'contact', 'contact'), 'contact'),
        cameras=tuple(cameras), source_path=source_path, hidden_truth_note=note,
        engine=_choice(data, 'engine', 'engine', ENGINES, 'mujoco'),
        drake=_drake(_section(data, 'drake', 'drake'), 'drake'),
    )


def default_cell_spec_path() -> str:
    """config/cells/default.yaml in the source tree or the installed share directory."""
    here = Path(__file__).resolve().parents[2] / 'config' / 'cells' / 'default.yaml'
    if here.exists():
        return str(here)
    try:
        from ament_index_python.packages import get_package_share_directory
        share = Path(get_package_share_directory('real2sim2real_ros'))
        return str(share / 'config' / 'cells' / 'default.yaml')
    except Exception:  # noqa: BLE001 - no ament index: fall back to the source path
        return str(here)
