"""The model-class gap (``python -m real2sim2real_ros.bench model_gap``): how far the MuJoCo
twin, given a cell's TRUE values, is from the cell, on the same probes, per cell engine.

For each cell spec (default: the shipped MuJoCo default cell and its Drake twin
``drake_default``, same arm, table, objects and values):

* **arm**: two multisine probes (4 s, 35% of the range, half the velocity limits) executed on
  the emulated cell (``core.world.make_world``: MuJoCo or Drake), then replayed in the MuJoCo
  twin with the cell's true arm values (servo gains, damping, friction loss, armature,
  latency, gravity compensation): the joint error (mrad, RMS and max per probe) is what a
  perfect identification within MuJoCo would leave. Then the arm fit (``identify``, method
  ``auto``) on the same recordings: its "effective" values beside the truth.
* **objects**: ``object_id_bench.run_object_identification`` on that cell (2 arm probes, 3
  strike probes planned from the tracked poses, the last held out; tracker = the cell's poses
  + 2.5 mm / 1 deg noise at 15 Hz): the held-out strike's rest position error with the prior,
  with the identified values, and with the objects' TRUE values (the floor set by the
  model class), in mm; the identified friction beside the cell's dynamic and (Drake) static
  coefficients.

A bench, not a stage: it reads the cells' truth to score, as the evaluator does. Writes
``bench_results/model_gap.json``.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..core.cell_spec import default_cell_spec_path, load_cell_spec
from ..core.robot_description import default_cell_urdf, load_robot
from ..core.sysid.fit import identify
from ..core.sysid.probes import multisine_probe
from ..core.world import make_world
from . import object_id_bench as oib

ARM_KEYS = ('damping', 'frictionloss', 'armature')


def arm_truth(spec, names) -> dict:
    """The cell's true arm values in the twin's parameter names."""
    truth = spec.hidden_truth(list(names))
    keep = {k: v for k, v in truth.items()
            if (k.startswith('joint/') and k.rsplit('/', 1)[1] in ARM_KEYS)
            or k.startswith('actuator/')}
    keep['global/command_latency'] = truth['global/command_latency']
    keep['global/gravity_compensation'] = truth['global/gravity_compensation']
    return keep


def arm_gap(robot, spec, duration: float = 4.0) -> dict:
    """Arm probes on the cell, replayed in the twin with the true values; then the arm fit."""
    world = make_world(spec)
    world.reset()
    world.step_for(0.3)
    center = np.asarray(spec.robot.initial_positions)
    recs, t0 = [], time.perf_counter()
    for s in range(2):
        p = multisine_probe(robot.joint_names, center, robot.lower, robot.upper,
                            robot.velocity_limits, duration=duration, amplitude=0.35,
                            velocity_fraction=0.5, seed=s, name=f'arm_{s}')
        rec, _ = oib.execute_probe(world, p, after=0.5)
        recs.append(rec)
    execute_s = time.perf_counter() - t0
    world.close()
    truth = arm_truth(spec, robot.joint_names)
    twin = oib.arm_twin(robot, spec, None)
    replay = []
    for rec in recs:
        res = twin.rollout(rec.q0, rec.qd0, rec.traj_times, rec.traj_positions,
                           param_samples=[truth], traj_velocities=rec.traj_velocities,
                           reference_start=rec.reference_start, sample_times=rec.times)
        err = res.positions[0] - rec.positions
        replay.append({'probe': rec.name,
                       'rms_mrad': float(1e3 * np.sqrt(np.mean(err ** 2))),
                       'max_mrad': float(1e3 * np.max(np.abs(err))),
                       'rms_per_joint_mrad': [float(v) for v in
                                              1e3 * np.sqrt(np.mean(err ** 2, axis=0))]})
    specs = oib.arm_specs(twin)
    t0 = time.perf_counter()
    fit = identify(twin, specs, recs[:1], heldout=recs[1:], nthread=2)
    fit_s = time.perf_counter() - t0
    estimates = []
    for e in fit.parameters:
        t = truth.get(e.name)
        estimates.append({'name': e.name, 'truth': t, 'value': e.value, 'prior': next(
            s.prior for s in specs if s.name == e.name), 'lower_95': e.lower_95,
            'upper_95': e.upper_95,
            'error': None if not t else (e.value - t) / t})
    return {'execute_s': execute_s, 'fit_s': fit_s, 'replay_true_values': replay,
            'fit_method': getattr(fit, 'method', None),
            'heldout_rms_mrad_prior': float(1e3 * fit.heldout_error_before),
            'heldout_rms_mrad_after': float(1e3 * fit.heldout_error_after),
            'estimates': estimates}


def object_gap(robot, spec) -> dict:
    """The strike identification on the cell: held-out rest errors (prior, identified, true
    values) and the identified friction beside the cell's coefficients."""
    world = make_world(spec)
    t0 = time.perf_counter()
    case = oib.run_object_identification(robot, spec, world=world, progress=None)
    wall = time.perf_counter() - t0
    world.close()
    f = case.object_fit
    rows = oib.summarize(case)
    truth = spec.hidden_truth(list(robot.joint_names))
    friction = []
    for r in rows:
        if r['name'].endswith('/friction'):
            oid = r['name'].split('/')[1]
            friction.append({'object': oid, 'identified': r['identified'],
                             'value': r['value'], 'lower_95': r['lower_95'],
                             'upper_95': r['upper_95'], 'dynamic_truth': r['truth'],
                             'static_truth': truth.get(f'geom/{oid}/static_friction')})
    return {'wall_s': wall,
            'heldout_rest_prior_mm': 1e3 * f.heldout_error_before,
            'heldout_rest_identified_mm': 1e3 * f.heldout_error_after,
            'heldout_rest_true_values_mm': 1e3 * f.heldout_error_reference,
            'heldout_joint_prior_mrad': 1e3 * f.heldout_joint_before,
            'heldout_joint_identified_mrad': 1e3 * f.heldout_joint_after,
            'friction': friction,
            'rows': rows}


