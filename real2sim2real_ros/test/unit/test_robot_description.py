"""URDF -> MuJoCo conversion: the default cell arm, example-robot-data arms, error messages."""
import math
import xml.etree.ElementTree as ET

import mujoco
import numpy as np
import pytest

from real2sim2real_ros.core.robot_description import (
    CELL_ARM_HOME,
    RobotDescriptionError,
    default_cell_urdf,
    find_package_dir,
    load_robot,
)


@pytest.fixture(scope='session')
def mesh_cache(tmp_path_factory):
    return tmp_path_factory.mktemp('mesh_cache')


@pytest.fixture(scope='session')
def cell_arm(mesh_cache):
    return load_robot(default_cell_urdf(), mesh_cache_dir=mesh_cache)


def _erd_robots():
    return find_package_dir('example-robot-data') / 'robots'   # a requirement


def _track_ramp(robot, model, delta=0.2, ramp_s=1.0, total_s=2.0):
    """Ramp every arm joint by ``delta`` from its (clipped) zero; (max lag, final error).
    Held joints (a gripper's) keep ctrl 0: their actuators hold them."""
    data = mujoco.MjData(model)
    idx = robot.qpos_indices(model)
    act = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, n) for n in robot.joint_names]
    q0 = np.clip(np.zeros(robot.n_joints), robot.lower, robot.upper)
    data.qpos[idx] = q0
    data.ctrl[act] = q0
    mujoco.mj_forward(model, data)
    lag = 0.0
    for k in range(int(total_s / model.opt.timestep)):
        data.ctrl[act] = q0 + delta * min(1.0, k * model.opt.timestep / ramp_s)
        mujoco.mj_step(model, data)
        lag = max(lag, float(np.abs(data.qpos[idx] - data.ctrl[act]).max()))
    return lag, float(np.abs(data.qpos[idx] - (q0 + delta)).max())


def _table_world():
    world = mujoco.MjSpec()
    # Table top at z = 0 spanning x in [0.25, 0.95] m, as the cell spec suggests.
    world.worldbody.add_geom(type=mujoco.mjtGeom.mjGEOM_BOX, size=[0.35, 0.4, 0.02],
                             pos=[0.6, 0.0, -0.02])
    return world


# ---------------------------------------------------------------------------- default arm


def test_default_arm_has_six_position_actuators(cell_arm):
    model = cell_arm.compile()
    assert cell_arm.joint_names == ('shoulder_pan_joint', 'shoulder_lift_joint', 'elbow_joint',
                                    'wrist_1_joint', 'wrist_2_joint', 'wrist_3_joint')
    assert model.nu == 6 and model.nq == 6
    for i, name in enumerate(cell_arm.joint_names):
        assert model.actuator(i).name == name
        assert model.actuator_trnid[i, 0] == model.joint(name).id
        assert model.actuator_biastype[i] == mujoco.mjtBias.mjBIAS_AFFINE
        # position servo: force = kp * (ctrl - q) - kv * qdot
        assert model.actuator_gainprm[i, 0] == pytest.approx(cell_arm.kp[i])
        assert model.actuator_biasprm[i, 1] == pytest.approx(-cell_arm.kp[i])
        assert model.actuator_biasprm[i, 2] == pytest.approx(-cell_arm.kv[i])
    assert cell_arm.base_link == 'base_link' and cell_arm.tip_link == 'tool_tip'
    assert cell_arm.notes == ()  # no gain had to be capped
    assert model.body('tool0').id > 0  # fixed links kept as bodies


def test_default_arm_limits_equal_the_urdf(cell_arm):
    root = ET.parse(default_cell_urdf()).getroot()
    model = cell_arm.compile()
    for i, name in enumerate(cell_arm.joint_names):
        joint = root.find(f"joint[@name='{name}']")
        lim, dyn = joint.find('limit'), joint.find('dynamics')
        lo, hi = float(lim.get('lower')), float(lim.get('upper'))
        vel, eff = float(lim.get('velocity')), float(lim.get('effort'))
        assert (cell_arm.lower[i], cell_arm.upper[i]) == (lo, hi)
        assert (cell_arm.velocity_limits[i], cell_arm.effort_limits[i]) == (vel, eff)
        jid = model.joint(name).id
        np.testing.assert_allclose(model.jnt_range[jid], [lo, hi])
        np.testing.assert_allclose(model.actuator_ctrlrange[i], [lo, hi])
        np.testing.assert_allclose(model.actuator_forcerange[i], [-eff, eff])
        np.testing.assert_allclose(model.jnt_actfrcrange[jid], [-eff, eff])
        dof = model.jnt_dofadr[jid]
        assert model.dof_damping[dof] == pytest.approx(float(dyn.get('damping')))
        assert model.dof_frictionloss[dof] == pytest.approx(float(dyn.get('friction')))
        assert model.dof_armature[dof] == pytest.approx(float(dyn.get('armature')))


