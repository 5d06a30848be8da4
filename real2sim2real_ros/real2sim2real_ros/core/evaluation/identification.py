"""The harness's identification stage: the probes the system_identification node runs, executed
on an in-process emulated cell, fitted with the same core (core/sysid).

Arm: ``arm_probes`` multisine probes about the ready pose (the node's defaults: 0.35 rad,
half the velocity limits). Objects: ``object_strikes`` strikes on the task's object plus one
held out (core/sysid/object_*), observed through the depth tracker; the held-out strike also
scores the arm fit (its joint states). Probe executions in all: ``arm_probes +
object_strikes + 1`` (5 with the defaults).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..joint_trajectory import JointTrajectoryCommand
from ..parameters import ParameterSet
from ..sysid.config import load_identification_config
from ..sysid.fit import Recording, identify
from ..sysid.probes import multisine_probe


def identification_config_path() -> Path:
    here = Path(__file__).resolve().parents[3] / 'config' / 'identification.yaml'
    if here.exists():
        return here
    from ament_index_python.packages import get_package_share_directory
    return Path(get_package_share_directory('real2sim2real_ros')) / 'config' / \
        'identification.yaml'


def record_probe(world, probe, period: float = 0.002, settle: float = 0.3) -> Recording:
    """Execute ``probe`` on the emulated cell from rest; record its noisy joint positions (what
    the executor's bag holds, at 500 Hz)."""
    world.step_for(settle)
    ref0 = world.controller_state()['reference_positions']
    q0, t0 = world.joint_positions(), world.time
    world.set_trajectory(JointTrajectoryCommand(probe.joint_names, probe.times,
                                                probe.positions, probe.velocities), now=t0)
    ts, qs = [], []
    for _ in range(int(round((probe.duration + 0.2) / period))):
        world.step_for(period)
        ts.append(world.time - t0)
        qs.append(world.joint_positions())
    return Recording(np.array(ts), np.array(qs), q0, probe.times, probe.positions,
                     probe.velocities, None, ref0, name=probe.name)


def known_gains(world) -> dict[str, float]:
    """The servo gains of the cell's controller: configuration the lab knows (the
    identification config's controller file holds the default arm's)."""
    n = len(world.joint_names)
    kp, kv = world.spec.robot.per_joint('kp', n), world.spec.robot.per_joint('kv', n)
    out = {f'actuator/{j}/kp': float(k) for j, k in zip(world.joint_names, kp)}
    out.update({f'actuator/{j}/kv': float(k) for j, k in zip(world.joint_names, kv)})
    return out


def identify_arm(world, robot, cfg, out_dir: Path):
    from ..twin import Twin
    conf = load_identification_config(identification_config_path(), robot)
    conf.known.update(known_gains(world))   # this cell's controller: its joints, its gains
    world.reset()
    center = world.joint_positions()
    probes = [multisine_probe(robot.joint_names, center, robot.lower, robot.upper,
                              robot.velocity_limits, duration=cfg.arm_probe_duration,
                              amplitude=0.35, velocity_fraction=0.5, seed=s,
                              name=f'probe_{s}')
              for s in range(cfg.arm_probes)]
    recs = [record_probe(world, p) for p in probes]
    twin = Twin(robot, parameters=conf.start_values())
    fit = identify(twin, conf.specs, recs, nthread=1)
    return conf, fit, len(probes)


def identify_cell(world, robot, cfg, found_object, table_height: float, out_dir,
                  recon_objects=None, scene_path: str | None = None) -> dict:
    """Arm + object identification on ``world``; the record the harness reports."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    conf, fit, n_arm = identify_arm(world, robot, cfg, out_dir)
    ps = ParameterSet()
    for est in fit.parameters:
        ps.add(est)
    record = {'arm_probes': n_arm, 'arm_residual_before': fit.residual_before,
              'arm_residual_after': fit.residual_after, 'arm_fit_s': fit.wall_time,
              'arm_fit_method': fit.method, 'arm_fit_warnings': fit.warnings,
              'arm_condition_number': fit.diagnostics.get('condition_number')}
    from .object_identification import identify_object
    arm_values = {**conf.start_values(), **ps.values()}   # known gains + the arm's estimates
    obj = identify_object(world, robot, cfg, found_object, table_height, arm_values, out_dir,
                          recon_objects, scene_path,
                          arm_priors={s.name: s.prior for s in conf.specs})
    for est in obj['parameters']:
        ps.add(est)
    record.update({k: v for k, v in obj.items() if k != 'parameters'})
    record['probes'] = n_arm + obj.get('strikes', 0)
    record['wall_s'] = time.perf_counter() - t0
    ps.save(out_dir / 'parameters.yaml')
    return {'parameters': ps, 'start_values': conf.start_values(), **record}
