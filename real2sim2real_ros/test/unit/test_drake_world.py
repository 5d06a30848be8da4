"""The emulated cell on Drake: the same controller and sensors as the MuJoCo cell, another
model class (static above dynamic friction, hydroelastic contact)."""
import copy
import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from real2sim2real_ros.core.cell_spec import CellSpecError, load_cell_spec
from real2sim2real_ros.core.drake_world import DrakeWorld
from real2sim2real_ros.core.emulated_world import EmulatedWorld, WorldBuildError
from real2sim2real_ros.core.joint_trajectory import JointTrajectoryCommand
from real2sim2real_ros.core.world import CellWorld, make_world

CELLS = Path(__file__).resolve().parents[2] / 'config' / 'cells'
DRAKE = yaml.safe_load((CELLS / 'drake_default.yaml').read_text())
G = 9.81


def _data(**changes):
    data = copy.deepcopy(DRAKE)
    data.update(changes)
    return data


@pytest.fixture(scope='module')
def box_world():
    """The Drake default cell with only the box and no camera (fast)."""
    w = make_world(load_cell_spec(_data(cameras=[], objects=DRAKE['objects'][:1])))
    yield w
    w.close()


def test_factory_picks_the_engine_from_the_spec(box_world):
    assert isinstance(box_world, DrakeWorld) and isinstance(box_world, CellWorld)
    assert box_world.timestep == pytest.approx(0.001)
    mj = make_world(dataclasses.replace(box_world.spec, engine='mujoco'))
    assert isinstance(mj, EmulatedWorld) and isinstance(mj, CellWorld)
    assert mj.joint_names == box_world.joint_names
    assert load_cell_spec(CELLS / 'default.yaml').engine == 'mujoco'   # the default
    truth = box_world.spec.hidden_truth()
    assert truth['geom/box_0/static_friction'] == pytest.approx(0.55 * 1.3)
    assert truth['geom/box_0/friction'] == pytest.approx(0.55)          # the dynamic one


def _track(world):
    """Quintic move of 0.3 rad on every joint in 1 s; |q - reference delayed by the latency|
    during the move (worst, per joint) and |q - target| after 0.3 s more."""
    world.reset()
    q0 = world.true_joint_positions()
    target = q0 + 0.3 * np.array([1, -1, 1, -1, 1, 1])
    zeros = np.zeros(6)
    world.set_trajectory(JointTrajectoryCommand.from_points(
        world.joint_names, [(1.0, target, zeros, zeros)]))
    lag = world.spec.robot.command_latency
    ref = world.follower._active
    worst = np.zeros(6)
    while world.time < 1.0 + lag - 1e-9:
        world.step_for(0.01)
        worst = np.maximum(worst, np.abs(world.true_joint_positions()
                                         - ref.sample(world.time - lag)[0]))
    world.step_for(0.3)
    return worst, float(np.abs(world.true_joint_positions() - target).max())


def test_tracks_a_trajectory_like_the_mujoco_cell(box_world):
    """Same servo, latency and trajectory on both engines. Measured: worst 1.9 mrad (Drake)
    vs 1.6 mrad (MuJoCo), final 0.25 mrad on both."""
    worst_d, final_d = _track(box_world)
    mj = EmulatedWorld(box_world.spec)
    worst_m, final_m = _track(mj)
    assert worst_d.max() < 4e-3, worst_d
    assert final_d < 1e-3, final_d
    # Comparable: within 1 mrad of the MuJoCo cell's on every joint.
    assert np.all(np.abs(worst_d - worst_m) < 1e-3), (worst_d, worst_m)
    assert abs(final_d - final_m) < 5e-4
    assert box_world.trajectory_done()


