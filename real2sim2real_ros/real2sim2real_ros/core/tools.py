"""Tools on any arm (ROS-free): the default cell arm's ball-ended pusher, added to a URDF.

The tasks (core/tasks) strike and push with a 0.10 m pusher ending in a 30 mm ball whose
lowest point is the ``tool_tip`` link (urdf/cell_arm.urdf). ``add_pusher`` puts the same tool on
another robot's flange, so that robot can run the tasks::

    text = add_pusher('ur5_robot.urdf')                   # on tool0 (REP 199 flange), along z
    path = ur5_with_pusher_urdf()                         # the UR5 of example-robot-data, cached
    path = resolve_robot_urdf('example-robot-data:ur5+pusher')   # what cell specs may name

``package://`` mesh URIs are kept (they resolve through core.mesh_conversion.find_package_dir
wherever the URDF text goes, e.g. on /robot_description); relative mesh paths become absolute.
"""
from __future__ import annotations

import os
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from .mesh_conversion import MeshError, default_mesh_cache_dir, find_package_dir

__all__ = [
    'NAMED_ROBOTS',
    'PUSHER_LENGTH',
    'ROBOT_NAME_PREFIX',
    'ToolError',
    'add_pusher',
    'cell_spec_with_robot',
    'robot_joint_defaults',
    'parse_robot_name',
    'resolve_robot_urdf',
    'robot_cache_dir',
    'ur5_with_pusher_urdf',
]

# The default cell arm's tool (urdf/cell_arm.urdf): a 16 mm shaft and a 30 mm ball; the tool
# tip (lowest point of the ball) is PUSHER_LENGTH along the flange's z.
PUSHER_LENGTH = 0.10
PUSHER_SHAFT_RADIUS = 0.008
PUSHER_BALL_RADIUS = 0.015
PUSHER_MASS = 0.2
TIP_LINK = 'tool_tip'

ROBOT_NAME_PREFIX = 'example-robot-data:'
# Short names -> URDF path inside example-robot-data's share directory.
NAMED_ROBOTS = {
    'ur5': 'robots/ur_description/urdf/ur5_robot.urdf',
    'panda': 'robots/panda_description/urdf/panda.urdf',      # 7 arm joints + its hand
    'xarm7': 'robots/xarm_description/urdf/xarm7.urdf',
    'z1': 'robots/z1_description/urdf/z1.urdf',
}
PUSHER_SUFFIX = '+pusher'


class ToolError(ValueError):
    """The tool cannot be added (unknown flange, name clash, bad URDF); the message says why."""


def robot_cache_dir() -> Path:
    """~/.cache/real2sim2real_ros/robots (beside the mesh cache; XDG_CACHE_HOME respected)."""
    return default_mesh_cache_dir().parent / 'robots'


