"""System identification against the emulated cell: hidden joint damping, latency, gravity comp.

The "recorded" data is the emulated cell's noisy joint-state view during multi-sine probes;
the twin starts from the URDF's nominal values and must recover the hidden truth.
"""
import dataclasses

import numpy as np
import pytest

from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
from real2sim2real_ros.core.emulated_world import EmulatedWorld
from real2sim2real_ros.core.evaluation.identification import record_probe
from real2sim2real_ros.core.parameters import (
    InvalidBoundsError,
    ParameterSet,
    ParameterSpec,
    UnknownParameterError,
    load_parameter_specs,
)
from real2sim2real_ros.core.sysid.fit import NotConvergedError, Recording, identify
from real2sim2real_ros.core.sysid.probes import ProbeError, multisine_probe
from real2sim2real_ros.core.sysid.report import write_report
from real2sim2real_ros.core.twin import Twin, UnstableTwinError

URDF_DAMPING = np.array([0.5, 0.5, 0.5, 0.1, 0.1, 0.1])


def make_cell(damping_scale, latency, seed):
    """Default cell, arm only, with hidden damping / latency; friction loss and armature as
    the URDF says (known here), gravity compensation 0.97 (to be identified)."""
    spec = load_cell_spec(default_cell_spec_path())
    robot = dataclasses.replace(
        spec.robot, joint_damping=tuple(URDF_DAMPING * damping_scale), command_latency=latency,
        joint_frictionloss=(0.3, 0.3, 0.3, 0.05, 0.05, 0.05),
        armature=(0.1, 0.1, 0.1, 0.02, 0.02, 0.02))
    return dataclasses.replace(spec, robot=robot, objects=(), cameras=(), seed=seed)


def record(world, probe, period=0.002, settle=0.3) -> Recording:
    """Execute ``probe`` on the emulated cell from its reset state; record its noisy joint
    positions (the harness's recorder)."""
    world.reset()
    return record_probe(world, probe, period, settle)


def twin_for(robot, spec):
    """Nominal twin; the servo gains are the controller's configuration (known)."""
    names = robot.joint_names
    gains = {f'actuator/{n}/kp': spec.robot.kp[i] for i, n in enumerate(names)}
    gains.update({f'actuator/{n}/kv': spec.robot.kv[i] for i, n in enumerate(names)})
    return Twin(robot, parameters=gains)


def declared(twin):
    specs = [ParameterSpec(f'joint/{n}/damping', d, 0.0, 4 * d)
             for n, d in zip(twin.joint_names, URDF_DAMPING)]
    specs.append(ParameterSpec('global/command_latency', 0.01, 0.0, 0.06, scale=0.01))
    specs.append(ParameterSpec('global/gravity_compensation', 1.0, 0.8, 1.1, scale=0.1))
    return specs


def run_case(robot, seed):
    rng = np.random.default_rng(seed)
    scale = rng.uniform(0.5, 2.0, 6)
    latency = float(rng.integers(0, 41)) / 1000.0   # the cell's queue has 1 ms resolution
    spec = make_cell(scale, latency, seed)
    world = EmulatedWorld(spec)
    center = np.asarray(spec.robot.initial_positions)
    probes = [multisine_probe(robot.joint_names, center, robot.lower, robot.upper,
                              robot.velocity_limits, duration=2.5, amplitude=0.4,
                              velocity_fraction=0.6, seed=s)
              for s in range(3)]
    recs = [record(world, p) for p in probes]
    twin = twin_for(robot, spec)
    fit = identify(twin, declared(twin), recs[:2], heldout=recs[2:], nthread=2)
    return spec, world, twin, fit, recs


@pytest.fixture(scope='module', params=[11, 23])
def case(request, robot):
    return run_case(robot, request.param)


