"""Every launch file of the package parses with the runner, and the runner refuses bad input
on the real bringup with one line, exit 2, and no process started."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

LAUNCH_DIR = Path(__file__).resolve().parents[1] / 'launch'
LAUNCH_FILES = sorted(LAUNCH_DIR.glob('*.launch.xml'))


def test_package_has_the_documented_launch_files():
    names = {p.name for p in LAUNCH_FILES}
    assert {'bringup.launch.xml', 'cell_emulated.launch.xml', 'cell_real.launch.xml',
            'twin.launch.xml'} <= names


@pytest.mark.parametrize('path', LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_file_parses(path, share_dir):
    from real2sim2real_ros.launch_runner import parse_launch_file
    args = {'start_camera': 'false'} if path.name == 'cell_real.launch.xml' else {}
    plan = parse_launch_file(share_dir / 'launch' / path.name, args)
    assert plan.nodes, f'{path.name} starts no node'
    for node in plan.nodes:
        assert node.executable and node.name


def test_bringup_plan_for_each_cell(share_dir):
    from real2sim2real_ros.launch_runner import launch_plan_commands, parse_launch_file
    bringup = share_dir / 'launch' / 'bringup.launch.xml'
    emulated = parse_launch_file(bringup, {'cell': 'emulated', 'namespace': 'cell_a'})
    from real2sim2real_ros.ros.commander import expected_graph
    # What the launch starts is what the operator facade (r2s2r status) expects.
    assert sorted(n.name for n in emulated.nodes) == sorted(expected_graph('emulated'))
    assert {n.namespace for n in emulated.nodes} == {'/cell_a'}
    cmds = launch_plan_commands(emulated)
    for cmd in cmds:
        assert '--params-file' in cmd and '__ns:=/cell_a' in ' '.join(cmd)
    real = parse_launch_file(bringup, {'cell': 'real'})
    assert sorted(n.name for n in real.nodes) == sorted(expected_graph('real'))
    executor = next(n for n in real.nodes if n.name == 'robot_executor')
    backend = [p for p in executor.parameters if getattr(p, 'name', '') == 'backend']
    assert backend and backend[0].value == 'follow_joint_trajectory'


def _runner(args, tmp_path):
    env = dict(os.environ)
    return subprocess.run([sys.executable, '-m', 'real2sim2real_ros.cli.main', 'launch', *args],
                          capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)


@pytest.mark.parametrize('args, expect', [
    (['real2sim2real_ros', 'bringup.launch.xml', 'no_such_arg:=1'], 'no_such_arg'),
    (['real2sim2real_ros', 'bringup.launch.xml', 'params_file:=/nonexistent/params.yaml'],
     '/nonexistent/params.yaml'),
    (['real2sim2real_ros', 'bringup.launch.xml', 'cell:=imaginary'], 'imaginary'),
    (['real2sim2real_ros', 'no_such.launch.xml'], 'no_such.launch.xml'),
], ids=['unknown-arg', 'missing-params-file', 'bad-choice', 'missing-launch-file'])
def test_bad_launch_input_is_one_line_and_exit_2(args, expect, tmp_path, share_dir):
    proc = _runner(['--runner', *args], tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert expect in lines[0]
    assert proc.stdout.strip() == ''  # nothing was started, nothing printed by nodes


@pytest.mark.parametrize('cell, backend', [('real', 'moveit'),
                                           ('emulated', 'follow_joint_trajectory')])
def test_top_level_accepts_arguments_declared_in_included_files(cell, backend, share_dir):
    """As `ros2 launch` does: `bringup.launch.xml cell:=real executor_backend:=moveit` sets
    the argument cell_<cell>.launch.xml declares (bringup itself does not declare it)."""
    from real2sim2real_ros.launch_runner import LaunchError, parse_launch_file
    bringup = share_dir / 'launch' / 'bringup.launch.xml'
    plan = parse_launch_file(bringup, {'cell': cell, 'executor_backend': backend})
    executor = next(n for n in plan.nodes if n.name == 'robot_executor')
    values = [p.value for p in executor.parameters if getattr(p, 'name', '') == 'backend']
    assert values == [backend]
    assert plan.launch_arguments['executor_backend'] == backend
    # One that no visited file declares is still refused, naming what is declared.
    with pytest.raises(LaunchError, match="unknown launch argument 'backend'.*executor_backend"):
        parse_launch_file(bringup, {'cell': cell, 'backend': backend})
