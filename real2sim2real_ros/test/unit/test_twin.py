"""The MuJoCo twin: named parameters, rollouts (single, batched, threaded), latency, stability."""
import dataclasses

import numpy as np
import pytest

from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
from real2sim2real_ros.core.emulated_world import EmulatedWorld
from real2sim2real_ros.core.joint_trajectory import JointTrajectoryCommand
from real2sim2real_ros.core.parameters import UnknownParameterError
from real2sim2real_ros.core.robot_description import default_cell_urdf, load_robot
from real2sim2real_ros.core.twin import InvalidRolloutError, Twin, UnstableTwinError

HOME = np.array([0.0, -1.5708, 1.5708, 1.5708, 0.0, 0.0])

SCENE = """<mujoco>
  <worldbody>
    <geom name="table" type="box" size="0.4 0.5 0.02" pos="0.6 0 -0.02"/>
    <body name="object/box_0" pos="0.55 0.12 0.05">
      <freejoint name="object/box_0"/>
      <geom name="object/box_0" type="box" size="0.04 0.03 0.025" mass="0.2"
            friction="0.6 0.005 0.0001"/>
    </body>
  </worldbody>
</mujoco>"""


@pytest.fixture(scope='module')
def twin(robot):
    return Twin(robot, scene=SCENE)


def _move(q0, delta=0.2):
    target = q0 + delta
    return np.array([0.6, 1.2]), np.vstack([target, q0])


def test_parameter_round_trip_for_every_kind(robot):
    tw = Twin(robot, scene=SCENE)
    values = {'body/box_0/mass': 0.37, 'body/box_0/com_offset_x': 0.004,
              'geom/box_0/friction': 0.42, 'geom/table/friction': 0.9,
              'joint/elbow_joint/damping': 0.77, 'joint/elbow_joint/frictionloss': 0.21,
              'joint/elbow_joint/armature': 0.055, 'actuator/elbow_joint/kp': 1234.0,
              'actuator/elbow_joint/kv': 56.0, 'global/command_latency': 0.013,
              'global/gravity_compensation': 0.95}
    inertia0 = tw.model.body_inertia[tw.model.body('object/box_0').id].copy()
    tw.set_parameters(values)
    for name, v in values.items():
        assert tw.get_parameter(name) == pytest.approx(v), name
    # Mass change scales the inertia (a denser object of the same shape).
    np.testing.assert_allclose(tw.model.body_inertia[tw.model.body('object/box_0').id],
                               inertia0 * 0.37 / 0.2, rtol=1e-9)
    # Position actuator bias follows kp; gravity compensation scales every robot body.
    a = tw.model.actuator('elbow_joint').id
    assert tw.model.actuator_biasprm[a, 1] == pytest.approx(-1234.0)
    assert np.all(tw.model.body_gravcomp[tw._robot_bodies] == pytest.approx(0.95))
    assert 'joint/wrist_3_joint/damping' in tw.parameter_names()
    # URDF-style 'friction' on a joint is MuJoCo's frictionloss.
    assert tw.get_parameter('joint/elbow_joint/friction') == pytest.approx(0.21)