def test_identifies_hidden_parameters_with_honest_intervals(case):
    spec, world, _, fit, _ = case
    truth = spec.hidden_truth(list(world.joint_names))
    covered, checked = 0, 0
    for est in fit.parameters:
        t = truth[est.name]
        covered += est.contains(t)
        rel_half = est.half_width / max(abs(est.value), 1e-9)
        if est.name == 'global/command_latency':
            assert abs(est.value - t) <= max(0.1 * t, 0.001), (est, t)   # 1 ms at zero
        elif rel_half <= 0.10:    # identifiable from these probes: within 10 %
            checked += 1
            assert abs(est.value - t) <= 0.10 * t, (est, t)
        assert est.identified, est
    assert checked >= 5            # most parameters are identifiable from 2 probes
    assert covered / len(fit.parameters) >= 0.85, [(e, truth[e.name]) for e in fit.parameters]


def test_residual_and_heldout_error_drop(case):
    _, _, _, fit, _ = case
    noise = 0.0002
    assert fit.residual_after < 1.2 * noise < fit.residual_before
    assert fit.heldout_error_after <= 0.3 * fit.heldout_error_before
    assert fit.heldout_error_after < 1.2 * noise
    assert fit.wall_time < 30


def test_report_png_and_parameter_set_round_trip(case, tmp_path):
    spec, world, twin, fit, recs = case
    priors = {s.name: s.prior for s in declared(twin)}
    png = write_report(tmp_path / 'report.png', twin, fit, recs[2], priors,
                       truth=spec.hidden_truth(list(world.joint_names)))
    assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n' and png.stat().st_size > 10_000
    for suffix in ('.yaml', '.json'):
        back = ParameterSet.load(fit.parameters.save(tmp_path / f'set{suffix}'))
        assert back.values() == fit.parameters.values()
        assert back['global/command_latency'].upper_95 == \
            fit.parameters['global/command_latency'].upper_95


@pytest.fixture(scope='module')
def short_recording(robot):
    spec = make_cell(np.ones(6), 0.01, 3)
    world = EmulatedWorld(spec)
    probe = multisine_probe(robot.joint_names, np.asarray(spec.robot.initial_positions),
                            robot.lower, robot.upper, robot.velocity_limits, duration=1.5,
                            seed=5)
    return spec, record(world, probe)


def test_bad_input_errors(robot, short_recording):
    spec, rec = short_recording
    twin = twin_for(robot, spec)
    with pytest.raises(UnknownParameterError, match='joint/no_such_joint/damping'):
        identify(twin, [ParameterSpec('joint/no_such_joint/damping', 0.5, 0, 1)], [rec])
    with pytest.raises(InvalidBoundsError, match='exclude the prior'):
        ParameterSpec('joint/elbow_joint/damping', 0.5, 0.6, 1.0)
    with pytest.raises(InvalidBoundsError, match='joint/elbow_joint/damping'):
        load_parameter_specs([{'name': 'joint/elbow_joint/damping', 'prior': 2.0,
                               'lower': 0.0, 'upper': 1.0}])
    with pytest.raises(NotConvergedError, match='did not converge in 1 iterations'):
        identify(twin, declared(twin), [rec], max_iter=1, method='least_squares')
    unstable = Twin(robot, timestep=0.1, parameters={'actuator/wrist_3_joint/kp': 1e6,
                                                     'joint/wrist_3_joint/armature': 0.0})
    with pytest.raises(UnstableTwinError, match='unstable at the priors'):
        identify(unstable, declared(unstable), [rec])


def test_probe_respects_limits(robot):
    center = np.asarray([0.0, -1.5708, 1.5708, 1.5708, 0.0, 0.0])
    p = multisine_probe(robot.joint_names, center, robot.lower, robot.upper,
                        robot.velocity_limits, duration=3.0, velocity_fraction=0.3, seed=1)
    assert np.all(np.abs(p.velocities) <= 0.3 * robot.velocity_limits + 1e-6)
    assert np.all(p.positions >= robot.lower) and np.all(p.positions <= robot.upper)
    np.testing.assert_allclose(p.positions[-1], center, atol=1e-9)   # ends at rest
    assert np.all(np.ptp(p.positions, axis=0) > 0.05)                 # every joint moves
    upper = robot.upper.copy()
    upper[2] = center[2]
    with pytest.raises(ProbeError, match='elbow_joint'):
        multisine_probe(robot.joint_names, center, robot.lower, upper, robot.velocity_limits)