def _rpy_z_to(axis) -> tuple[float, float, float]:
    """URDF rpy of a rotation taking +z onto ``axis`` (any unit vector)."""
    z = np.asarray(axis, float)
    if z.shape != (3,) or not np.all(np.isfinite(z)) or np.linalg.norm(z) < 1e-9:
        raise ToolError(f'tool axis must be 3 finite numbers, not all zero; got {axis!r}')
    z = z / np.linalg.norm(z)
    ref = np.array([1.0, 0.0, 0.0]) if abs(z[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    y = np.cross(z, ref)
    y /= np.linalg.norm(y)
    x = np.cross(y, z)
    r = np.column_stack([x, y, z])
    if abs(z[2]) > 1 - 1e-12:   # z or -z: no need for a twist about z
        r = np.diag([1.0, np.sign(z[2]), np.sign(z[2])])
    # R = Rz(yaw) Ry(pitch) Rx(roll)
    pitch = float(np.arcsin(-np.clip(r[2, 0], -1.0, 1.0)))
    if abs(np.cos(pitch)) > 1e-9:
        roll = float(np.arctan2(r[2, 1], r[2, 2]))
        yaw = float(np.arctan2(r[1, 0], r[0, 0]))
    else:
        roll, yaw = float(np.arctan2(-r[1, 2], r[1, 1])), 0.0
    return roll, pitch, yaw


def _fmt(values) -> str:
    return ' '.join(f'{float(v) + 0.0:.12g}' for v in values)   # + 0.0: no '-0'


def _leaf_tip(root: ET.Element) -> str:
    """The converter's default tip (core.robot_description): the leaf at the end of the
    longest chain from the root once a gripper's finger joints are cut off (the hand's TCP
    link on a Panda, not a finger)."""
    from .robot_description import RobotDescriptionError, _default_tip, _parse_urdf
    try:
        return _default_tip(_parse_urdf(ET.tostring(root, encoding='unicode'), 'URDF', False))
    except RobotDescriptionError as exc:
        raise ToolError(str(exc)) from None


def add_pusher(urdf: str | os.PathLike, flange: str | None = None, axis=(0.0, 0.0, 1.0), *,
               base_dir: str | os.PathLike | None = None, length: float = PUSHER_LENGTH,
               link_prefix: str = 'pusher') -> str:
    """URDF text of ``urdf`` (path or XML text) with the cell arm's pusher on ``flange``.

    flange: the link the tool is bolted to; default ``tool0`` (the REP 199 flange frame, z out
    of the flange) when the robot has one, else the robot's tip link (end of the longest
    chain without gripper fingers: a Panda's ``panda_hand_tcp``, so the pusher sits between
    its fingers, which stay on the robot and are held). axis: the tool's direction in the
    flange frame (default its z). The tool is a new link ``<link_prefix>`` (shaft, ball,
    0.2 kg) and the ``tool_tip`` link at the ball's lowest point, ``length`` (0.10 m) along
    ``axis``: the naming of urdf/cell_arm.urdf, so the converter's default tip link is
    ``tool_tip``. Relative mesh paths are made absolute
    (against the file's directory or ``base_dir``); ``package://`` URIs are kept.
    """
    if isinstance(urdf, str) and urdf.lstrip().startswith('<'):
        text, src_dir = urdf, (Path(base_dir) if base_dir else None)
    else:
        path = Path(urdf).expanduser()
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ToolError(f"cannot read URDF '{path}': {exc}") from None
        src_dir = Path(base_dir) if base_dir else path.resolve().parent
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ToolError(f'malformed URDF XML: {exc}') from None
    if root.tag != 'robot':
        raise ToolError(f'root element is <{root.tag}>, expected <robot>')
    if not (0 < float(length) < 1.0) or length <= PUSHER_BALL_RADIUS:
        raise ToolError(f'pusher length {length} m must be in ({PUSHER_BALL_RADIUS}, 1)')
    links = {ln.get('name') for ln in root.findall('link')}
    joints = {j.get('name') for j in root.findall('joint')}
    if flange is None:
        flange = 'tool0' if 'tool0' in links else _leaf_tip(root)
    if flange not in links:
        raise ToolError(f"flange link '{flange}' is not a link of the URDF; links: "
                        f'{sorted(n for n in links if n)}')
    new_links = (link_prefix, TIP_LINK)
    new_joints = (f'{flange}-{link_prefix}_fixed_joint', f'{link_prefix}-{TIP_LINK}_fixed_joint')
    clash = sorted(set(new_links) & links) + sorted(set(new_joints) & joints)
    if clash:
        raise ToolError(f'the URDF already has {clash} (a tool is attached already?)')
    for mesh in root.iter('mesh'):
        uri = mesh.get('filename', '')
        if uri and '://' not in uri and not Path(uri).expanduser().is_absolute():
            if src_dir is None:
                raise ToolError(f"relative mesh path '{uri}': pass base_dir= with URDF text")
            mesh.set('filename', str((src_dir / uri).resolve()))
    ball_z = length - PUSHER_BALL_RADIUS
    shaft = ball_z          # the shaft runs from the flange to the ball's centre
    ixx = PUSHER_MASS * (3 * PUSHER_SHAFT_RADIUS ** 2 + length ** 2) / 12
    izz = PUSHER_MASS * PUSHER_SHAFT_RADIUS ** 2 / 2
    geoms = ''.join(
        f'<{kind}><origin xyz="0 0 {shaft / 2:.6g}" rpy="0 0 0"/><geometry><cylinder '
        f'radius="{PUSHER_SHAFT_RADIUS}" length="{shaft:.6g}"/></geometry></{kind}>'
        f'<{kind}><origin xyz="0 0 {ball_z:.6g}" rpy="0 0 0"/><geometry><sphere '
        f'radius="{PUSHER_BALL_RADIUS}"/></geometry></{kind}>'
        for kind in ('visual', 'collision'))
    tool = ET.fromstring(
        f'<robot>'
        f'<joint name="{new_joints[0]}" type="fixed"><parent link="{flange}"/>'
        f'<child link="{link_prefix}"/><origin xyz="0 0 0" rpy="{_fmt(_rpy_z_to(axis))}"/>'
        f'</joint>'
        f'<link name="{link_prefix}"><inertial><origin xyz="0 0 {length / 2:.6g}" rpy="0 0 0"/>'
        f'<mass value="{PUSHER_MASS}"/><inertia ixx="{ixx:.6g}" ixy="0" ixz="0" '
        f'iyy="{ixx:.6g}" iyz="0" izz="{izz:.6g}"/></inertial>{geoms}</link>'
        f'<joint name="{new_joints[1]}" type="fixed"><parent link="{link_prefix}"/>'
        f'<child link="{TIP_LINK}"/><origin xyz="0 0 {length:.6g}" rpy="0 0 0"/></joint>'
        f'<link name="{TIP_LINK}"/>'
        f'</robot>')
    if len(root):
        root[-1].tail = '\n  '
    root.append(ET.Comment(
        f' Added by real2sim2real_ros.core.tools.add_pusher: the cell arm\'s pusher on '
        f'{flange} ({length} m, {2 * PUSHER_SHAFT_RADIUS * 1e3:.0f} mm shaft, '
        f'{2 * PUSHER_BALL_RADIUS * 1e3:.0f} mm ball); {TIP_LINK} = lowest point of the ball. '))
    root[-1].tail = '\n  '
    for elem in tool:
        ET.indent(elem, space='  ', level=1)
        elem.tail = '\n  '
        root.append(elem)
    root[-1].tail = '\n'
    return '<?xml version="1.0"?>\n' + ET.tostring(root, encoding='unicode') + '\n'


def _write_if_changed(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file() and path.read_text() == text:
        return path
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix='.' + path.name, suffix='.tmp')
    try:
        with os.fdopen(fd, 'w') as fh:
            fh.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def parse_robot_name(name: str) -> tuple[str, bool]:
    """``example-robot-data:<robot>[+pusher]`` -> (URDF path in the package, with pusher?)."""
    if not name.startswith(ROBOT_NAME_PREFIX):
        raise ToolError(f"robot name '{name}' must start with '{ROBOT_NAME_PREFIX}'")
    rest = name[len(ROBOT_NAME_PREFIX):]
    pusher = rest.endswith(PUSHER_SUFFIX)
    short = rest[:-len(PUSHER_SUFFIX)] if pusher else rest
    rel = NAMED_ROBOTS.get(short, short)
    if not rel.endswith('.urdf') or rel.startswith('/') or '..' in Path(rel).parts:
        raise ToolError(f"unknown robot '{short}' in '{name}': known {sorted(NAMED_ROBOTS)} "
                        f'or a .urdf path inside example-robot-data')
    return rel, pusher


def resolve_robot_urdf(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The URDF file of a named robot: ``example-robot-data:<robot>[+pusher]``.

    <robot> is a short name (``NAMED_ROBOTS``: ``ur5``) or a path below example-robot-data's
    share directory (``robots/ur_description/urdf/ur3_robot.urdf``). ``+pusher`` adds the
    cell arm's pusher on the flange (``add_pusher``) and returns a generated file in
    ``cache_dir`` (default ``robot_cache_dir()``), rewritten only when its content changes.
    """
    rel, pusher = parse_robot_name(name)
    try:
        src = find_package_dir('example-robot-data') / rel
    except MeshError as exc:
        raise ToolError(f"'{name}' needs the example-robot-data package: {exc}") from None
    if not src.is_file():
        raise ToolError(f"'{name}': {src} does not exist")
    if not pusher:
        return src
    stem = Path(rel).stem.removesuffix('_robot')
    out = Path(cache_dir) if cache_dir else robot_cache_dir()
    return _write_if_changed(out / f'{stem}_with_pusher.urdf', add_pusher(src))


def ur5_with_pusher_urdf(cache_dir: str | os.PathLike | None = None) -> Path:
    """example-robot-data's UR5 with the cell arm's pusher on tool0 (a generated, cached file)."""
    return resolve_robot_urdf(ROBOT_NAME_PREFIX + 'ur5' + PUSHER_SUFFIX, cache_dir)


PER_JOINT_FIELDS = ('kp', 'kv', 'joint_damping', 'joint_frictionloss', 'armature')


def robot_joint_defaults(robot) -> dict[str, tuple[float, ...]]:
    """Per-arm-joint values of a cell spec's robot section from ``robot``'s own description:
    the servo gains its description derives (kp from the effort limits, kv critically damped
    at the reference inertia; core.robot_description.ActuatorGains) and the joint physics the
    shipped identification config takes as priors for it (its URDF's <dynamics>, or values
    scaled with each joint's effort limit)."""
    from .evaluation.identification import identification_config_path
    from .sysid.config import load_identification_config
    conf = load_identification_config(identification_config_path(), robot)
    priors = {s.name: s.prior for s in conf.specs}
    out = {'kp': tuple(round(float(v), 4) for v in robot.kp),
           'kv': tuple(round(float(v), 4) for v in robot.kv)}
    for fname, fld in (('joint_damping', 'damping'), ('joint_frictionloss', 'frictionloss'),
                       ('armature', 'armature')):
        out[fname] = tuple(float(priors[f'joint/{j}/{fld}']) for j in robot.joint_names)
    return out


def cell_spec_with_robot(spec, urdf: str | os.PathLike):
    """``spec`` (a core.cell_spec.CellSpec) with its robot replaced by ``urdf`` (a path or an
    ``example-robot-data:...`` name) starting at that robot's tool-down ready pose
    (core.tasks.kinematics.ready_pose). Per-joint values are rebuilt for the new robot, never
    carried from the old one: a scalar in the spec (kp: 800.0) stays, applying to every arm
    joint of the new robot; a per-joint list is replaced by the new robot's own defaults
    (``robot_joint_defaults``). What ``EmulatedWorld(spec, robot_urdf=urdf)`` lacks: it would
    start the new robot at the spec's initial_positions, written for the spec's robot."""
    import dataclasses

    from .robot_description import load_robot
    from .tasks.kinematics import ready_pose
    name = str(urdf)
    path = resolve_robot_urdf(name) if name.startswith(ROBOT_NAME_PREFIX) else Path(name)
    robot = load_robot(path)
    q0 = ready_pose(robot)
    defaults = None
    values = {}
    for fname in PER_JOINT_FIELDS:
        value = getattr(spec.robot, fname)
        if np.isscalar(value):
            values[fname] = value
            continue
        defaults = defaults or robot_joint_defaults(robot)
        values[fname] = defaults[fname]
    new = dataclasses.replace(spec.robot, urdf=str(Path(path).resolve()),
                              initial_positions=tuple(round(float(q), 6) for q in q0),
                              **values)
    return dataclasses.replace(spec, robot=new)


def main(argv=None) -> int:
    """``python -m real2sim2real_ros.core.tools [NAME]``: print the URDF path of a named robot
    (default example-robot-data:ur5+pusher), for ``r2s2r evaluate --robot``."""
    args = sys.argv[1:] if argv is None else list(argv)
    name = args[0] if args else ROBOT_NAME_PREFIX + 'ur5' + PUSHER_SUFFIX
    try:
        print(resolve_robot_urdf(name))
    except ToolError as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
