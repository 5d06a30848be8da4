"""The emulated cell's physics: latency, tracking, sensing noise, objects, rendering."""
import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from real2sim2real_ros.core.cell_spec import load_cell_spec
from real2sim2real_ros.core.emulated_world import EmulatedWorld
from real2sim2real_ros.core.joint_trajectory import JointTrajectoryCommand, TrajectoryError

CELLS = Path(__file__).resolve().parents[2] / 'config' / 'cells'
DEFAULT = yaml.safe_load((CELLS / 'default.yaml').read_text())


@pytest.fixture(scope='module')
def world():
    w = EmulatedWorld(load_cell_spec(CELLS / 'default.yaml'))
    yield w
    w.close()


def test_world_is_built_from_the_spec(world):
    spec = world.spec
    assert world.timestep == pytest.approx(spec.contact.timestep)
    assert len(world.joint_names) == 6 and world.model.nu == 6
    np.testing.assert_allclose(world.model.actuator_gainprm[:, 0], spec.robot.kp)
    np.testing.assert_allclose(world.model.actuator_biasprm[:, 2], -np.asarray(spec.robot.kv))
    # box_0 has rounded edges -> a mesh geom; the cylinder is a primitive.
    import mujoco
    box = world.model.geom('object/box_0')
    cyl = world.model.geom('object/cylinder_0')
    assert box.type[0] == mujoco.mjtGeom.mjGEOM_MESH
    assert cyl.type[0] == mujoco.mjtGeom.mjGEOM_CYLINDER
    body = world.model.body('object/box_0')
    assert body.mass[0] == pytest.approx(0.21)
    np.testing.assert_allclose(body.ipos, spec.object('box_0').com_offset, atol=1e-9)


def test_objects_rest_and_reset(world):
    world.reset()
    world.step_for(0.5)
    for oid, (xyz, _) in world.object_poses().items():
        np.testing.assert_allclose(xyz, world.spec.object(oid).xyz, atol=2e-3)
    world.reset_objects(['box_0'], [((0.5, 0.0, 0.3), (1.0, 0.0, 0.0, 0.0))])
    world.step_for(0.5)                   # dropped from 30 cm: lands on the table
    xyz, _ = world.object_poses()['box_0']
    assert xyz[2] == pytest.approx(world.spec.object('box_0').half_height, abs=3e-3)
    world.reset_objects()
    np.testing.assert_allclose(world.object_poses()['box_0'][0],
                               world.spec.object('box_0').xyz, atol=1e-9)
    with pytest.raises(KeyError, match='no object'):
        world.reset_objects(['sphere_9'])


def test_object_friction_is_the_contact_friction(world):
    """The table's larger friction must not mask an object's (MuJoCo takes the max of equal
    priorities): every resting contact of an object has that object's sliding friction."""
    world.reset()
    world.step_for(0.3)
    m, d = world.model, world.data
    seen = {}
    for c in d.contact[:d.ncon]:
        for g in (c.geom1, c.geom2):
            name = m.geom(g).name
            if name.startswith('object/'):
                seen[name.split('/')[-1]] = c.friction[0]
    assert set(seen) == {'box_0', 'cylinder_0'}
    table = world.spec.table.friction[0]
    for oid, mu in seen.items():
        assert world.spec.object(oid).friction[0] < table
        assert mu == pytest.approx(world.spec.object(oid).friction[0])


def test_command_latency(world):
    """A step in the reference reaches the servos `command_latency` later (+- 1 step)."""
    world.reset()
    world.step_for(0.1)
    q0 = world.true_joint_positions()
    target = q0.copy()
    target[0] += 0.05
    t0 = world.time
    world.set_trajectory(JointTrajectoryCommand.from_points(
        world.joint_names, [(world.timestep, target)]))
    latency = world.spec.robot.command_latency
    changed_at = None
    moved_at = None
    while world.time < t0 + 0.1:
        world.step_for(world.timestep)
        if changed_at is None and world.actuator_setpoint()[0] > q0[0] + 0.04:
            changed_at = world.time
        if moved_at is None and world.true_joint_positions()[0] > q0[0] + 1e-4:
            moved_at = world.time
    assert changed_at - t0 == pytest.approx(latency + world.timestep, abs=world.timestep + 1e-9)
    assert moved_at >= t0 + latency
    # The controller reference itself changes without delay (the latency is in the hardware).
    assert world.controller_state()['reference_positions'][0] == pytest.approx(target[0])