# ---------------------------------------------------------------- regression and fit checks

def arm_config_and_cell(objects=()):
    """The identification config's 20 arm parameters, the default cell (its hidden truth)
    with ``objects`` on the table instead of its own."""
    from real2sim2real_ros.core.evaluation.identification import identification_config_path
    from real2sim2real_ros.core.sysid.config import load_identification_config
    conf = load_identification_config(identification_config_path())
    spec = load_cell_spec(default_cell_spec_path())
    return conf, dataclasses.replace(spec, objects=tuple(objects), cameras=())


def default_cell_fit(robot, objects=(), probes=2, method='regression'):
    conf, spec = arm_config_and_cell(objects)
    world = EmulatedWorld(spec)
    center = np.asarray(spec.robot.initial_positions)
    recs = [record(world, multisine_probe(robot.joint_names, center, robot.lower, robot.upper,
                                          robot.velocity_limits, duration=4.0, amplitude=0.35,
                                          velocity_fraction=0.5, seed=s))
            for s in range(probes)]
    twin = Twin(robot, parameters=conf.start_values())   # gains: the controller config
    fit = identify(twin, conf.specs, recs, method=method)
    return fit, spec.hidden_truth(list(world.joint_names))


def test_regression_alone_recovers_the_arm_and_reports_its_excitation(robot):
    """The regression without the rollout polish on the default cell (20 parameters, 2 x 4 s
    at 500 Hz): latency, gravity compensation and the armatures come out of the regression
    itself (measured: latency and gravity compensation within 1%, armatures 5-8% high);
    damping and friction loss are only the polish's start (measured 3-27% off)."""
    fit, truth = default_cell_fit(robot)
    assert fit.method == 'regression' and fit.warnings == [], fit.warnings
    est = {e.name: e for e in fit.parameters}
    assert abs(est['global/command_latency'].value - truth['global/command_latency']) < 3e-4
    assert abs(est['global/gravity_compensation'].value - 0.97) < 0.005
    for name, e in est.items():
        if name.endswith('/armature'):
            assert abs(e.value - truth[name]) <= 0.12 * truth[name], (name, e.value)
    assert 5 < fit.diagnostics['condition_number'] < 1e3
    assert fit.residual_after < 1.2 * truth['global/joint_state_noise_std']
    assert fit.diagnostics['spikes'] == [] and fit.diagnostics['at_bound'] == []


def test_lost_joint_states_do_not_look_like_a_contact(robot):
    """Joint states lost on a loaded PC (the live identification at load 4: 0.24 s and
    0.04 s gaps in one probe's stream): the regression filters each gap-free run on its own,
    so a gap is no torque spike (differentiated across, the 0.24 s gap gave 105 N m on
    shoulder_pan, the fit called it a contact and pinned that damping at a bound) and the
    estimates stay those of the whole recordings."""
    conf, spec = arm_config_and_cell()
    world = EmulatedWorld(spec)
    center = np.asarray(spec.robot.initial_positions)
    recs = [record(world, multisine_probe(robot.joint_names, center, robot.lower, robot.upper,
                                          robot.velocity_limits, duration=4.0, amplitude=0.35,
                                          velocity_fraction=0.5, seed=s))
            for s in range(2)]
    full = identify(Twin(robot, parameters=conf.start_values()), conf.specs, recs,
                    method='regression')
    t = recs[0].times
    kept = ~(((t > 1.0) & (t < 1.24)) | ((t > 2.5) & (t < 2.54)))
    recs[0] = dataclasses.replace(recs[0], times=t[kept], positions=recs[0].positions[kept])
    gapped = identify(Twin(robot, parameters=conf.start_values()), conf.specs, recs,
                      method='regression')
    assert gapped.diagnostics['spikes'] == [] and gapped.warnings == [], gapped.warnings
    assert all(e.identified for e in gapped.parameters)
    for e in gapped.parameters:
        ref = full.parameters[e.name]
        assert abs(e.value - ref.value) <= 0.05 * abs(ref.value) + 1e-4, (e.name, e.value,
                                                                           ref.value)