def test_centre_of_mass_offset_moves_the_inertial_frame_and_changes_the_dynamics(robot):
    """MuJoCo compiles a free box whose centre of mass sits at its frame origin onto fast
    paths (body_sameframe, simple dofs) that ignore body_ipos set later: the offset must still
    reach the kinematics and the dynamics, through set_parameters and in rollout variants."""
    import mujoco
    tw = Twin(robot, scene=SCENE)
    b = tw.model.body('object/box_0').id

    def pushed(model):
        d = mujoco.MjData(model)
        for k in range(400):        # 0.1 s of a 3 N push at the frame origin, then a slide
            force = np.array([3.0, 0.0, 0.0]) if k < 100 else np.zeros(3)
            # xfrc_applied acts at the centre of mass: the push's lever arm adds a torque.
            d.xfrc_applied[b] = np.concatenate([force, np.cross(d.xpos[b] - d.xipos[b], force)])
            mujoco.mj_step(model, d)
        return d.xpos[b].copy(), d.xipos[b] - d.xpos[b], d.xquat[b].copy()

    p0, off0, q0 = pushed(tw._variant({})[0])
    np.testing.assert_allclose(off0, 0.0, atol=1e-12)
    variant, _ = tw._variant({'body/box_0/com_offset_y': 0.015})
    p1, off1, q1 = pushed(variant)
    assert np.linalg.norm(off1) == pytest.approx(0.015, rel=1e-6)
    # Pushed off its centre of mass the box turns: yaw differs by more than 5 deg.
    assert abs(q1 @ q0) < np.cos(np.radians(5.0) / 2)
    tw.set_parameters({'body/box_0/com_offset_y': 0.015})
    p2, off2, _ = pushed(tw.model)
    np.testing.assert_allclose(p2, p1, atol=1e-9)


def test_centre_of_mass_offset_set_later_slides_the_box_as_one_compiled_with_it(robot):
    """A free box compiled with its centre of mass at the frame origin has no coupling
    entries in MuJoCo's sparse mass matrix: an offset written later turned a sliding box
    0.11 rad where the same box compiled with the offset turned 0.01 rad (the emulated cell
    compiles its offsets, so the twin disagreed with it even given the true offset)."""
    import mujoco
    later = Twin(robot, scene=SCENE)
    b = later.model.body('object/box_0').id
    ix, iy, iz = later.model.body_inertia[b]
    compiled = Twin(robot, scene=SCENE.replace(
        '<freejoint name="object/box_0"/>',
        '<freejoint name="object/box_0"/><inertial pos="0.006 0.01 -0.003" mass="0.2" '
        f'diaginertia="{ix:.9g} {iy:.9g} {iz:.9g}"/>'))
    later.set_parameters({'body/box_0/com_offset_x': 0.006, 'body/box_0/com_offset_y': 0.01,
                          'body/box_0/com_offset_z': -0.003})

    def slide(tw):
        m, d = tw.model, mujoco.MjData(tw.model)
        d.qpos[tw._qadr] = HOME
        d.ctrl[tw._act] = HOME
        for _ in range(300):                 # settle on the table
            mujoco.mj_step(m, d)
        dof = m.jnt_dofadr[m.body_jntadr[b]]
        d.qvel[dof:dof + 3] = [0.6, 0.3, 0.0]
        start = d.xpos[b].copy()
        for _ in range(1500):
            mujoco.mj_step(m, d)
        return d.xpos[b] - start, d.xquat[b].copy()

    moved_c, quat_c = slide(compiled)
    moved_l, quat_l = slide(later)
    assert np.linalg.norm(moved_c) > 0.02                  # it slid
    np.testing.assert_allclose(moved_l, moved_c, atol=5e-4)
    turned = 2 * np.arccos(min(1.0, abs(float(quat_l @ quat_c))))
    assert turned < np.radians(0.5), np.degrees(turned)