def test_box_slides_stops_and_sticks_below_static_friction(box_world):
    """Dynamic friction mu_d = friction[0] decelerates a sliding box (stop distance
    v^2 / (2 mu_d g)); static friction r mu_d holds it: a force of 0.9 r mu_d m g moves a box
    at rest < 0.5 mm, while the same force keeps an already sliding box accelerating at
    (0.9 r - 1) mu_d g (static above dynamic: MuJoCo's one coefficient cannot do this)."""
    w = box_world
    spec = w.spec
    obj = spec.object('box_0')
    mu, r = obj.friction[0], spec.drake.static_friction_ratio
    assert r > 1.1

    def run(force_frac, v0, duration=0.3):
        w.reset()
        w.step_for(0.05)
        w.set_object_force('box_0', [0.0, force_frac * r * mu * obj.mass * G, 0.0])
        p0 = w.object_poses()['box_0'][0]
        if v0:
            w.push_object('box_0', [0.0, v0])
        w.step_for(duration)
        p1 = w.object_poses()['box_0'][0]
        v = w.plant.EvalBodySpatialVelocityInWorld(w._plant_context, w._bodies['box_0'])
        return p1 - p0, np.array(v.translational())

    dp, v = run(0.0, 0.5)
    assert dp[1] == pytest.approx(0.5 ** 2 / (2 * mu * G), rel=0.1)     # 23.2 mm
    assert abs(v[1]) < 1e-3                                              # stopped
    dp, v = run(0.9, 0.0)
    assert abs(dp[1]) < 5e-4, dp                                         # sticks
    dp, v = run(1.1, 0.0)
    assert dp[1] > 0.05                                                  # breaks away
    dp, v = run(0.9, 0.3)
    assert v[1] == pytest.approx(0.3 + (0.9 * r - 1) * mu * G * 0.3, rel=0.1)
    w.reset()
    assert not np.any(w.plant.get_applied_spatial_force_input_port().Eval(
        w._plant_context))                                              # reset removes it


def test_joint_states_carry_noise_and_latency(box_world):
    w = box_world
    w.reset()
    std = w.spec.robot.joint_state_noise_std
    errs = []
    for _ in range(200):
        w.step_for(w.timestep)
        errs.append(w.joint_positions() - w.true_joint_positions())
    assert np.std(errs) == pytest.approx(std, rel=0.2)
    np.testing.assert_array_equal(w.joint_positions(), w.joint_positions())
    q0 = w.true_joint_positions()
    target = q0.copy()
    target[0] += 0.05
    t0 = w.time
    w.set_trajectory(JointTrajectoryCommand.from_points(w.joint_names, [(w.timestep, target)]))
    latency = w.spec.robot.command_latency
    changed_at = moved_at = None
    while w.time < t0 + 0.05:
        w.step_for(w.timestep)
        if changed_at is None and w.actuator_setpoint()[0] > q0[0] + 0.04:
            changed_at = w.time
        if moved_at is None and w.true_joint_positions()[0] > q0[0] + 1e-4:
            moved_at = w.time
    assert changed_at - t0 == pytest.approx(latency + w.timestep, abs=w.timestep + 1e-9)
    assert moved_at >= t0 + latency
    assert w.controller_state()['reference_positions'][0] == pytest.approx(target[0])


def test_a_run_noise_seed_redraws_the_drake_cells_sensor_noise():
    """As on the MuJoCo cell (world.sensor_noise_streams): the spec's seed alone repeats the
    noise, a run's noise_seed draws other noise."""
    spec = load_cell_spec(_data(cameras=[], objects=DRAKE['objects'][:1]))

    def draws(noise_seed):
        w = make_world(spec, noise_seed=noise_seed)
        try:
            assert w.noise_seed == noise_seed
            out = []
            for _ in range(10):
                w.step_for(w.timestep)
                out.append(w.joint_positions() - w.true_joint_positions())
            return np.array(out)
        finally:
            w.close()
    base = draws(None)
    np.testing.assert_array_equal(base, draws(None))
    assert np.abs(draws(4) - base).max() > 1e-6


