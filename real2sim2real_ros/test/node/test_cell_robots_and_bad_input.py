"""Robots nobody here wrote (UR5 and SO-101 from example-robot-data) in the emulated cell, and
the documented behaviour of the cell node on a malformed spec or URDF: one line naming the
problem on stderr, exit code 2, no traceback."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
from real2sim2real_ros.core.emulated_world import EmulatedWorld
from real2sim2real_ros.core.joint_trajectory import JointTrajectoryCommand
from real2sim2real_ros.core.robot_description import find_package_dir


def _robots() -> Path:
    return find_package_dir('example-robot-data') / 'robots'   # a requirement


def _cell_for(urdf: Path, n_joints: int) -> dict:
    spec = yaml.safe_load(Path(default_cell_spec_path()).read_text())
    spec['robot'] = {'urdf': str(urdf), 'kp': 300.0, 'kv': 20.0, 'command_latency': 0.008,
                     'joint_state_noise_std': 0.0002}
    spec['table']['center'] = [3.0, 0.0]  # out of the way of arms we did not place
    spec['objects'] = []
    spec['cameras'] = []
    return spec


@pytest.mark.parametrize('rel', ['ur_description/urdf/ur5_robot.urdf',
                                 'so_arm_description/urdf/so101.urdf'],
                         ids=['ur5', 'so101'])
def test_foreign_robot_tracks_a_trajectory_in_the_emulated_cell(rel):
    import collada  # noqa: F401 - pycollada converts UR5 DAE meshes
    urdf = _robots() / rel
    world = EmulatedWorld(load_cell_spec(_cell_for(urdf, 0)))
    try:
        n = len(world.joint_names)
        assert n >= 5
        q0 = world.true_joint_positions()
        span = world.robot.upper - world.robot.lower
        target = np.clip(q0 + 0.15 * np.sign(np.cos(np.arange(n))),
                         world.robot.lower + 0.05 * span, world.robot.upper - 0.05 * span)
        world.set_trajectory(JointTrajectoryCommand.from_points(
            world.joint_names, [(1.0, (q0 + target) / 2), (2.0, target)]))
        world.step_for(3.0)
        err = np.abs(world.true_joint_positions() - target)
        print(f'{rel}: {n} joints, final error max {err.max() * 1e3:.2f} mrad')
        assert err.max() < 0.02, err
        assert np.abs(world.true_joint_positions() - q0).max() > 0.1, 'it moved'
        assert world.trajectory_done()
    finally:
        world.close()


def _run_cell(tmp_path, *ros_args):
    env = dict(os.environ)
    return subprocess.run(
        [sys.executable, '-m', 'real2sim2real_ros.nodes.emulated_cell_node', '--ros-args',
         '-p', 'enable_cameras:=false', *ros_args],
        capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)


def test_malformed_cell_spec_exits_2_with_one_line_naming_the_field(tmp_path):
    spec = yaml.safe_load(Path(default_cell_spec_path()).read_text())
    spec['objects'][1]['mass'] = -0.2
    bad = tmp_path / 'bad_cell.yaml'
    bad.write_text(yaml.safe_dump(spec))
    proc = _run_cell(tmp_path, '-p', f'cell_spec:={bad}')
    assert proc.returncode == 2, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if 'error' in ln.lower()]
    assert len(errors) == 1 and 'objects[1].mass' in errors[0], proc.stderr
    assert 'Traceback' not in proc.stderr


def test_malformed_urdf_exits_2_with_one_line_naming_the_problem(tmp_path):
    bad = tmp_path / 'broken.urdf'
    bad.write_text('<robot name="broken"><link name="a"/><joint name="j" type="revolute">'
                   '<parent link="a"/><child link="b"/></robot>')
    proc = _run_cell(tmp_path, '-p', f'robot_description_file:={bad}')
    assert proc.returncode == 2, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if 'error' in ln.lower()]
    assert len(errors) == 1 and 'broken.urdf' in errors[0] or 'line' in errors[0], proc.stderr
    assert 'Traceback' not in proc.stderr