def test_object_damping_is_a_loss_that_grows_with_speed(robot):
    """body/<id>/linear_damping and angular_damping set the free joint's translational and
    rotational dof damping (N s/m, N m s/rad; issue 15: a Drake box loses more to a fast
    strike than a MuJoCo box of one friction). A damped box launched at 0.8 m/s stops
    shorter than an undamped one, by a larger fraction than when launched at 0.4 m/s; a
    robot link has no free joint to damp."""
    import mujoco
    tw = Twin(robot, scene=SCENE)
    tw.set_parameters({'body/box_0/linear_damping': 0.4, 'body/box_0/angular_damping': 0.003})
    assert tw.get_parameter('body/box_0/linear_damping') == pytest.approx(0.4)
    assert tw.get_parameter('body/box_0/angular_damping') == pytest.approx(0.003)
    b = tw.model.body('object/box_0').id
    dof = tw.model.jnt_dofadr[tw.model.body_jntadr[b]]
    np.testing.assert_allclose(tw.model.dof_damping[dof:dof + 6], [0.4] * 3 + [0.003] * 3)
    damped = [n for n in tw.parameter_names() if n.endswith('_damping')]
    assert damped == ['body/object/box_0/linear_damping', 'body/object/box_0/angular_damping']
    with pytest.raises(UnknownParameterError, match='free joint'):
        tw.set_parameter('body/wrist_3_link/linear_damping', 0.1)
    with pytest.raises(ValueError, match='linear_damping'):
        tw.set_parameter('body/box_0/linear_damping', -0.1)

    def slide(damping, speed):
        tw.set_parameter('body/box_0/linear_damping', damping)
        m, d = tw.model, mujoco.MjData(tw.model)
        d.qpos[tw._qadr] = HOME
        d.ctrl[tw._act] = HOME
        for _ in range(300):
            mujoco.mj_step(m, d)
        d.qvel[dof:dof + 3] = [speed, 0.0, 0.0]
        x0 = d.xpos[b, 0]
        for _ in range(1500):
            mujoco.mj_step(m, d)
        return d.xpos[b, 0] - x0
    slow, fast = slide(0.0, 0.4), slide(0.0, 0.8)
    slow_d, fast_d = slide(0.4, 0.4), slide(0.4, 0.8)
    assert slow > 0.005 and fast > 3 * slow             # friction: slide ~ v^2
    # measured: 3.6% shorter at 0.4 m/s, 9.6% at 0.8 m/s
    assert slow_d < slow and fast_d < fast
    assert 1 - fast_d / fast > 1 - slow_d / slow + 0.02, (slow, slow_d, fast, fast_d)


@pytest.mark.parametrize('name', ['body/nothing/mass', 'joint/elbow_joint/stiffness',
                                  'actuator/elbow/kp', 'global/gravity', 'mass', 'x/y/z'])
def test_unknown_parameter_names_are_rejected_by_name(twin, name):
    before = twin.get_parameter('joint/elbow_joint/damping')
    with pytest.raises(UnknownParameterError) as err:
        twin.set_parameters({'joint/elbow_joint/damping': 9.0, name: 1.0})
    assert repr(name) in str(err.value)
    # Nothing was applied: validation precedes any write.
    assert twin.get_parameter('joint/elbow_joint/damping') == before


def test_invalid_values_are_rejected(twin):
    with pytest.raises(ValueError, match='body/box_0/mass'):
        twin.set_parameter('body/box_0/mass', -1.0)
    with pytest.raises(ValueError, match='damping'):
        twin.set_parameter('joint/elbow_joint/damping', float('nan'))


def test_rollout_shapes_and_object_settles_on_table(twin):
    times, pos = _move(HOME)
    res = twin.rollout(HOME, None, times, pos, sample_period=0.01)
    n = int(round((1.2 + 0.2) / 0.01))
    assert res.positions.shape == (1, n, 6)
    assert res.object_poses.shape == (1, n, 1, 7)
    assert res.object_ids == ['box_0']
    np.testing.assert_allclose(res.times[:3], [0.01, 0.02, 0.03])
    # The reference went to HOME + 0.2 at 0.6 s and back: the arm followed within 2 cm rad.
    k = int(round(0.6 / 0.01)) - 1
    assert np.all(np.abs(res.positions[0, k] - (HOME + 0.2)) < 0.03)
    assert np.all(np.abs(res.positions[0, -1] - HOME) < 0.01)
    # The box (half height 0.025 m) rests on the table top (z = 0).
    assert res.object_poses[0, -1, 0, 2] == pytest.approx(0.025, abs=2e-3)