def test_tracks_a_quintic_trajectory(world):
    """Tolerance: |q - reference delayed by the latency| < 0.01 rad during a 1.5 s move of
    0.3 rad on every joint; < 2 mrad after 0.5 s of settling."""
    world.reset()
    q0 = world.true_joint_positions()
    target = q0 + 0.3 * np.array([1, -1, 1, -1, 1, 1])
    zeros = np.zeros(6)
    world.set_trajectory(JointTrajectoryCommand.from_points(
        world.joint_names, [(1.5, target, zeros, zeros)]))
    lag = world.spec.robot.command_latency
    from real2sim2real_ros.core.joint_trajectory import Trajectory
    ref_traj = world.follower._active
    assert isinstance(ref_traj, Trajectory) and ref_traj.kind == 'quintic'
    worst = 0.0
    while world.time < 1.5 + lag:
        world.step_for(0.01)
        ref = ref_traj.sample(world.time - lag)[0]
        worst = max(worst, float(np.abs(world.true_joint_positions() - ref).max()))
    world.step_for(0.5)
    final = np.abs(world.true_joint_positions() - target).max()
    assert worst < 0.01, worst
    assert final < 2e-3, final
    assert world.trajectory_done()
    state = world.controller_state()
    np.testing.assert_allclose(state['error_positions'],
                               state['reference_positions'] - state['feedback_positions'])


def test_rejects_bad_trajectory_and_holds(world):
    world.reset()
    with pytest.raises(TrajectoryError, match='outside limits'):
        world.set_trajectory(JointTrajectoryCommand.from_points(
            world.joint_names, [(1.0, [9.0] * 6)]))
    world.hold()
    q = world.true_joint_positions()
    world.step_for(0.3)
    np.testing.assert_allclose(world.true_joint_positions(), q, atol=2e-3)


def test_joint_state_noise_matches_spec(world):
    world.reset()
    std = world.spec.robot.joint_state_noise_std
    errs = []
    for _ in range(300):
        world.step_for(world.timestep)
        errs.append(world.joint_positions() - world.true_joint_positions())
    assert np.std(errs) == pytest.approx(std, rel=0.2)
    # Every reader sees the same sample until the next step.
    np.testing.assert_array_equal(world.joint_positions(), world.joint_positions())


def _noise_draws(noise_seed, steps=20):
    data = copy.deepcopy(DEFAULT)
    data['cameras'] = []
    w = EmulatedWorld(load_cell_spec(data), noise_seed=noise_seed)
    try:
        draws = []
        for _ in range(steps):
            w.step_for(w.timestep)
            draws.append(w.joint_positions() - w.true_joint_positions())
        return np.array(draws)
    finally:
        w.close()


def test_a_run_noise_seed_redraws_the_sensor_noise_only():
    """The spec's seed alone repeats a run's noise to the bit (every committed result); a
    run's noise_seed draws other noise of the same size, and the same noise_seed repeats."""
    spec_only = _noise_draws(None)
    np.testing.assert_array_equal(spec_only, _noise_draws(None))
    run_2 = _noise_draws(2)
    np.testing.assert_array_equal(run_2, _noise_draws(2))
    assert np.abs(run_2 - spec_only).max() > 1e-6
    assert not np.allclose(run_2, _noise_draws(3))
    # Same size of noise whichever stream draws it.
    assert np.std(run_2) == pytest.approx(np.std(spec_only), rel=0.35)
    with pytest.raises(ValueError, match='noise_seed'):
        _noise_draws(-1, steps=0)
    with pytest.raises(ValueError, match='noise_seed'):
        _noise_draws(1.5, steps=0)


def test_latency_and_timestep_come_from_the_spec():
    data = copy.deepcopy(DEFAULT)
    data['robot']['command_latency'] = 0.0
    data['contact']['timestep'] = 0.002
    data['cameras'] = []
    w = EmulatedWorld(load_cell_spec(data))
    assert w.timestep == pytest.approx(0.002)
    w.step_for(0.02)
    q0 = w.true_joint_positions()
    target = q0.copy()
    target[1] -= 0.05
    w.set_trajectory(JointTrajectoryCommand.from_points(w.joint_names, [(w.timestep, target)]))
    w.step_for(w.timestep)        # the step that samples the start state
    assert w.actuator_setpoint()[1] == pytest.approx(q0[1], abs=1e-3)
    w.step_for(w.timestep)        # no latency: the next step's setpoint is the target
    assert w.actuator_setpoint()[1] == pytest.approx(target[1])
    assert w.step_for(0.011) == 6   # rounded to whole 2 ms steps


def test_render_shapes_and_depth_range(world):
    world.reset()
    rgb, depth = world.render('camera')
    assert rgb.shape == (480, 640, 3) and rgb.dtype == np.uint8
    assert depth.shape == (480, 640) and depth.dtype == np.float32
    valid = np.isfinite(depth)
    assert 0.9 < valid.mean() < 1.0            # holes exist, but few
    # Nearest: the table's near edge / objects (~0.6 m); farthest: the floor beyond the table.
    assert 0.5 < np.nanmin(depth) and np.nanmax(depth) < 3.0
    assert rgb.std() > 10                       # not a blank image


@pytest.mark.parametrize('path', sorted(CELLS.glob('*.yaml')), ids=lambda p: p.stem)
def test_every_shipped_cell_builds_and_settles(path):
    w = EmulatedWorld(load_cell_spec(path))
    q0 = w.true_joint_positions()
    w.step_for(0.3)
    for oid, (xyz, _) in w.object_poses().items():
        np.testing.assert_allclose(xyz, w.spec.object(oid).xyz, atol=3e-3)
    np.testing.assert_allclose(w.true_joint_positions(), q0, atol=5e-3)
