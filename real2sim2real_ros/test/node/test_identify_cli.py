"""`r2s2r identify` offline: recorded bags -> the system_identification node -> a parameter
table, over DDS in subprocesses. The bags come from the emulated cell core (no live probes),
recorded the way the executor records (commanded JointTrajectory with its start time +
joint_states stamped on the cell's clock); the cell's latency and gravity compensation are
hidden and everything else is as the identification config's priors say."""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

pytestmark = pytest.mark.integration

LATENCY, GRAVCOMP = 0.015, 0.97
CLOCK0 = 1000.0          # the cell clock's value at world time 0
START_DELAY = 0.05


def _time(t):
    sec = int(np.floor(t))
    return {'sec': sec, 'nanosec': int(round((t - sec) * 1e9))}


def record_bag(world, probe, path, settle=0.3):
    """Execute ``probe`` on the emulated world as the executor would; write its bag."""
    from real2sim2real_ros.core.bag_io import BagWriter
    from real2sim2real_ros.core.joint_trajectory import JointTrajectoryCommand
    world.reset()
    world.step_for(settle)
    start = world.time + START_DELAY
    # A point at t = 0 on the centre, as system_identification sends its probes.
    times = np.concatenate([[0.0], probe.times])
    pos = np.vstack([world.initial_positions, probe.positions])
    vel = np.vstack([np.zeros(pos.shape[1]), probe.velocities])
    world.set_trajectory(JointTrajectoryCommand(probe.joint_names, times, pos, vel,
                                                start_time=start))
    names = list(world.joint_names)
    points = [{'positions': pos[i].tolist(), 'velocities': vel[i].tolist(),
               'accelerations': [], 'effort': [], 'time_from_start': _time(t)}
              for i, t in enumerate(times)]
    with BagWriter(path) as bag:
        bag.add_topic('/joint_states', 'sensor_msgs/msg/JointState')
        bag.add_topic('/joint_trajectory_controller/joint_trajectory',
                      'trajectory_msgs/msg/JointTrajectory')
        bag.write('/joint_trajectory_controller/joint_trajectory',
                  int((CLOCK0 + world.time) * 1e9),
                  {'header': {'stamp': _time(CLOCK0 + start), 'frame_id': ''},
                   'joint_names': names, 'points': points})
        while world.time < start + times[-1] + 0.2:
            world.step_for(0.01)
            stamp = CLOCK0 + world.time
            bag.write('/joint_states', int((stamp + 0.002) * 1e9), {
                'header': {'stamp': _time(stamp), 'frame_id': ''}, 'name': names,
                'position': world.joint_positions().tolist(), 'velocity': [], 'effort': []})
    return str(path)


@pytest.fixture(scope='module')
def bags(tmp_path_factory):
    from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
    from real2sim2real_ros.core.emulated_world import EmulatedWorld
    from real2sim2real_ros.core.robot_description import default_cell_urdf, load_robot
    from real2sim2real_ros.core.sysid.probes import multisine_probe
    spec = load_cell_spec(default_cell_spec_path())
    robot_spec = dataclasses.replace(
        spec.robot, joint_damping=(0.5, 0.5, 0.5, 0.1, 0.1, 0.1),
        joint_frictionloss=(0.3, 0.3, 0.3, 0.05, 0.05, 0.05),
        armature=(0.1, 0.1, 0.1, 0.02, 0.02, 0.02), command_latency=LATENCY,
        gravity_compensation=GRAVCOMP)
    world = EmulatedWorld(dataclasses.replace(spec, robot=robot_spec, objects=(), cameras=()))
    robot = load_robot(default_cell_urdf())
    tmp = tmp_path_factory.mktemp('identify_cli')
    out = []
    for seed in range(2):
        probe = multisine_probe(robot.joint_names, world.initial_positions, robot.lower,
                                robot.upper, robot.velocity_limits, duration=2.0,
                                amplitude=0.3, velocity_fraction=0.5, seed=seed)
        out.append(record_bag(world, probe, tmp / f'probe_{seed}'))
    return tmp, out, str(default_cell_urdf())


@pytest.fixture(scope='module')
def node(bags):
    tmp, _, urdf = bags
    proc = subprocess.Popen(
        [sys.executable, '-m', 'real2sim2real_ros.nodes.system_identification.node',
         '--ros-args', '-p', f'robot_description_file:={urdf}', '-p', f'run_dir:={tmp}/runs',
         '-p', 'nthread:=2'],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    time.sleep(0.5)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def r2s2r(*args, timeout=120):
    return subprocess.run([sys.executable, '-m', 'real2sim2real_ros.cli.main', *args],
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, COLUMNS='160'))


def _row(stdout: str, name: str) -> list[str]:
    line = next(ln for ln in stdout.splitlines() if name in ln)
    return re.findall(r'-?\d+\.?\d*(?:e-?\d+)?', line.split(name, 1)[1])


def test_identify_from_bags_prints_the_parameter_table(bags, node):
    from pathlib import Path
    tmp, paths, _ = bags
    proc = r2s2r('identify', '--bags', *paths, '--params', 'global/command_latency',
                 'global/gravity_compensation', '--run-dir', str(tmp / 'cli'))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    value, lo, hi, prior = map(float, _row(out, 'global/command_latency')[:4])
    assert abs(value - LATENCY) <= 0.001 and lo <= value <= hi and prior == 0.01
    value, lo, hi, prior = map(float, _row(out, 'global/gravity_compensation')[:4])
    assert abs(value - GRAVCOMP) <= 0.005 and lo <= value <= hi and prior == 1.0
    report = Path(re.search(r'^report: (\S+)$', out, re.M).group(1))
    assert report.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert report.parent.parent == tmp / 'cli'
    assert (report.parent / 'parameters.yaml').is_file()


def test_identify_errors_exit_1_with_the_message(bags, node, tmp_path):
    proc = r2s2r('identify', '--bags', str(tmp_path / 'no_such_bag'))
    assert proc.returncode == 1
    assert 'FAILED' in proc.stdout and 'no_such_bag' in proc.stdout
    _, paths, _ = bags
    proc = r2s2r('identify', '--bags', *paths, '--params', 'joint/elbow_joint/stiction')
    assert proc.returncode == 1 and 'stiction' in proc.stdout
    proc = r2s2r('identify', '--bags', *paths, '--probes', '2')
    assert proc.returncode == 2 and '--probes' in proc.stderr