def test_batched_rollout_matches_single_rollouts_and_threads(twin):
    times, pos = _move(HOME)
    samples = [{'joint/shoulder_pan_joint/damping': d, 'global/command_latency': lat}
               for d, lat in [(0.5, 0.0), (2.0, 0.01), (5.0, 0.03)]]
    batch1 = twin.rollout(HOME, None, times, pos, param_samples=samples, nthread=1)
    batch2 = twin.rollout(HOME, None, times, pos, param_samples=samples, nthread=2)
    np.testing.assert_array_equal(batch1.positions, batch2.positions)
    for b, s in enumerate(samples):
        tw = Twin(twin.robot, scene=SCENE, parameters=s)
        single = tw.rollout(HOME, None, times, pos)
        np.testing.assert_allclose(single.positions[0], batch1.positions[b], atol=1e-10)
    # The samples differ: more latency lags more.
    k = 300
    lag = np.abs(batch1.positions[:, k, 0] - (HOME[0] + 0.2 * k / 600))
    assert lag[0] < lag[1] < lag[2]


def test_latency_delays_the_response_by_exactly_that_time(robot):
    tw = Twin(robot)
    times, pos = _move(HOME)
    base = tw.rollout(HOME, None, times, pos, param_samples=[{'global/command_latency': 0.0}])
    late = tw.rollout(HOME, None, times, pos, param_samples=[{'global/command_latency': 0.025}])
    shift = 25   # steps of 1 ms
    np.testing.assert_allclose(late.positions[0, shift:900], base.positions[0, :900 - shift],
                               atol=1e-9)


def test_step_queue_delays_ctrl(robot):
    tw = Twin(robot, parameters={'global/command_latency': 0.005})
    tw.reset(HOME)
    target = HOME + 0.1
    applied = []
    for _ in range(8):
        tw.step(target)
        applied.append(tw.data.ctrl[tw._act[0]])
    # The first 5 steps still hold HOME; then the new reference arrives.
    np.testing.assert_allclose(applied[:5], HOME[0])
    np.testing.assert_allclose(applied[5:], target[0])


def test_twin_with_true_parameters_tracks_the_emulated_cell():
    spec = load_cell_spec(default_cell_spec_path())
    spec = dataclasses.replace(spec, objects=(), cameras=(),
                               robot=dataclasses.replace(spec.robot, joint_state_noise_std=0.0))
    world = EmulatedWorld(spec)
    names = list(world.joint_names)
    truth = spec.hidden_truth(names)
    keys = [k for k in truth if k.startswith(('joint/', 'actuator/'))] + [
        'global/command_latency', 'global/gravity_compensation']
    tw = Twin(load_robot(default_cell_urdf()), parameters={k: truth[k] for k in keys})
    world.step_for(0.3)
    ref0 = world.controller_state()['reference_positions']
    q0, qd0 = world.true_joint_positions(), world.joint_velocities()
    times, pos = _move(np.asarray(spec.robot.initial_positions), 0.15)
    world.set_trajectory(JointTrajectoryCommand(names, times, pos), now=world.time)
    rec = []
    for _ in range(140):
        world.step_for(0.01)
        rec.append(world.true_joint_positions())
    sim = tw.rollout(q0, qd0, times, pos, reference_start=ref0,
                     sample_times=np.arange(1, 141) * 0.01).positions[0]
    err = np.abs(sim - np.array(rec)).max()
    assert err < 2e-4, err   # vs ~0.15 rad of motion: same physics up to solver details


@pytest.mark.parametrize('timestep,why', [(0.05, 'outside its limits'), (0.1, 'reset')])
def test_unstable_twin_raises(robot, timestep, why):
    # A stiff servo at a coarse step: explicit stiffness diverges.
    tw = Twin(robot, timestep=timestep, parameters={'actuator/wrist_3_joint/kp': 1e6,
                                                    'joint/wrist_3_joint/armature': 0.0})
    times, pos = _move(HOME)
    with pytest.raises(UnstableTwinError, match=why):
        tw.rollout(HOME, None, times, pos)
    with pytest.raises(UnstableTwinError, match='rollout 0'):
        Twin(robot).rollout(HOME, np.full(6, 5e3), times, pos)


