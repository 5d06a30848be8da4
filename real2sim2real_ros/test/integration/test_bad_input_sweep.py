"""Bad input, swept (issue 17 item 4): every service, action, CLI verb and config file of the
package gets inputs that are wrong, each case with the error code (or category) it must give
and a substring naming what is wrong. One clear error each; nothing crashes.

* Config files and CLI verbs run in-process (no graph): cell specs, task configs,
  identification configs, parameter sets, checkpoints, trajectory YAMLs, bags, launch files
  and launch arguments. Category: the exception class, or ``exit <n>`` for a CLI verb (then
  stderr is one line and holds no traceback).
* Services and actions run against ONE emulated bringup for the whole module (conftest's
  ``emulated_bringup``): category ``REJECTED`` (a service's success=false) or the action
  result's error-code name. The last test checks the graph afterwards: the same node
  processes (same pids) as before the sweep, every node, service and action up, and the
  cell still publishing /joint_states.

Also here: the documented bounds (docs/limits.md) equal the code's constants, and every
``MAX_*`` constant of the package is documented there.
"""
from __future__ import annotations

import importlib
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
PKG_SRC = REPO / 'real2sim2real_ros' / 'real2sim2real_ros'
BINARY = bytes(range(256)) * 4          # not UTF-8: a binary file handed over by mistake


@dataclass(frozen=True)
class Case:
    id: str
    run: Callable              # (ctx) -> (category, message)
    category: str              # expected error code name / exception class / 'exit N'
    names: tuple[str, ...]     # substrings the message must hold (what is wrong)


def _case(id_, category, names, run):
    return Case(id_, run, category, (names,) if isinstance(names, str) else tuple(names))


def _raises(fn) -> tuple[str, str]:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the category is the class: that is the test
        return type(exc).__name__, str(exc)
    return 'accepted', ''


def _check(case: Case, category: str, message: str):
    assert category == case.category, f'{case.id}: got {category}: {message}'
    for name in case.names:
        assert name.lower() in message.lower(), f'{case.id}: {name!r} not in {message!r}'


# ============================================================================ config files
@pytest.fixture
def files(tmp_path):
    """A writer of files under tmp_path: files(name, text or bytes) -> Path."""
    def write(name: str, content) -> Path:
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        (p.write_bytes if isinstance(content, bytes) else p.write_text)(content)
        return p
    return write


def _default_spec() -> dict:
    from real2sim2real_ros.core.cell_spec import default_cell_spec_path
    return yaml.safe_load(Path(default_cell_spec_path()).read_text())


def _spec_with(path: str, value):
    spec = _default_spec()
    keys = re.findall(r'[^.\[\]]+', path)
    node = spec
    for k in keys[:-1]:
        node = node[int(k)] if k.isdigit() else node[k]
    node[keys[-1]] = value
    return spec


def _cell(f, spec_or_text):
    from real2sim2real_ros.core.cell_spec import load_cell_spec
    if isinstance(spec_or_text, dict):
        return _raises(lambda: load_cell_spec(spec_or_text))
    return _raises(lambda: load_cell_spec(f('cell.yaml', spec_or_text)))


def _task(robot, name, config):
    from real2sim2real_ros.core.tasks import get_task
    return _raises(lambda: get_task(name, robot, config))


def _ident(f, content):
    from real2sim2real_ros.core.sysid.config import load_identification_config
    text = content if isinstance(content, bytes) else (
        content if isinstance(content, str) else yaml.safe_dump(content))
    return _raises(lambda: load_identification_config(f('identification.yaml', text)))


def _pset(path):
    from real2sim2real_ros.core.training_setup import load_parameter_set
    return _raises(lambda: load_parameter_set(path))


def _checkpoint(f, config=None, weights=None):
    """load_checkpoint of a folder with policy.json ``config`` and policy.pt ``weights``."""
    from real2sim2real_ros.core.policies.policy import load_checkpoint
    folder = f('ckpt/.keep', '').parent
    if config is not None:
        f('ckpt/policy.json', config if isinstance(config, (str, bytes)) else json.dumps(config))
    if weights is not None:
        f('ckpt/policy.pt', weights)
    return _raises(lambda: load_checkpoint(folder))


def _valid_checkpoint_config() -> dict:
    from real2sim2real_ros.core.policies.policy import CHECKPOINT_FORMAT
    return {'format': CHECKPOINT_FORMAT, 'architecture': {
        'obs_dim': 4, 'action_low': [0.0], 'action_high': [1.0], 'hidden': [8]}}


def _traj(f, content):
    from real2sim2real_ros.core.trajectory_files import load_trajectory_file
    path = content if isinstance(content, Path) else f('traj.yaml', content)
    return _raises(lambda: load_trajectory_file(path))


def _bag(path):
    from real2sim2real_ros.core.bag_io import BagReader
    return _raises(lambda: BagReader(path).close())


def _launch(f, body: str | None = None, args: dict | None = None, name='bringup.launch.xml'):
    from helpers.graph import launch_file

    from real2sim2real_ros.launch_runner import parse_launch_file
    path = launch_file(name) if body is None else f('x.launch.xml',
                                                    f'<launch>{body}</launch>')
    return _raises(lambda: parse_launch_file(path, args or {}))