def test_depth_renders_with_the_spec_intrinsics():
    """The box's top centre, projected with the spec's intrinsics and pose, reads its camera
    depth (clean, +-3 mm); the clean depth equals the MuJoCo cell's pixel by pixel (median
    < 0.5 mm: same intrinsics, principal point convention and extrinsics); the noisy depth
    has the spec's noise (holes, sigma at ~1 m); ``rgb=False`` gives the same depth alone."""
    spec = load_cell_spec(_data(objects=DRAKE['objects'][:1]))
    w = make_world(spec)
    try:
        cam = spec.cameras[0]
        rgb, depth = w.render(cam.name, noise=False)
        assert rgb.shape == (cam.height, cam.width, 3) and rgb.dtype == np.uint8
        assert depth.shape == (cam.height, cam.width) and depth.dtype == np.float32
        obj = spec.object('box_0')
        top = np.asarray(obj.xyz) + [0.0, 0.0, obj.half_height]
        p = cam.rotation_matrix.T @ (top - np.asarray(cam.position))
        u, v = w.intrinsics(cam.name).project(p[None])[0]
        assert depth[int(round(v)), int(round(u))] == pytest.approx(p[2], abs=3e-3)
        r, _, b = rgb[int(round(v)), int(round(u))].astype(int)
        assert r > b + 40, (r, b)                   # the box's orange, not the table's
        mj = EmulatedWorld(spec)
        try:
            _, mj_depth = mj.render(cam.name, noise=False)
            # Depth alone (what the cell node renders for a depth-only reader): the same image.
            for world, full in ((w, depth), (mj, mj_depth)):
                _, no_rgb, alone = world.render_with_time(cam.name, noise=False, rgb=False)
                assert no_rgb is None
                np.testing.assert_array_equal(alone, full)
        finally:
            mj.close()
        both = np.isfinite(depth) & np.isfinite(mj_depth)
        assert both.mean() > 0.95
        assert np.median(np.abs(depth - mj_depth)[both]) < 5e-4
        _, noisy = w.render(cam.name)
        holes = np.isnan(noisy).mean()
        assert 0.002 < holes < 0.05, holes
        flat = np.isfinite(noisy) & np.isfinite(depth) & (np.abs(depth - 1.0) < 0.1)
        sigma = np.std((noisy - depth)[flat])
        expect = 1.0 ** 2 * cam.depth_noise.subpixel_std / (cam.depth_noise.focal_px
                                                             * cam.depth_noise.baseline)
        assert sigma == pytest.approx(expect, rel=0.35), (sigma, expect)
    finally:
        w.close()


def test_mujoco_renders_after_a_drake_camera_is_destroyed():
    """Drake's VTK engine terminates the process's EGL display when it goes; a MuJoCo cell
    created afterwards (the harness, the suite) must still render (core/offscreen.py)."""
    spec = load_cell_spec(_data(objects=DRAKE['objects'][:1]))
    first = EmulatedWorld(spec)      # MuJoCo holds the process's EGL display from here on
    try:
        first.render(spec.cameras[0].name, noise=False)
    finally:
        first.close()
    w = make_world(spec)
    w.render(spec.cameras[0].name, noise=False)
    w.close()                        # Drake's engine goes, and eglTerminate with it
    mj = EmulatedWorld(spec)
    try:
        _, depth = mj.render(spec.cameras[0].name, noise=False)
    finally:
        mj.close()
    assert np.isfinite(depth).mean() > 0.95


@pytest.mark.parametrize('field, value, message', [
    ('contact_model', 'mujoco', r"drake\.contact_model: must be one of"),
    ('hydroelastic_modulus', -1.0, r'drake\.hydroelastic_modulus: must be >='),
    ('hunt_crossley_dissipation', 'high', r'drake\.hunt_crossley_dissipation: must be a number'),
    ('static_friction_ratio', 0.8, r'drake\.static_friction_ratio: must be >= 1'),
    ('stiffness', 1.0, r'drake\.stiffness: unknown field'),
])
def test_bad_drake_fields_are_named(field, value, message):
    with pytest.raises(CellSpecError, match=message):
        load_cell_spec(_data(drake={field: value}))


def test_bad_engine_and_unrepresentable_friction_are_named():
    with pytest.raises(CellSpecError, match=r"engine: must be one of \['mujoco', 'drake'\]"):
        load_cell_spec(_data(engine='bullet'))
    data = _data(cameras=[], objects=copy.deepcopy(DRAKE['objects'][:1]))
    data['objects'][0]['friction'] = [1.6, 0.005, 0.0001]    # > 2 x the table's 0.75
    with pytest.raises(WorldBuildError, match=r'objects\[0\]\.friction\[0\]'):
        make_world(load_cell_spec(data))


def test_only_the_factory_reads_the_engine():
    """The engine is hidden truth: no module but core/world.py (and the spec itself) reads
    ``spec.engine`` (drawing a cell may write one; only the factory may branch on it)."""
    pkg = Path(__file__).resolve().parents[2] / 'real2sim2real_ros'
    readers = [str(p.relative_to(pkg)) for p in pkg.rglob('*.py')
               if re.search(r'\.engine\b', p.read_text())]
    assert sorted(readers) == ['core/cell_spec.py', 'core/world.py'], readers