def test_bad_rollout_inputs(twin):
    with pytest.raises(InvalidRolloutError, match='6 finite'):
        twin.rollout(HOME[:5], None, [1.0], [HOME])
    with pytest.raises(InvalidRolloutError, match='strictly increasing'):
        twin.rollout(HOME, None, [1.0, 0.5], [HOME, HOME])
    with pytest.raises(UnknownParameterError, match='body/ghost/mass'):
        twin.rollout(HOME, None, [1.0], [HOME], param_samples=[{'body/ghost/mass': 1.0}])


def test_mass_change_refreshes_the_compiled_mass_constants(robot):
    """Setting an object's mass leaves the model as if compiled with that mass: dof_M0 and the
    invweights MuJoCo derives at compile time follow (stale ones made heavy boxes diverge)."""
    tw = Twin(robot, scene=SCENE)
    heavy = Twin(robot, scene=SCENE.replace('mass="0.2"', 'mass="0.6"'))
    tw.set_parameter('body/box_0/mass', 0.6)
    b = tw.model.body('object/box_0').id
    adr = tw.model.jnt_dofadr[tw.model.joint('object/box_0').id]
    for field in ('dof_M0', 'dof_invweight0'):
        np.testing.assert_allclose(getattr(tw.model, field)[adr:adr + 6],
                                   getattr(heavy.model, field)[adr:adr + 6], rtol=1e-6)
    np.testing.assert_allclose(tw.model.body_invweight0[b], heavy.model.body_invweight0[b],
                               rtol=1e-6)
    np.testing.assert_allclose(tw.model.body_mass[b], 0.6)


def test_step_held_equals_single_steps_and_keeps_latency(robot):
    """Holding a reference through step_held gives the same state as stepping one at a time,
    including the latency queue's transition from the old reference to the new one."""
    a, b = Twin(robot, scene=SCENE), Twin(robot, scene=SCENE)
    for tw in (a, b):
        tw.set_parameter('global/command_latency', 0.02)
        tw.reset(q0=HOME)
    target = HOME + 0.05
    for _ in range(300):
        a.step(target)
    b.step_held(300, target)
    np.testing.assert_allclose(b.data.qpos, a.data.qpos, atol=1e-9)
    np.testing.assert_allclose(b.data.time, a.data.time)


def test_restore_brings_back_every_model_array_a_parameter_set_changed(robot):
    """Twin.snapshot / restore (closed-loop training sets each episode's randomised sample on
    a shared twin and restores it): every model array comes back bit for bit, a centre of
    mass offset's collision bounding boxes and fast-path flags included (left shifted, they
    piled up and the twin missed contacts: a randomised push_to_pose policy scored 10-30% in
    the identified twin, 90-100% on the cell)."""
    tw = Twin(robot, scene=SCENE)

    def arrays():
        m = tw.model
        return {k: getattr(m, k).copy() for k in dir(m)
                if not k.startswith('_') and isinstance(getattr(m, k), np.ndarray)}
    before = arrays()
    latency, gc = tw.latency, tw.gravity_compensation
    saved = tw.snapshot()
    for sample in ({'body/box_0/com_offset_x': 0.01, 'body/box_0/com_offset_y': -0.008,
                    'body/box_0/mass': 0.6, 'geom/box_0/friction': 0.3,
                    'global/command_latency': 0.02, 'global/gravity_compensation': 0.5},
                   {'body/box_0/com_offset_x': -0.012, 'body/box_0/mass': 0.2,
                    f'joint/{robot.joint_names[0]}/damping': 3.0}):
        tw.set_parameters(sample)
        assert not np.array_equal(tw.model.bvh_aabb, before['bvh_aabb'])
        tw.restore(saved)
    after = arrays()
    assert [k for k in before if not np.array_equal(before[k], after[k])] == []
    assert (tw.latency, tw.gravity_compensation) == (latency, gc)