def test_contact_contaminated_fit_is_reported_and_not_used(robot):
    """A 3 kg block under the tool (the probes strike it): the regression's residual spikes
    at the contacts, the fit says so, skips the polish and marks every estimate not
    identified (sim_server keeps the priors)."""
    conf, spec = arm_config_and_cell()
    block = dataclasses.replace(load_cell_spec(default_cell_spec_path()).objects[0],
                                id='block', size=(0.25, 0.3, 0.12), xyz=(0.42, 0.0, 0.06),
                                mass=3.0, yaw=0.0, com_offset=(0.0, 0.0, 0.0),
                                edge_radius=0.0)
    fit, _ = default_cell_fit(robot, objects=[block], probes=1, method='auto')
    assert fit.method == 'regression'
    assert fit.diagnostics['polish']['note'].startswith('skipped: residual spikes')
    spikes = fit.diagnostics['spikes']
    assert len(spikes) >= 3 and max(s['peak_sigma'] for s in spikes) > 20
    assert any('contact' in w for w in fit.warnings), fit.warnings
    assert not any(e.identified for e in fit.parameters)


def test_estimate_pinned_at_a_bound_is_reported(robot, short_recording):
    """Bounds that exclude the truth (damping 0.5): the estimate sits at the upper bound,
    the fit warns and the estimate is not identified."""
    spec, rec = short_recording
    twin = twin_for(robot, spec)
    specs = declared(twin)
    specs[0] = ParameterSpec('joint/shoulder_pan_joint/damping', 0.1, 0.0, 0.2)
    fit = identify(twin, specs, [rec], method='regression')
    est = fit.parameters['joint/shoulder_pan_joint/damping']
    assert est.value == pytest.approx(0.2, abs=1e-3) and not est.identified
    assert fit.diagnostics['at_bound'] == ['joint/shoulder_pan_joint/damping']
    assert any('pinned at its upper bound' in w for w in fit.warnings), fit.warnings


def test_planned_condition_number_flags_a_probe_that_leaves_joints_still(robot):
    """The excitation measure before moving: the default probes give a well-conditioned
    regressor (measured 3.2-3.5 over 8 seed pairs, so no seed selection is needed); a probe
    that moves only the shoulder leaves five joints' columns empty."""
    from real2sim2real_ros.core.sysid.regression import planned_condition_number
    center = np.asarray([0.0, -1.5708, 1.5708, 1.5708, 0.0, 0.0])
    twin = Twin(robot)

    def probes(joints=None):
        return [multisine_probe(robot.joint_names, center, robot.lower, robot.upper,
                                robot.velocity_limits, duration=2.0, amplitude=0.35,
                                velocity_fraction=0.5, seed=s, joints=joints)
                for s in range(2)]
    assert planned_condition_number(twin, probes(), center) < 10
    assert planned_condition_number(twin, probes(['shoulder_pan_joint']), center) > 1e6


def test_only_a_regression_the_data_rule_out_falls_back_to_the_rollout_fit(robot, monkeypatch,
                                                                         short_recording):
    """A bug inside the regression path surfaces; only RegressionNotPossible (data or specs
    the regression cannot use) falls back, and the result says so."""
    from real2sim2real_ros.core.sysid import fit as fit_module
    from real2sim2real_ros.core.sysid.regression import RegressionNotPossible
    spec, rec = short_recording
    twin = twin_for(robot, spec)
    specs = [ParameterSpec('joint/elbow_joint/damping', 0.5, 0.0, 2.0)]

    def broken(*_a, **_k):
        raise ValueError('operands could not be broadcast together')
    monkeypatch.setattr(fit_module, '_regression_fit', broken)
    with pytest.raises(ValueError, match='could not be broadcast'):
        identify(twin, specs, [rec])

    def not_possible(*_a, **_k):
        raise RegressionNotPossible('too few samples')
    monkeypatch.setattr(fit_module, '_regression_fit', not_possible)
    fit = identify(twin, specs, [rec])
    assert fit.method == 'least_squares'
    assert any('regression not possible (too few samples)' in w for w in fit.warnings)