def test_fk_matches_hand_computation(cell_arm):
    # q = 0: arm stretched along +x at shoulder height; lateral offsets +0.135 - 0.135 = 0.
    reach = 0.45 + 0.40 + 0.09 + 0.09 + 0.06 + 0.10
    pos, quat = cell_arm.fk(np.zeros(6))
    np.testing.assert_allclose(pos, [reach, 0.0, 0.09], atol=1e-6)
    h = math.sqrt(0.5)  # tool z along world +x: rotation of +90 deg about y
    np.testing.assert_allclose(quat, [h, 0.0, h, 0.0], atol=1e-6)
    # Pan by +90 deg turns the stretched arm onto +y.
    pos, _ = cell_arm.fk([math.pi / 2, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(pos, [0.0, reach, 0.09], atol=1e-6)
    # Shoulder lift by -90 deg points the whole arm straight up.
    pos, _ = cell_arm.fk([0, -math.pi / 2, 0, 0, 0, 0])
    np.testing.assert_allclose(pos, [0.0, 0.0, 0.09 + reach], atol=1e-6)
    # The documented home pose: tip at (0.5, 0, 0.09) with the tool pointing straight down.
    pos, quat = cell_arm.fk(CELL_ARM_HOME)
    np.testing.assert_allclose(pos, [0.5, 0.0, 0.09], atol=1e-3)
    tool_z = np.zeros(9)
    mujoco.mju_quat2Mat(tool_z, quat)
    np.testing.assert_allclose(tool_z.reshape(3, 3)[:, 2], [0, 0, -1], atol=1e-3)
    with pytest.raises(RobotDescriptionError, match='expects 6'):
        cell_arm.fk([0.0, 0.0])


def test_position_target_settles_in_plain_mujoco(cell_arm):
    world = _table_world()
    cell_arm.attach_to(world, pos=(0, 0, 0))
    model = world.compile()
    data = mujoco.MjData(model)
    idx = cell_arm.qpos_indices(model)
    target = np.array(CELL_ARM_HOME)
    data.ctrl[:] = target  # step from q = 0 to the tool-down home pose
    for _ in range(int(2.0 / model.opt.timestep)):
        mujoco.mj_step(model, data)
    assert np.abs(data.qpos[idx] - target).max() < 0.01
    tip = data.xpos[model.body('tool_tip').id]
    np.testing.assert_allclose(tip, [0.5, 0.0, 0.09], atol=0.01)


def test_attach_twice_with_prefixes(cell_arm):
    world = _table_world()
    cell_arm.attach_to(world, pos=(0, -0.5, 0), prefix='left/')
    cell_arm.attach_to(world, pos=(0, 0.5, 0), quat=(0, 0, 0, 1), prefix='right/')
    model = world.compile()
    assert model.nu == 12
    assert model.actuator(6).name == 'right/shoulder_pan_joint'
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    # The right arm is turned by 180 deg about z: its stretched tip lies along -x.
    np.testing.assert_allclose(data.xpos[model.body('right/tool_tip').id],
                               [-1.19, 0.5, 0.09], atol=1e-6)


def test_urdf_string_loads_like_the_file(cell_arm, mesh_cache):
    text = default_cell_urdf().read_text()
    from_text = load_robot(text, mesh_cache_dir=mesh_cache)
    assert from_text.source == '<URDF string>'
    assert from_text.joint_names == cell_arm.joint_names
    for attr in ('lower', 'upper', 'velocity_limits', 'effort_limits', 'kp', 'kv'):
        np.testing.assert_array_equal(getattr(from_text, attr), getattr(cell_arm, attr))
    q = np.array([0.3, -0.7, 1.1, 0.2, -0.4, 0.9])
    for a, b in zip(from_text.fk(q), cell_arm.fk(q)):
        np.testing.assert_allclose(a, b, atol=1e-12)


# ---------------------------------------------------------------------------- errors

_TINY = """<robot name="tiny">
  <link name="base"/>
  <link name="arm">{geometry}</link>
  <joint name="j1" type="revolute">
    <parent link="base"/><child link="arm"/><axis xyz="0 0 1"/>
    {limit}
  </joint>
</robot>"""
_LIMIT = '<limit lower="-1" upper="1" velocity="1" effort="5"/>'
_INERTIAL = ('<inertial><mass value="1"/>'
             '<inertia ixx="0.01" iyy="0.01" izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial>')


def test_malformed_xml_names_the_line(mesh_cache):
    bad = '<robot name="x">\n  <link name="a">\n  </robk>\n</robot>'
    with pytest.raises(RobotDescriptionError, match=r'malformed URDF XML .*line 3'):
        load_robot(bad, mesh_cache_dir=mesh_cache)


def test_missing_mesh_names_link_and_file(tmp_path, mesh_cache):
    geometry = ('<collision><geometry><mesh filename="meshes/nowhere.stl"/></geometry>'
                '</collision>' + _INERTIAL)
    path = tmp_path / 'tiny.urdf'
    path.write_text(_TINY.format(geometry=geometry, limit=_LIMIT))
    with pytest.raises(RobotDescriptionError, match=r"link 'arm'.*meshes/nowhere\.stl"):
        load_robot(path, mesh_cache_dir=mesh_cache)


def test_unknown_package_is_named(mesh_cache):
    geometry = ('<visual><geometry><mesh filename="package://no_such_pkg_r2s2r/m.stl"/>'
                '</geometry></visual>' + _INERTIAL)
    with pytest.raises(RobotDescriptionError, match="unknown package 'no_such_pkg_r2s2r'"):
        load_robot(_TINY.format(geometry=geometry, limit=_LIMIT), mesh_cache_dir=mesh_cache)


def test_joint_without_limits_is_named(mesh_cache):
    with pytest.raises(RobotDescriptionError, match=r"joint 'j1' \(revolute\) has no <limit>"):
        load_robot(_TINY.format(geometry=_INERTIAL, limit=''), mesh_cache_dir=mesh_cache)
    partial = '<limit lower="-1" upper="1"/>'
    with pytest.raises(RobotDescriptionError, match=r"joint 'j1'.*lacks \['velocity', 'effort'\]"):
        load_robot(_TINY.format(geometry=_INERTIAL, limit=partial), mesh_cache_dir=mesh_cache)


def test_bad_gain_config_is_named(mesh_cache):
    with pytest.raises(RobotDescriptionError, match=r"unknown actuator gain field\(s\) \['kpp'\]"):
        load_robot(default_cell_urdf(), actuator={'kpp': 1.0}, mesh_cache_dir=mesh_cache)
    with pytest.raises(RobotDescriptionError, match='unknown joint'):
        load_robot(default_cell_urdf(), actuator={'per_joint': {'nope': {'kp': 1.0}}},
                   mesh_cache_dir=mesh_cache)


def test_same_basename_meshes_stay_distinct_and_cached(tmp_path):
    import trimesh
    (tmp_path / 'a').mkdir()
    (tmp_path / 'b').mkdir()
    trimesh.creation.box(extents=[0.1, 0.1, 0.1]).export(tmp_path / 'a' / 'part.stl')
    trimesh.creation.box(extents=[0.3, 0.3, 0.3]).export(tmp_path / 'b' / 'part.obj')
    geometry = ('<visual><geometry><mesh filename="a/part.stl"/></geometry></visual>'
                '<collision><geometry><mesh filename="b/part.obj"/></geometry></collision>'
                + _INERTIAL)
    path = tmp_path / 'tiny.urdf'
    path.write_text(_TINY.format(geometry=geometry, limit=_LIMIT))
    cache = tmp_path / 'cache'
    model = load_robot(path, mesh_cache_dir=cache).compile()
    assert model.nmesh == 2
    sizes = sorted(float(np.ptp(model.mesh_vert[model.mesh_vertadr[i]:
                                                model.mesh_vertadr[i] + model.mesh_vertnum[i]]))
                   for i in range(model.nmesh))
    np.testing.assert_allclose(sizes, [0.1, 0.3], atol=1e-6)
    files = sorted(cache.iterdir())
    assert len(files) == 2 and all(f.suffix == '.stl' for f in files)
    stamps = [f.stat().st_mtime_ns for f in files]
    load_robot(path, mesh_cache_dir=cache)  # second run reuses the cached conversions
    assert sorted(cache.iterdir()) == files
    assert [f.stat().st_mtime_ns for f in files] == stamps


# ---------------------------------------------------------------------------- example robots


def test_ur5_converts_with_dae_meshes_and_tracks(mesh_cache):
    import collada  # noqa: F401 - pycollada reads the UR5 DAE visuals
    robots = _erd_robots()
    robot = load_robot(robots / 'ur_description/urdf/ur5_robot.urdf', mesh_cache_dir=mesh_cache)
    model = robot.compile()
    is_mesh = model.geom_type == mujoco.mjtGeom.mjGEOM_MESH
    assert robot.n_joints == 6 and model.nu == 6
    assert int(np.sum(is_mesh & (model.geom_group == 1))) == 7   # DAE visuals, converted
    assert int(np.sum(is_mesh & (model.geom_contype == 1))) == 7  # STL collisions
    np.testing.assert_allclose(robot.effort_limits, [150, 150, 150, 28, 28, 28])
    lag, final = _track_ramp(robot, model)
    assert lag < 0.03 and final < 0.005, (lag, final)


def test_so101_converts_and_tracks(mesh_cache):
    robots = _erd_robots()
    robot = load_robot(robots / 'so_arm_description/urdf/so101.urdf', mesh_cache_dir=mesh_cache)
    model = robot.compile()
    # Joints by role: the jaw ('gripper') is held, the arm is the five joints before it.
    assert robot.joint_names == ('shoulder_pan', 'shoulder_lift', 'elbow_flex', 'wrist_flex',
                                 'wrist_roll')
    assert robot.held_joint_names == ('gripper',) and robot.tip_link == 'gripper_frame_link'

    assert int(np.sum(model.geom_type == mujoco.mjtGeom.mjGEOM_MESH)) > 0
    lag, final = _track_ramp(robot, model)
    assert lag < 0.03 and final < 0.005, (lag, final)