def main(cells=('default', 'drake_default')) -> dict:
    robot = load_robot(default_cell_urdf())
    out = {}
    for name in cells:
        spec = load_cell_spec(str(Path(default_cell_spec_path()).parent / f'{name}.yaml'))
        print(f'cell {name} (engine {spec.engine})')
        arm = arm_gap(robot, spec)
        for r in arm['replay_true_values']:
            print(f"  arm {r['probe']} replayed with the true values: RMS "
                  f"{r['rms_mrad']:.3f} mrad, max {r['max_mrad']:.3f} mrad")
        worst = max((abs(e['error']) for e in arm['estimates'] if e['error'] is not None
                     and not e['name'].endswith('command_latency')), default=float('nan'))
        print(f"  arm fit ({arm['fit_s']:.1f} s): worst relative error {worst:.1%}")
        obj = object_gap(robot, spec)
        print(f"  held-out strike rest error: prior {obj['heldout_rest_prior_mm']:.1f} mm, "
              f"identified {obj['heldout_rest_identified_mm']:.1f} mm, true values "
              f"{obj['heldout_rest_true_values_mm']:.1f} mm ({obj['wall_s']:.0f} s)")
        for fr in obj['friction']:
            st = '' if fr['static_truth'] is None else f", static {fr['static_truth']:.3f}"
            print(f"    {fr['object']} friction {fr['value']:.3f} [{fr['lower_95']:.3f}, "
                  f"{fr['upper_95']:.3f}] (cell: dynamic {fr['dynamic_truth']:.3f}{st})"
                  f"{'' if fr['identified'] else ' not identified'}")
        out[name] = {'engine': spec.engine, 'arm': arm, 'objects': obj}
    return out
