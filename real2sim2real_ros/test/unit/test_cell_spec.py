"""Cell spec validation: the shipped specs load; every bad field is named in the error."""
import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from real2sim2real_ros.core.cell_spec import CellSpecError, load_cell_spec

CELLS = Path(__file__).resolve().parents[2] / 'config' / 'cells'


def _default() -> dict:
    return yaml.safe_load((CELLS / 'default.yaml').read_text())


@pytest.mark.parametrize('path', sorted(CELLS.glob('*.yaml')), ids=lambda p: p.name)
def test_shipped_specs_load(path):
    spec = load_cell_spec(path)
    assert spec.objects and spec.cameras
    for obj in spec.objects:   # objects rest on the table, within the table's extent
        assert obj.xyz[2] == pytest.approx(spec.table.height + obj.half_height, abs=1e-3)
        assert abs(obj.xyz[0] - spec.table.center[0]) < spec.table.size[0] / 2
    for cam in spec.cameras:   # a proper rotation matrix
        r = cam.rotation_matrix
        np.testing.assert_allclose(r.T @ r, np.eye(3), atol=1e-9)
        assert np.linalg.det(r) == pytest.approx(1.0)


def test_default_spec_content():
    spec = load_cell_spec(CELLS / 'default.yaml')
    box, cyl = spec.object('box_0'), spec.object('cylinder_0')
    assert box.shape == 'box' and box.size == (0.08, 0.06, 0.05)
    assert cyl.shape == 'cylinder' and cyl.size == (0.06, 0.08)
    cam = spec.cameras[0]
    assert (cam.width, cam.height) == (640, 480) and cam.fx == pytest.approx(615.0)
    # Looks down at the table from about 0.7 m above it.
    assert cam.position[2] - spec.table.height == pytest.approx(0.7, abs=0.1)
    assert cam.rotation_matrix[2, 2] < -0.5          # optical z points down-ish
    truth = spec.hidden_truth(['j1', 'j2', 'j3', 'j4', 'j5', 'j6'])
    assert truth['body/box_0/mass'] == pytest.approx(0.21)
    assert truth['global/command_latency'] == pytest.approx(0.012)
    assert 'joint/j3/damping' in truth and 'actuator/j6/kp' in truth


def _set(data, path, value):
    """Set data[a][b][i]... from a path like 'objects.1.mass'; value None deletes."""
    keys = [int(k) if k.isdigit() else k for k in path.split('.')]
    node = data
    for k in keys[:-1]:
        node = node[k]
    if value is None:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value


BAD_FIELDS = [
    ('objects.1.mass', -0.1, 'objects[1].mass: must be > 0'),
    ('objects.1.mass', None, 'objects[1].mass: is required'),
    ('objects.0.shape', 'sphere', 'objects[0].shape: must be one of'),
    ('objects.0.size', [0.1, 0.1], 'objects[0].size: must be a list of 3'),
    ('objects.0.size', [0.1, -0.1, 0.1], 'objects[0].size[1]: must be > 0'),
    ('objects.0.edge_radius', 0.03, 'objects[0].edge_radius: must be <'),
    ('objects.0.com_offset', 'x', 'objects[0].com_offset: must be a list of 3'),
    ('objects.0.friction', [0.0, 0.1, 0.1], 'objects[0].friction[0]: sliding friction'),
    ('objects.0.pose.xyz', [1.0], 'objects[0].pose.xyz: must be a list of 2 or 3'),
    ('objects.1.id', 'box_0', "objects[1].id: duplicate id 'box_0'"),
    ('objects.0.colour', 1, 'objects[0].colour: unknown field'),
    ('robot.kp', [], 'robot.kp: must not be empty'),
    ('robot.kv', -1.0, 'robot.kv: must be >= 0'),
    ('robot.command_latency', 'soon', 'robot.command_latency: must be a number'),
    ('robot.joint_state_noise_std', -0.1, 'robot.joint_state_noise_std: must be >= 0'),
    ('robot.gravity_compensation', 1.5, 'robot.gravity_compensation: must be <= 1'),
    ('table.size', [1, 1], 'table.size: must be a list of 3'),
    ('contact.timestep', 0.0, 'contact.timestep: must be > 0'),
    ('contact.integrator', 'leapfrog', 'contact.integrator: must be one of'),
    ('contact.cone', 'round', 'contact.cone: must be one of'),
    ('contact.solimp', [0.9, 1.5, 0.001, 0.5, 2], 'contact.solimp[1]: must be in (0, 1)'),
    ('contact.solref', [-100, -10], 'contact.solref[0]: time constant must be > 0'),
    ('cameras.0.width', 0, 'cameras[0].width: must be > 0'),
    ('cameras.0.fx', float('nan'), 'cameras[0].fx: must be finite'),
    ('cameras.0.depth_format', '8UC1', 'cameras[0].depth_format: must be one of'),
    ('cameras.0.rate', 0, 'cameras[0].rate: must be > 0'),
    ('cameras.0.pose.look_at', [0.65, -0.55, 0.70], 'cameras[0].pose.look_at: look_at target'),
    ('cameras.0.pose.quat_xyzw', [0, 0, 0, 1], 'cameras[0].pose: needs exactly one of'),
    ('cameras.0.depth_noise.baseline', 0.0, 'cameras[0].depth_noise.baseline: must be > 0'),
    ('cameras.0.depth_noise.dropout', 1.0, 'cameras[0].depth_noise.dropout: must be < 1'),
    ('cameras.0.depth_noise.max_depth', 0.1, 'cameras[0].depth_noise.max_depth: must be >'),
    ('cameras.0.name', 'my camera', 'cameras[0].name: must be a name'),
    ('seed', -1, 'seed: must be >= 0'),
    ('gripper', {}, 'gripper: unknown field'),
]


@pytest.mark.parametrize('path,value,message', BAD_FIELDS, ids=[b[0] + '=' + repr(b[1])
                                                                  for b in BAD_FIELDS])
def test_bad_field_is_named(path, value, message):
    data = copy.deepcopy(_default())
    _set(data, path, value)
    with pytest.raises(CellSpecError) as err:
        load_cell_spec(data)
    assert str(err.value).startswith(message), str(err.value)


def test_unreadable_and_non_mapping(tmp_path):
    with pytest.raises(CellSpecError, match='cannot read'):
        load_cell_spec(tmp_path / 'missing.yaml')
    bad = tmp_path / 'bad.yaml'
    bad.write_text('objects: [\n')
    with pytest.raises(CellSpecError, match='not valid YAML'):
        load_cell_spec(bad)
    bad.write_text('- 1\n- 2\n')
    with pytest.raises(CellSpecError, match='must be a YAML mapping'):
        load_cell_spec(bad)


def test_two_value_xyz_rests_on_table_and_relative_urdf(tmp_path):
    data = _default()
    data['table']['height'] = 0.1
    data['robot']['urdf'] = 'arm.urdf'
    path = tmp_path / 'cell.yaml'
    path.write_text(yaml.safe_dump(data))
    spec = load_cell_spec(path)
    assert spec.object('box_0').xyz[2] == pytest.approx(0.1 + 0.025)
    assert spec.urdf_path() == str(tmp_path / 'arm.urdf')
    assert load_cell_spec(CELLS / 'default.yaml').urdf_path() is None
