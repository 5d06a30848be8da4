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
    identification config's ``known`` section holds the default arm's)."""
    n = len(world.joint_names)
    kp, kv = world.spec.robot.per_joint('kp', n), world.spec.robot.per_joint('kv', n)
    out = {f'actuator/{j}/kp': float(k) for j, k in zip(world.joint_names, kp)}
    out.update({f'actuator/{j}/kv': float(k) for j, k in zip(world.joint_names, kv)})
    return out


PROBE_CLEARANCE = 0.03      # m: every arm link this far from every object and the table
PROBE_DEEPEN = 0.005        # m: a link already that near at rest may come this much nearer
PROBE_AMPLITUDES = (0.35, 0.25, 0.18, 0.12)   # rad, tried in turn until a probe is clear
PROBE_SEEDS_PER_AMPLITUDE = 3


def pair_distances(scene_twin, qs, margin: float = PROBE_CLEARANCE) -> dict:
    """{(robot geom, scene geom): smallest distance (m)} over joint positions ``qs`` (N, J)
    for the pairs nearer than ``margin`` (MuJoCo's collision with that margin): the robot is
    every body but the world (the table) and the scene's ``object/`` bodies."""
    import mujoco
    m = scene_twin.model
    d = mujoco.MjData(m)
    robot = {b for b in range(1, m.nbody) if not m.body(b).name.startswith('object/')}
    saved = m.geom_margin.copy()
    m.geom_margin[:] = margin
    out: dict = {}
    try:
        for qk in np.atleast_2d(np.asarray(qs, float)):
            d.qpos[:] = m.qpos0
            d.qpos[scene_twin._qadr] = qk
            mujoco.mj_forward(m, d)
            for c in d.contact[:d.ncon]:
                g1, g2 = int(c.geom1), int(c.geom2)
                r1, r2 = int(m.geom_bodyid[g1]) in robot, int(m.geom_bodyid[g2]) in robot
                if r1 == r2:
                    continue
                key = (g1, g2) if r1 else (g2, g1)
                out[key] = min(out.get(key, margin), float(c.dist))
        return out
    finally:
        m.geom_margin[:] = saved


def probe_clearance(scene_twin, probe, q_start, rest: dict | None = None,
                    margin: float = PROBE_CLEARANCE, rate: float = 50.0) -> float:
    """The probe's slack (m; >= 0: clear) along its reference from ``q_start``, sampled at
    ``rate``, against the reconstructed scene (its table and every object): every
    robot-to-scene pair stays ``margin`` apart, or, a pair already nearer at rest (``rest``:
    :func:`pair_distances` at the start; e.g. a base link beside a high table's edge), comes
    at most PROBE_DEEPEN nearer than there."""
    traj = scene_twin._reference(np.asarray(q_start, float), probe.times, probe.positions,
                                 probe.velocities)
    t = np.arange(0.0, float(probe.times[-1]) + 1e-9, 1.0 / rate)
    q, _ = scene_twin._sample(traj, t)
    rest = rest or {}
    slack = margin
    for key, dist in pair_distances(scene_twin, q, margin).items():
        need = margin if key not in rest else min(margin, rest[key] - PROBE_DEEPEN)
        slack = min(slack, dist - need)
    return slack


def plan_arm_probes(robot, center, n: int, duration: float, scene_path: str | None):
    """``n`` multisine probes about ``center``, each planned clear of every reconstructed
    object and the table (:func:`probe_clearance`; smaller amplitudes, other seeds, until
    clear). Returns (probes, record). CellEnded ARM_PROBES_BLOCKED when no probe is clear."""
    from .reasons import CellEnded
    scene = rest = None
    if scene_path:
        from ..twin import Twin
        scene = Twin(robot, scene_path)
        rest = pair_distances(scene, center)
    probes, record, seed = [], [], 0
    for _ in range(n):
        chosen = None
        for amp in PROBE_AMPLITUDES:
            for _ in range(PROBE_SEEDS_PER_AMPLITUDE):
                p = multisine_probe(robot.joint_names, center, robot.lower, robot.upper,
                                    robot.velocity_limits, duration=duration, amplitude=amp,
                                    velocity_fraction=0.5, seed=seed, name=f'probe_{seed}')
                seed += 1
                slack = PROBE_CLEARANCE if scene is None else probe_clearance(scene, p, center,
                                                                              rest)
                if slack >= 0.0:
                    chosen = (p, amp, slack)
                    break
                record.append({'probe': p.name, 'amplitude_rad': amp, 'rejected': True,
                               'slack_m': slack})
            if chosen:
                break
        if chosen is None:
            raise CellEnded('ARM_PROBES_BLOCKED',
                            f'no multisine arm probe about the ready pose (amplitudes '
                            f'{PROBE_AMPLITUDES} rad) keeps the arm {100 * PROBE_CLEARANCE:.0f}'
                            f' cm clear of the reconstructed table and objects: clear the '
                            f'space under the ready pose')
        probes.append(chosen[0])
        record.append({'probe': chosen[0].name, 'amplitude_rad': chosen[1], 'rejected': False,
                       'slack_m': chosen[2], 'checked': scene is not None,
                       'near_at_rest': len(rest or {})})
    return probes, record


def identify_arm(world, robot, cfg, out_dir: Path, scene_path: str | None = None):
    from ..twin import Twin
    conf = load_identification_config(identification_config_path())
    conf.known.update(known_gains(world))
    world.reset()
    center = world.joint_positions()
    probes, plan_record = plan_arm_probes(robot, center, cfg.arm_probes,
                                          cfg.arm_probe_duration, scene_path)
    recs = [record_probe(world, p) for p in probes]
    twin = Twin(robot, parameters=conf.start_values())
    fit = identify(twin, conf.specs, recs, nthread=1)
    return conf, fit, len(probes), plan_record


def identify_cell(world, robot, cfg, found_object, table_height: float, out_dir,
                  recon_objects=None, scene_path: str | None = None) -> dict:
    """Arm + object identification on ``world``; the record the harness reports."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    conf, fit, n_arm, probe_plan = identify_arm(world, robot, cfg, out_dir, scene_path)
    ps = ParameterSet()
    for est in fit.parameters:
        ps.add(est)
    record = {'arm_probes': n_arm, 'arm_residual_before': fit.residual_before,
              'arm_residual_after': fit.residual_after, 'arm_fit_s': fit.wall_time,
              'arm_fit_method': fit.method, 'arm_fit_warnings': fit.warnings,
              'arm_condition_number': fit.diagnostics.get('condition_number'),
              'arm_fit_at_bound': list(fit.diagnostics.get('at_bound') or []),
              'arm_fit_spikes': len(fit.diagnostics.get('spikes') or []),
              'arm_probe_plan': probe_plan}
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
