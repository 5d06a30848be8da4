"""The emulated_cell node on a Drake cell spec: the same ROS surface as on MuJoCo (joint
states from the cell's clock, registered depth frames), and a bad ``drake:`` field exits 2
with one line naming it. Node processes talk over Fast DDS on the run's private domain."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from real2sim2real_ros.ros.topic_listener import TopicListener

pytestmark = pytest.mark.integration

CELLS = Path(__file__).resolve().parents[1] / 'config' / 'cells'


def _cell(tmp_path, *ros_args, **popen):
    return subprocess.Popen(
        [sys.executable, '-m', 'real2sim2real_ros.nodes.emulated_cell_node', '--ros-args',
         *ros_args], env=dict(os.environ), cwd=tmp_path, text=True, **popen)


def test_node_publishes_joint_states_and_depth_from_a_drake_cell(tmp_path):
    from sensor_msgs.msg import Image, JointState
    spec = yaml.safe_load((CELLS / 'drake_default.yaml').read_text())
    proc = _cell(tmp_path, '-p', f'cell_spec:={CELLS / "drake_default.yaml"}',
                 '-p', 'real_time:=false', '-p', 'camera_rate:=5.0',
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    joints = TopicListener(JointState, 'joint_states')
    depth = TopicListener(Image, 'camera/depth/image_rect_raw')
    try:
        assert joints.wait_for(20, timeout=60), proc.poll()
        assert depth.wait_for(1, timeout=60), proc.poll()
        msgs = [m for _, m in joints.snapshot()]
        q = np.array([m.position for m in msgs])
        np.testing.assert_allclose(q[-1], spec['robot']['initial_positions'], atol=5e-3)
        assert np.std(np.diff(q, axis=0)) > 0      # noisy, not frozen
        stamps = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for m in msgs]
        assert np.all(np.diff(stamps) > 0)          # the cell's clock (fast mode: sim time)
        img = depth.snapshot()[0][1]
        assert (img.height, img.width, img.encoding) == (480, 640, '32FC1')
        d = np.frombuffer(bytes(img.data), np.float32).reshape(480, 640)
        assert 0.9 < np.isfinite(d).mean() < 1.0 and 0.5 < np.nanmin(d) < np.nanmax(d) < 3.0
    finally:
        joints.close()
        depth.close()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_bad_drake_field_exits_2_with_one_line_naming_it(tmp_path):
    spec = yaml.safe_load((CELLS / 'drake_default.yaml').read_text())
    spec['drake']['static_friction_ratio'] = 0.5
    bad = tmp_path / 'bad_drake.yaml'
    bad.write_text(yaml.safe_dump(spec))
    proc = _cell(tmp_path, '-p', f'cell_spec:={bad}', '-p', 'enable_cameras:=false',
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    errors = [ln for ln in err.splitlines() if 'error' in ln.lower()]
    assert len(errors) == 1 and 'drake.static_friction_ratio' in errors[0], err
    assert 'Traceback' not in err