def _truncated_mcap(f):
    from real2sim2real_ros.core.bag_io import BagWriter
    out = f('bags/.keep', '').parent / 'ok_bag'
    with BagWriter(out) as bag:
        bag.add_topic('/chatter', 'std_msgs/msg/String')
        for i in range(200):
            bag.write('/chatter', i * 10_000_000, {'data': f'message {i}'})
    mcap = next(out.glob('*.mcap'))
    data = mcap.read_bytes()
    mcap.write_bytes(data[:len(data) // 3])
    return out


def _validate_points(n: int):
    """The executor's validator (core.execution_safety) on an ``n``-point trajectory. (A live
    goal that big spends tens of seconds in rclpy's message conversion alone.)"""
    from real2sim2real_ros.core import execution_safety as es
    names = ('a', 'b')
    limits = es.JointLimits(names, np.full(2, -1.0), np.full(2, 1.0), np.full(2, 1.0))
    traj = es.Trajectory(names, np.arange(1, n + 1) * 0.01, np.zeros((n, 2)))
    return _raises(lambda: es.validate_trajectory(traj, limits, np.zeros(2)))


JOINTS = ['shoulder_pan_joint', 'shoulder_lift_joint', 'elbow_joint', 'wrist_1_joint',
          'wrist_2_joint', 'wrist_3_joint']

CONFIG_CASES = [
    # ---- cell specs (core.cell_spec.load_cell_spec)
    _case('cell_negative_mass', 'CellSpecError', 'objects[1].mass',
          lambda c: _cell(c.f, _spec_with('objects.1.mass', -0.2))),
    _case('cell_unknown_key', 'CellSpecError', 'colour',
          lambda c: _cell(c.f, dict(_default_spec(), colour='red'))),
    _case('cell_malformed_yaml', 'CellSpecError', 'not valid YAML',
          lambda c: _cell(c.f, 'robot: {kp: [1, 2\n')),
    _case('cell_binary_file', 'CellSpecError', ('cell.yaml', 'not a text'),
          lambda c: _cell(c.f, BINARY)),
    _case('cell_missing_file', 'CellSpecError', 'no_such_cell.yaml',
          lambda c: _raises(lambda: __import__(
              'real2sim2real_ros.core.cell_spec', fromlist=['x']).load_cell_spec(
              c.tmp / 'no_such_cell.yaml'))),
    _case('cell_camera_nan_fov', 'CellSpecError', 'cameras[0]',
          lambda c: _cell(c.f, _spec_with('cameras.0.fovy', float('nan')))),
    _case('cell_negative_friction', 'CellSpecError', 'objects[0].friction',
          lambda c: _cell(c.f, _spec_with('objects.0.friction', -1.0))),
    _case('cell_duplicate_object', 'CellSpecError', 'duplicate id',
          lambda c: _cell(c.f, dict(_default_spec(), objects=[_default_spec()['objects'][0]] * 2))),
    _case('cell_unknown_engine', 'CellSpecError', 'engine',
          lambda c: _cell(c.f, dict(_default_spec(), engine='bullet'))),
    # ---- task configs (core.tasks.get_task)
    _case('task_unknown_name', 'TaskError', 'no_such_task',
          lambda c: _task(c.robot, 'no_such_task', None)),
    _case('task_unknown_config_key', 'TaskError', 'no_such_key',
          lambda c: _task(c.robot, 'slide_to_target', {'no_such_key': 1})),
    # ---- identification configs (core.sysid.config.load_identification_config)
    _case('ident_bounds_exclude_prior', 'InvalidBoundsError', 'joint/elbow_joint/damping',
          lambda c: _ident(c.f, {'parameters': [{'name': 'joint/elbow_joint/damping',
                                                 'prior': 5.0, 'lower': 0.0, 'upper': 1.0}]})),
    _case('ident_unknown_field', 'ParameterError', 'colour',
          lambda c: _ident(c.f, {'parameters': [{'name': 'joint/elbow_joint/damping',
                                                 'prior': 0.5, 'lower': 0.0, 'upper': 1.0,
                                                 'colour': 'red'}]})),
    _case('ident_known_nan', 'ParameterError', ('joint/elbow_joint/damping', 'not finite'),
          lambda c: _ident(c.f, {'known': {'joint/elbow_joint/damping': float('nan')}})),
    _case('ident_malformed_yaml', 'ParameterError', 'identification.yaml',
          lambda c: _ident(c.f, 'parameters: [\n')),
    _case('ident_binary_file', 'ParameterError', 'identification.yaml',
          lambda c: _ident(c.f, BINARY)),
    _case('ident_bad_name', 'UnknownParameterError', 'nonsense',
          lambda c: _ident(c.f, {'known': {'nonsense': 1.0}})),
    _case('ident_extent_fraction_above_half', 'ParameterError',
          ('com_offset_x', 'extent_fraction', '(0, 0.5]'),
          lambda c: _ident(c.f, {'objects': {'parameters': [
              {'name': 'body/{id}/com_offset_x', 'prior': 0.0, 'extent_fraction': 0.8}]}})),
    _case('ident_extent_fraction_on_friction', 'ParameterError',
          ('friction', 'com_offset_x|y only'),
          lambda c: _ident(c.f, {'objects': {'parameters': [
              {'name': 'geom/{id}/friction', 'prior': 0.5, 'extent_fraction': 0.2}]}})),
    # ---- parameter sets (core.training_setup.load_parameter_set, the trainer's reader)
    _case('pset_binary_file', 'ParameterError', 'params.yaml',
          lambda c: _pset(c.f('params.yaml', BINARY))),
    _case('pset_malformed_yaml', 'ParameterError', 'params.yaml',
          lambda c: _pset(c.f('params.yaml', 'parameters: [\n'))),
    _case('pset_missing', 'ParameterError', ('none.yaml', 'does not exist'),
          lambda c: _pset(c.tmp / 'none.yaml')),
    _case('pset_folder_without_set', 'ParameterError', 'parameters.yaml',
          lambda c: _pset(c.f('identify_001/.keep', '').parent)),
    _case('pset_empty', 'ParameterError', 'holds no parameters',
          lambda c: _pset(c.f('params.yaml', 'parameters: []\n'))),
    # ---- checkpoints (core.policies.policy.load_checkpoint)
    _case('ckpt_missing_weights', 'CheckpointError', 'policy.pt is missing',
          lambda c: _checkpoint(c.f, config=_valid_checkpoint_config())),
    _case('ckpt_binary_config', 'CheckpointError', ('policy.json', 'not a text'),
          lambda c: _checkpoint(c.f, config=BINARY, weights=b'x')),
    _case('ckpt_config_not_object', 'CheckpointError', ('policy.json', 'JSON object'),
          lambda c: _checkpoint(c.f, config='[1, 2]', weights=b'x')),
    _case('ckpt_wrong_format', 'CheckpointError', 'format',
          lambda c: _checkpoint(c.f, config={'format': 'other'}, weights=b'x')),
    _case('ckpt_corrupt_weights', 'CheckpointError', 'policy.pt',
          lambda c: _checkpoint(c.f, config=_valid_checkpoint_config(), weights=BINARY)),
    # ---- trajectory YAMLs (trajectory_files.load_trajectory_file)
    _case('traj_malformed_yaml', 'ValueError', ('traj.yaml', 'malformed YAML', 'line'),
          lambda c: _traj(c.f, 'joint_names: [a\npoints: {')),
    _case('traj_binary', 'ValueError', 'not a text',
          lambda c: _traj(c.f, BINARY)),
    _case('traj_directory', 'ValueError', 'is a directory',
          lambda c: _traj(c.f, c.tmp)),
    _case('traj_missing_keys', 'ValueError', 'joint_names and points',
          lambda c: _traj(c.f, 'points: []\n')),
    _case('traj_wrong_length', 'ValueError', 'points[0].q has 2 values for 6 joints',
          lambda c: _traj(c.f, yaml.safe_dump({'joint_names': JOINTS,
                                               'points': [{'t': 1.0, 'q': [0, 0]}]}))),
    _case('traj_nan', 'ValueError', ('points[0]', 'NaN'),
          lambda c: _traj(c.f, 'joint_names: [a]\npoints: [{t: 1.0, q: [.nan]}]\n')),
    _case('traj_no_time', 'ValueError', 'points[0] needs t',
          lambda c: _traj(c.f, 'joint_names: [a]\npoints: [{q: [0.1]}]\n')),
    _case('traj_too_many_points_for_the_executor', 'TrajectoryViolation', '100000 allowed',
          lambda c: _validate_points(100_001)),
    # ---- bags (core.bag_io.BagReader)
    _case('bag_missing', 'BagError', ('no such bag', 'nothing_here'),
          lambda c: _bag(c.tmp / 'nothing_here')),
    _case('bag_random_bytes', 'BagError', 'junk.mcap',
          lambda c: _bag(c.f('junk.mcap', BINARY))),
    _case('bag_truncated', 'BagError', 'ok_bag',
          lambda c: _bag(_truncated_mcap(c.f))),
    # ---- launch files and arguments (launch_runner.parse_launch_file)
    _case('launch_unknown_choice', 'LaunchError', ('cell', 'moon'),
          lambda c: _launch(c.f, args={'cell': 'moon'})),
    _case('launch_missing_params_file', 'LaunchError', ('nope.yaml', 'does not exist'),
          lambda c: _launch(c.f, args={'params_file': str(c.tmp / 'nope.yaml')})),
    _case('launch_binary_params_file', 'LaunchError', ('p.yaml', 'not readable YAML'),
          lambda c: _launch(c.f, args={'params_file': str(c.f('p.yaml', BINARY))})),
    _case('launch_unknown_tag', 'LaunchError', 'frobnicate',
          lambda c: _launch(c.f, '<frobnicate/>')),
    _case('launch_malformed_xml', 'LaunchError', 'x.launch.xml',
          lambda c: _launch(c.f, '<node')),
]


@dataclass
class _ConfigCtx:
    f: Callable
    tmp: Path
    robot: object


@pytest.mark.parametrize('case', CONFIG_CASES, ids=[c.id for c in CONFIG_CASES])
def test_config_file_case(case, files, tmp_path, robot):
    category, message = case.run(_ConfigCtx(files, tmp_path, robot))
    _check(case, category, message)
    assert 'Traceback' not in message


# ============================================================================ CLI verbs
def _cli(capsys, argv) -> tuple[str, str]:
    from real2sim2real_ros.cli.main import main
    try:
        code = main(list(map(str, argv)))
    except SystemExit as exc:     # argparse: exit 2 with usage + one error line
        code = exc.code
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith('usage:')
             and not ln.startswith('  ')]
    assert 'Traceback' not in err, err
    assert len(lines) == 1, f'want one error line, got: {err!r}'
    return f'exit {code}', lines[0]


CLI_CASES = [
    _case('execute_malformed_yaml', 'exit 2', ('traj.yaml', 'malformed YAML'),
          lambda c: ['execute', c.f('traj.yaml', 'joint_names: [a\npoints: {')]),
    _case('execute_binary_file', 'exit 2', 'not a text',
          lambda c: ['execute', c.f('traj.yaml', BINARY)]),
    _case('execute_missing_file', 'exit 2', 'missing.yaml',
          lambda c: ['execute', c.tmp / 'missing.yaml']),
    _case('execute_wrong_length', 'exit 2', 'points[0].q has 1 values for 6 joints',
          lambda c: ['execute', c.f('t.yaml', yaml.safe_dump(
              {'joint_names': JOINTS, 'points': [{'t': 1.0, 'q': [0.0]}]}))]),
    _case('identify_negative_probes', 'exit 2', '--probes', lambda c: ['identify', '--probes', -1]),
    _case('train_negative_steps', 'exit 2', '--steps',
          lambda c: ['train', '--task', 'slide_to_target', '--steps', -5]),
    _case('train_no_task', 'exit 2', '--task', lambda c: ['train']),
    _case('evaluate_policy_zero_trials', 'exit 2', '--trials',
          lambda c: ['evaluate-policy', c.tmp, '--trials', 0]),
    _case('evaluate_drake_share_above_one', 'exit 2', ('--drake-share', '[0, 1]'),
          lambda c: ['evaluate', '--prior', 'wide', '--draw-cells', 2, '--drake-share', 1.5,
                     '--json', c.tmp / 'out.json']),
    _case('execute_policy_goal_length', 'exit 2', '--goal',
          lambda c: ['execute-policy', c.tmp, '--goal', 1.0]),
    _case('execute_policy_zero_duration', 'exit 2', '--max-duration',
          lambda c: ['execute-policy', c.tmp, '--max-duration', 0]),
    _case('record_demos_bad_set', 'exit 2', 'KEY=VALUE',
          lambda c: ['record-demos', '--task', 'slide_to_target', '--out', c.tmp,
                     '--set', 'novalue']),
    _case('record_demos_zero_episodes', 'exit 2', '--episodes',
          lambda c: ['record-demos', '--task', 'slide_to_target', '--out', c.tmp,
                     '--episodes', 0]),
    _case('unknown_verb', 'exit 2', 'frobnicate', lambda c: ['frobnicate']),
    _case('launch_unknown_choice', 'exit 2', 'moon',
          lambda c: ['launch', 'real2sim2real_ros', 'bringup.launch.xml', 'cell:=moon']),
    _case('launch_missing_file', 'exit 2', 'nope.launch.xml',
          lambda c: ['launch', 'real2sim2real_ros', 'nope.launch.xml']),
    _case('bag_info_missing', 'exit 2', 'nothing_here',
          lambda c: ['bag', 'info', c.tmp / 'nothing_here']),
    _case('bag_info_junk', 'exit 2', 'junk.mcap',
          lambda c: ['bag', 'info', c.f('junk.mcap', BINARY)]),
]


@pytest.mark.parametrize('case', CLI_CASES, ids=[c.id for c in CLI_CASES])
def test_cli_case(case, capsys, files, tmp_path, monkeypatch):
    monkeypatch.setenv('R2S2R_LAUNCH_RUNNER', '1')     # the runner, never ros2 launch
    argv = case.run(_ConfigCtx(files, tmp_path, None))
    category, message = _cli(capsys, argv)
    _check(case, category, message)


# ============================================================================ the live graph
@dataclass
class _Live:
    cmd: object
    tmp: Path
    joints: list[str]
    q0: np.ndarray
    objects: list[str]
    lower: np.ndarray
    upper: np.ndarray
    param: str                 # a valid twin parameter name (a joint damping)

    def f(self, name: str, content) -> Path:
        p = self.tmp / 'inputs' / name
        p.parent.mkdir(parents=True, exist_ok=True)
        (p.write_bytes if isinstance(content, bytes) else p.write_text)(content)
        return p


@pytest.fixture(scope='module')
def live(emulated_bringup):
    from helpers.graph import arm_or_fail

    from real2sim2real_ros.core.robot_description import default_cell_urdf, load_robot
    graph, cmd, tmp = emulated_bringup
    status = cmd.graph_status()
    assert status.complete, status
    pids = dict(graph.pids())
    js = cmd.joint_state(timeout=20)
    robot = load_robot(default_cell_urdf())
    order = [list(robot.joint_names).index(n) for n in js.name]
    # sim_server lists its parameters once it has the robot description: on a fresh clone's
    # first bringup that can come well after the graph is up.
    deadline = time.monotonic() + 60.0
    while True:
        params = cmd.get_physical_parameters().parameters
        damping = [p.name for p in params if p.name.endswith('/damping')]
        if damping or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert damping, [p.name for p in params]
    arm_or_fail(cmd, wait=30)
    from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
    objects = [o.id for o in load_cell_spec(default_cell_spec_path()).objects]
    ctx = _Live(cmd, tmp, list(js.name), np.array(js.position), objects,
                np.asarray(robot.lower)[order], np.asarray(robot.upper)[order], damping[0])
    yield graph, ctx, pids


def _srv(resp) -> tuple[str, str]:
    return ('OK' if resp.success else 'REJECTED'), resp.message


def _act(result) -> tuple[str, str]:
    from real2sim2real_ros.ros.goal_client import code_name
    return code_name(type(result), result.error_code), result.error_msg


def _guarded(c: _Live, fn, timeout_note='') -> tuple[str, str]:
    """Run an action; a goal that is not refused in time is cancelled (the case fails)."""
    from real2sim2real_ros.ros.commander import CommanderError
    try:
        return _act(fn())
    except CommanderError as exc:
        try:
            c.cmd.cancel_current_goal()
        except CommanderError:
            pass
        return 'no answer', f'{exc} {timeout_note}'


def _pose(xyz, quat=(1.0, 0.0, 0.0, 0.0)):
    from geometry_msgs.msg import Point, Pose, Quaternion
    return Pose(position=Point(x=float(xyz[0]), y=float(xyz[1]), z=float(xyz[2])),
                orientation=Quaternion(w=float(quat[0]), x=float(quat[1]), y=float(quat[2]),
                                       z=float(quat[3])))


def _reset_objects(c: _Live, ids, poses):
    from real2sim2real_msgs.srv import ResetObjects
    return _srv(c.cmd.call(ResetObjects, 'emulated_cell/reset_objects',
                           ResetObjects.Request(object_ids=list(ids), poses=list(poses)),
                           resend=True))


def _set_params_all_or_nothing(c: _Live, values: dict) -> tuple[str, str]:
    before = {p.name: p.value for p in c.cmd.get_physical_parameters().parameters}
    out = _srv(c.cmd.set_physical_parameters(values))
    after = {p.name: p.value for p in c.cmd.get_physical_parameters().parameters}
    assert after == before, 'a rejected batch changed the twin'
    return out


def _load_scene(c: _Live, path) -> tuple[str, str]:
    from real2sim2real_msgs.srv import LoadScene
    return _srv(c.cmd.call(LoadScene, 'sim_server/load_scene',
                           LoadScene.Request(mjcf_path=str(path)), timeout=30))


def _step(c: _Live, steps, paused=True):
    c.cmd.sim_pause(paused)
    try:
        return _srv(c.cmd.sim_step(steps))
    finally:
        c.cmd.sim_pause(False)


def _trajectory(c: _Live, points, names=None, velocities=None):
    """ExecuteTrajectory of (t, q) points (q relative to nothing: absolute)."""
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    from real2sim2real_msgs.action import ExecuteTrajectory
    from real2sim2real_ros.ros.ros_time import duration_msg
    traj = JointTrajectory(joint_names=list(names or c.joints))
    for k, (t, q) in enumerate(points):
        pt = JointTrajectoryPoint(positions=[float(v) for v in q],
                                  time_from_start=duration_msg(t))
        if velocities is not None:
            pt.velocities = [float(v) for v in velocities[k]]
        traj.points.append(pt)
    goal = ExecuteTrajectory.Goal(trajectory=traj, record=False)
    return _guarded(c, lambda: c.cmd.run_action(
        ExecuteTrajectory, 'robot_executor/execute_trajectory', goal, timeout=90))


def _not_armed(c: _Live):
    from helpers.graph import arm_or_fail
    c.cmd.disarm()
    try:
        return _trajectory(c, [(1.0, c.q0)])
    finally:
        arm_or_fail(c.cmd, wait=30)


def _rollout(c: _Live, points=None, names=None, **kw):
    pts = points if points is not None else [(0.5, c.q0)]
    return _guarded(c, lambda: c.cmd.rollout(names or c.joints, pts, timeout=60, **kw))


def _capture(c: _Live, **goal):
    from real2sim2real_msgs.action import Capture
    return _guarded(c, lambda: c.cmd.run_action(Capture, 'camera_capture/capture',
                                                Capture.Goal(**goal), timeout=90))


def _reconstruct(c: _Live, manifest):
    from real2sim2real_msgs.action import Reconstruct
    goal = Reconstruct.Goal(capture_manifest=str(manifest), run_dir=str(c.tmp / 'recon'))
    return _guarded(c, lambda: c.cmd.run_action(
        Reconstruct, 'scene_reconstruction/reconstruct', goal, timeout=60))


def _identify(c: _Live, **kw):
    kw.setdefault('run_dir', str(c.tmp / 'ident'))
    return _guarded(c, lambda: c.cmd.identify(timeout=60, **kw))


def _train(c: _Live, task='slide_to_target', **kw):
    kw.setdefault('run_dir', str(c.tmp / 'train'))
    return _guarded(c, lambda: c.cmd.train(task, timeout=60, **kw))


def _evaluate(c: _Live, checkpoint, trials=0, task=''):
    from real2sim2real_msgs.action import Evaluate
    goal = Evaluate.Goal(checkpoint_path=str(checkpoint), task=task, trials=int(trials))
    return _guarded(c, lambda: c.cmd.run_action(Evaluate, 'policy_trainer/evaluate', goal,
                                                timeout=60))


def _policy(c: _Live, checkpoint, goal=(), task='', max_duration=5.0):
    return _guarded(c, lambda: c.cmd.execute_policy(str(checkpoint), goal, task=task,
                                                    max_duration=max_duration, record=False,
                                                    timeout=60))


def _scripted(c: _Live, name='scripted'):
    from real2sim2real_ros.core.policy_execution import write_scripted_checkpoint
    return write_scripted_checkpoint(c.tmp / 'inputs' / name, 'slide_to_target', {}, seed=0)


def _loop(c: _Live, **kw):
    kw.setdefault('run_dir', str(c.tmp / 'loop'))
    return _guarded(c, lambda: c.cmd.run_loop(timeout=60, **kw))


NAN, INF = float('nan'), float('inf')


def _q(c, delta):
    return c.q0 + np.asarray(delta, float)


ROS_CASES = [
    # ---- emulated_cell/reset_objects
    _case('reset_objects_unknown_id', 'REJECTED', 'no_such_object',
          lambda c: _reset_objects(c, ['no_such_object'], [])),
    _case('reset_objects_nan_position', 'REJECTED', ('poses[0]', 'position', 'NaN'),
          lambda c: _reset_objects(c, c.objects[:1], [_pose((NAN, 0.0, 0.8))])),
    _case('reset_objects_inf_orientation', 'REJECTED', ('poses[0]', 'orientation'),
          lambda c: _reset_objects(c, c.objects[:1], [_pose((0.5, 0.0, 0.8),
                                                             (INF, 0, 0, 0))])),
    _case('reset_objects_zero_quaternion', 'REJECTED', ('poses[0]', 'zero quaternion'),
          lambda c: _reset_objects(c, c.objects[:1], [_pose((0.5, 0.0, 0.8), (0, 0, 0, 0))])),
    _case('reset_objects_far_away', 'REJECTED', ('poses[0]', 'position', 'more than'),
          lambda c: _reset_objects(c, c.objects[:1], [_pose((1e9, 0.0, 0.8))])),
    _case('reset_objects_pose_count', 'REJECTED', '2 poses for 1 objects',
          lambda c: _reset_objects(c, c.objects[:1], [_pose((0.5, 0, 0.8))] * 2)),
    _case('reset_objects_second_bad_moves_none', 'REJECTED', 'poses[1]',
          lambda c: _reset_objects(c, c.objects[:2], [_pose((0.5, 0.0, 0.9)),
                                                      _pose((0.5, NAN, 0.9))])),
    _case('reset_objects_duplicate_ids', 'REJECTED', 'duplicates',
          lambda c: _reset_objects(c, c.objects[:1] * 2, [])),
    # ---- sim_server services
    _case('sim_reset_qpos_length', 'REJECTED', 'qpos has 2 values',
          lambda c: _srv(c.cmd.sim_reset(qpos=[0.0, 0.0]))),
    _case('sim_reset_qpos_nan', 'REJECTED', ('qpos', 'NaN', 'elbow_joint'),
          lambda c: _srv(c.cmd.sim_reset(qpos=[0, 0, NAN, 0, 0, 0]))),
    _case('sim_reset_qvel_inf', 'REJECTED', ('qvel', 'infinite'),
          lambda c: _srv(c.cmd.sim_reset(qvel=[INF, 0, 0, 0, 0, 0]))),
    _case('sim_reset_unknown_keyframe', 'REJECTED', 'no_such_key',
          lambda c: _srv(c.cmd.sim_reset(keyframe='no_such_key'))),
    _case('sim_step_too_many', 'REJECTED', ('steps 4000000000', '100000'),
          lambda c: _step(c, 4_000_000_000)),
    _case('sim_step_while_running', 'REJECTED', 'set_pause',
          lambda c: _srv(c.cmd.sim_step(1))),
    _case('set_params_unknown_name', 'REJECTED', 'joint/no_such_joint/damping',
          lambda c: _set_params_all_or_nothing(c, {'joint/no_such_joint/damping': 1.0})),
    _case('set_params_friction_1e9', 'REJECTED', ('frictionloss', 'bound'),
          lambda c: _set_params_all_or_nothing(c, {'joint/elbow_joint/frictionloss': 1e9})),
    _case('set_params_nan', 'REJECTED', 'not finite',
          lambda c: _set_params_all_or_nothing(c, {c.param: NAN})),
    _case('set_params_negative_damping', 'REJECTED', 'damping',
          lambda c: _set_params_all_or_nothing(c, {c.param: -1.0})),
    _case('set_params_batch_one_bad_changes_nothing', 'REJECTED', 'not finite',
          lambda c: _set_params_all_or_nothing(c, {c.param: 0.123,
                                                   'global/command_latency': NAN})),
    _case('get_params_unknown_name', 'REJECTED', 'joint/no_such_joint/damping',
          lambda c: _srv(c.cmd.get_physical_parameters(['joint/no_such_joint/damping']))),
    _case('load_scene_missing', 'REJECTED', ('nope.xml', 'does not exist'),
          lambda c: _load_scene(c, c.tmp / 'nope.xml')),
    _case('load_scene_directory', 'REJECTED', 'is a directory',
          lambda c: _load_scene(c, c.tmp)),
    _case('load_scene_malformed', 'REJECTED', 'cannot parse',
          lambda c: _load_scene(c, c.f('bad.xml', '<mujoco><worldbody><body></mujoco>'))),
    _case('load_scene_binary', 'REJECTED', 'cannot',
          lambda c: _load_scene(c, c.f('bin.xml', BINARY))),
    # ---- sim_server/rollout
    _case('rollout_missing_joint', 'INVALID_GOAL', 'missing',
          lambda c: _rollout(c, [(0.5, c.q0[:5])], names=c.joints[:5])),
    _case('rollout_qpos_length', 'INVALID_GOAL', 'initial_qpos',
          lambda c: _rollout(c, initial_qpos=[0.0])),
    _case('rollout_qpos_nan', 'INVALID_GOAL', 'finite',
          lambda c: _rollout(c, initial_qpos=[NAN] * 6)),
    _case('rollout_unknown_parameter', 'UNKNOWN_PARAMETER', 'joint/no_such_joint/damping',
          lambda c: _rollout(c, parameter_samples=[{'joint/no_such_joint/damping': 1.0}])),
    _case('rollout_parameter_nan', 'INVALID_GOAL', 'not finite',
          lambda c: _rollout(c, parameter_samples=[{c.param: NAN}])),
    _case('rollout_too_long', 'INVALID_GOAL', ('sim time', '600'),
          lambda c: _rollout(c, [(1e6, c.q0)])),
    _case('rollout_too_many_samples', 'INVALID_GOAL', ('parameter_samples', '10000'),
          lambda c: _rollout(c, parameter_samples=[{c.param: 0.5}] * 10_001)),
    _case('rollout_result_too_big', 'INVALID_GOAL', 'sample_period',
          lambda c: _rollout(c, [(500.0, c.q0)], parameter_samples=[{c.param: 0.5}] * 100)),
    _case('rollout_sample_period_nan', 'INVALID_GOAL', 'sample_period',
          lambda c: _rollout(c, sample_period=NAN)),
    # ---- robot_executor/execute_trajectory (armed)
    _case('trajectory_no_points', 'INVALID_TRAJECTORY', 'no points',
          lambda c: _trajectory(c, [])),
    _case('trajectory_unknown_joint', 'INVALID_TRAJECTORY', 'no_such_joint',
          lambda c: _trajectory(c, [(1.0, c.q0)], names=c.joints[:5] + ['no_such_joint'])),
    _case('trajectory_duplicate_joint', 'INVALID_TRAJECTORY', 'duplicate',
          lambda c: _trajectory(c, [(1.0, c.q0)], names=c.joints[:5] + c.joints[:1])),
    _case('trajectory_nan_position', 'INVALID_TRAJECTORY', 'finite',
          lambda c: _trajectory(c, [(1.0, _q(c, [NAN, 0, 0, 0, 0, 0]))])),
    _case('trajectory_beyond_limit', 'JOINT_LIMIT_VIOLATION', 'elbow_joint',
          lambda c: _trajectory(c, [(2.0, np.where(np.arange(6) == 2, c.upper + 0.5, c.q0))])),
    _case('trajectory_times_not_increasing', 'INVALID_TRAJECTORY', 'time',
          lambda c: _trajectory(c, [(1.0, c.q0), (0.5, c.q0)])),
    _case('trajectory_too_fast', 'VELOCITY_LIMIT_VIOLATION', ('shoulder_pan_joint', 'rad/s'),
          lambda c: _trajectory(c, [(0.05, _q(c, [0.5, 0, 0, 0, 0, 0]))])),
    _case('trajectory_too_long', 'INVALID_TRAJECTORY', '86400',
          lambda c: _trajectory(c, [(1e6, c.q0)])),
    _case('trajectory_velocity_length', 'INVALID_TRAJECTORY', 'velocities',
          lambda c: _trajectory(c, [(1.0, c.q0)], velocities=[[0.0]])),
    _case('trajectory_not_armed', 'NOT_ARMED', 'arm', _not_armed),
    # ---- robot_executor/execute_policy (armed)
    _case('policy_missing_checkpoint', 'INVALID_CHECKPOINT', 'no_such_ckpt',
          lambda c: _policy(c, c.tmp / 'no_such_ckpt')),
    _case('policy_binary_config', 'INVALID_CHECKPOINT', 'policy.json',
          lambda c: _policy(c, (c.f('badckpt/policy.json', BINARY),
                                c.f('badckpt/policy.pt', b'x'))[0].parent)),
    _case('policy_task_mismatch', 'INVALID_CHECKPOINT', 'task mismatch',
          lambda c: _policy(c, _scripted(c), task='push_to_pose')),
    _case('policy_goal_length', 'INVALID_CHECKPOINT', 'goal',
          lambda c: _policy(c, _scripted(c), goal=[0.1, 0.2, 0.3, 0.4, 0.5])),
    _case('policy_goal_nan', 'INVALID_CHECKPOINT', 'goal',
          lambda c: _policy(c, _scripted(c), goal=[NAN, 0.0])),
    # ---- camera_capture/capture
    _case('capture_too_many_views', 'INVALID_GOAL', ('num_views', '10000'),
          lambda c: _capture(c, num_views=4_000_000_000)),
    # ---- scene_reconstruction/reconstruct
    _case('reconstruct_missing_manifest', 'INVALID_CAPTURE', 'nope.json',
          lambda c: _reconstruct(c, c.tmp / 'nope.json')),
    _case('reconstruct_binary_manifest', 'INVALID_CAPTURE', ('manifest.json', 'not a text'),
          lambda c: _reconstruct(c, c.f('cap/manifest.json', BINARY))),
    _case('reconstruct_manifest_not_object', 'INVALID_CAPTURE',
          ('manifest.json', 'not a capture manifest'),
          lambda c: _reconstruct(c, c.f('cap2/manifest.json', '[1, 2, 3]'))),
    # ---- system_identification/identify
    _case('identify_unknown_parameter', 'UNKNOWN_PARAMETER', 'joint/no_such_joint/damping',
          lambda c: _identify(c, parameter_names=['joint/no_such_joint/damping'])),
    _case('identify_too_many_probes', 'INVALID_BOUNDS', ('num_probes', '50'),
          lambda c: _identify(c, num_probes=4_000_000_000)),
    _case('identify_missing_bag', 'MISSING_TOPICS', 'no_such_bag',
          lambda c: _identify(c, bag_paths=[str(c.tmp / 'no_such_bag')])),
    _case('identify_junk_bag', 'MISSING_TOPICS', 'junk.mcap',
          lambda c: _identify(c, bag_paths=[str(c.f('junk.mcap', BINARY))])),
    # ---- policy_trainer/train and evaluate
    _case('train_unknown_task', 'UNKNOWN_TASK', 'no_such_task',
          lambda c: _train(c, 'no_such_task')),
    _case('train_missing_parameters', 'INVALID_PARAMETERS', ('none.yaml', 'does not exist'),
          lambda c: _train(c, parameters_path=str(c.tmp / 'none.yaml'))),
    _case('train_binary_parameters', 'INVALID_PARAMETERS', 'params.bin',
          lambda c: _train(c, parameters_path=str(c.f('params.bin', BINARY)))),
    _case('train_friction_1e9', 'INVALID_PARAMETERS', ('frictionloss', 'bound'),
          lambda c: _train(c, parameters_path=str(c.f('p.yaml', yaml.safe_dump({'parameters': [
              {'name': 'joint/elbow_joint/frictionloss', 'value': 1e9, 'lower_95': 1e9,
               'upper_95': 1e9, 'prior': 0.5}]}))))),
    _case('train_missing_demo_bag', 'INVALID_DEMOS', 'no_such_demo',
          lambda c: _train(c, demo_bags=[str(c.tmp / 'no_such_demo')])),
    _case('train_total_steps_wrapped', 'TRAINING_FAILED', ('total_steps', '4294967295'),
          lambda c: _guarded(c, lambda: c.cmd.run_action(
              __import__('real2sim2real_msgs.action', fromlist=['Train']).Train,
              'policy_trainer/train', __import__('real2sim2real_msgs.action', fromlist=[
                  'Train']).Train.Goal(task='slide_to_target', total_steps=2**32 - 1),
              timeout=60))),
    _case('evaluate_missing_checkpoint', 'INVALID_CHECKPOINT', 'no_such_ckpt',
          lambda c: _evaluate(c, c.tmp / 'no_such_ckpt')),
    _case('evaluate_too_many_trials', 'INVALID_GOAL', ('trials', '100000'),
          lambda c: _evaluate(c, c.tmp / 'no_such_ckpt', trials=2**32 - 1)),
    _case('evaluate_binary_config', 'INVALID_CHECKPOINT', 'policy.json',
          lambda c: _evaluate(c, (c.f('evalckpt/policy.json', BINARY),
                                  c.f('evalckpt/policy.pt', b'x'))[0].parent)),
    # ---- loop_coordinator/run_loop
    _case('loop_unknown_task', 'INVALID_GOAL', 'no_such_task',
          lambda c: _loop(c, task='no_such_task')),
    _case('loop_unknown_stage', 'INVALID_GOAL', 'no_such_stage',
          lambda c: _loop(c, skip_stages=['no_such_stage'])),
    _case('loop_skip_without_artifact', 'INVALID_GOAL', 'capture',
          lambda c: _loop(c, skip_stages=['capture'], run_dir=str(c.tmp / 'empty_run'))),
]


@pytest.mark.integration
@pytest.mark.parametrize('case', ROS_CASES, ids=[c.id for c in ROS_CASES])
def test_graph_case(case, live):
    _, ctx, _ = live
    start = time.monotonic()
    category, message = case.run(ctx)
    print(f'{case.id}: {category}: {message} ({time.monotonic() - start:.2f} s)')
    _check(case, category, message)


@pytest.mark.integration
def test_graph_is_unchanged_after_the_sweep(live):
    """Runs last (file order): the same node processes as before the sweep, the whole graph up,
    the cell still publishing joint states (a NaN reset once silenced them)."""
    graph, ctx, pids = live
    assert graph.alive() and dict(graph.pids()) == pids, (pids, graph.pids(), graph.reason)
    assert ctx.cmd.graph_status().complete
    from sensor_msgs.msg import JointState

    from real2sim2real_ros.ros.topic_listener import TopicListener
    listener = TopicListener(JointState, '/joint_states')
    try:
        assert listener.wait_for(20, timeout=15), 'the cell publishes /joint_states'
    finally:
        listener.close()
    assert all(math.isfinite(v) for v in ctx.cmd.joint_state().position)


def test_the_sweep_has_at_least_60_cases():
    assert len(CONFIG_CASES) + len(CLI_CASES) + len(ROS_CASES) >= 60


# ============================================================================ documented bounds
LIMITS_DOC = REPO / 'docs' / 'limits.md'
_ROW = re.compile(r'^\|\s*`(?P<ref>[\w.]+)`\s*\|\s*(?P<value>[^|]+?)\s*\|')


def documented_limits() -> dict[str, str]:
    """``module.CONSTANT`` (relative to real2sim2real_ros) -> the value as documented."""
    out = {}
    for line in LIMITS_DOC.read_text().splitlines():
        m = _ROW.match(line)
        if m and '.' in m['ref']:
            out[m['ref']] = m['value']
    return out


def _resolve(ref: str):
    module, _, name = ref.rpartition('.')
    return getattr(importlib.import_module(f'real2sim2real_ros.{module}'), name)


def _parse_value(text: str):
    """A documented value: a number (``100_000``, ``1.0e3``) or ``{key: number, ...}``."""
    text = re.sub(r'(?<=\d)_(?=\d)', '', text.strip().strip('`'))
    if text.startswith('{'):
        pairs = (item.split(':') for item in text.strip('{}').split(','))
        return {k.strip(): float(v) for k, v in pairs}
    try:
        return int(text)
    except ValueError:
        return float(text)


def test_documented_limits_equal_the_code_constants():
    doc = documented_limits()
    assert len(doc) >= 15, doc
    wrong = {}
    for ref, text in doc.items():
        code_value = _resolve(ref)
        documented = _parse_value(text)
        if isinstance(code_value, dict):
            code_value = {k: float(v) for k, v in code_value.items()}
        if documented != code_value or type(documented) is not type(code_value):
            wrong[ref] = (text, code_value)
    assert not wrong, f'docs/limits.md differs from the code: {wrong}'


def test_every_max_constant_of_the_package_is_documented():
    """A new MAX_* bound in the package must be added to docs/limits.md (cannot drift)."""
    doc = set(documented_limits())
    found = set()
    for path in PKG_SRC.rglob('*.py'):
        if 'bench' in path.parts:
            continue
        module = '.'.join(path.relative_to(PKG_SRC).with_suffix('').parts)
        for m in re.finditer(r'^(MAX_[A-Z0-9_]+)\s*=', path.read_text(), re.M):
            found.add(f'{module}.{m[1]}')
    missing = sorted(found - doc)
    assert not missing, f'bounds missing from docs/limits.md: {missing}'

