"""The identification's strike on a Drake cell against the same strike on the cell's MuJoCo
version (every true value): how far the struck object slides in each engine, per strike
shape. Issue 15: a friction fitted on strikes whose Drake slide differs from MuJoCo's by more
than the task's strike does carries that difference into the twin the policy trains in.

Per cell spec and named StrikeConfig variant, the strike planner plans ``--rounds`` strike
probes on the task object ``box_0`` at its spec pose (the planner's friction range at the
prior, 0.2-1.0, estimate 0.5; round r takes ``target_slides[r]``), each executed from the
same start on both engines. Reported per strike: the planned speed, the object's displacement
along the strike (``drake_m``, ``mujoco_m``), the free slide (displacement less the planned
push) ratio Drake / MuJoCo, and the largest roll/pitch (deg) of the object while it moves. The
object's pose is read from the cells' truth: a measurement, not a stage (only an evaluator
reads truth).

    scripts/env.sh python results/model_gap/strike_engine_gap.py --jobs 2 \\
        --out results/model_gap/strike_engine_gap.json     # about 20 min, one core busy

Variants (``--variants`` JSON: name -> StrikeConfig overrides over the task-strike config's
``objects.strike``): see ``VARIANTS``.
"""
import argparse
import dataclasses
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
CELLS = [HERE / 'drake_cells' / f'wide_{i}_drake.yaml' for i in range(10)]
BASE = HERE / 'identification_task_strike.yaml'
# The task strike (core/tasks/slide_to_target.py): ball's lowest point 5 mm above the table,
# 20 ms at speed before a 25 m/s^2 stop. The identification's default tip height is 16 mm.
VARIANTS = {
    'shipped': {'tilt_deg': 25.0, 'accel': 8.0, 'decel': 15.0, 'lift': 0.015,
                'target_slides': []},
    'task_strike_config': {},
    'low_contact_creep_cruise': {'tip_height': 0.005, 'creep_extra': 0.02,
                                 'cruise_time': 0.02},
}


def strike_config(overrides: dict):
    from real2sim2real_ros.core.sysid.object_probes import StrikeConfig
    base = yaml.safe_load(BASE.read_text())['objects']['strike']
    return StrikeConfig.from_dict({**base, **overrides})


def plan_rounds(spec, robot, cfg, rounds: int, q_start):
    """Strike plans for ``rounds`` rounds on box_0 at its spec pose (truth: the evaluator's),
    the objects and table as the planner sees them in the bench's scene twin."""
    from real2sim2real_ros.bench.object_id_bench import scene_xml
    from real2sim2real_ros.core.sysid.object_fit import strike_objects, table_region
    from real2sim2real_ros.core.sysid.object_probes import plan_strike_probe
    from real2sim2real_ros.core.sysid.probes import ProbeError
    from real2sim2real_ros.core.twin import Twin
    twin = Twin(robot, scene_xml(spec))
    objs = strike_objects(twin, {o.id: (o.xyz, o.yaw) for o in spec.objects})
    target = [o for o in objs if o.id == 'box_0']
    others = [o for o in objs if o.id != 'box_0']
    table = table_region(twin)
    plans, previous = [], {}
    for r in range(rounds):
        try:
            plan = plan_strike_probe(robot, target, table, q_start,
                                     {'box_0': (0.2, 0.5, 1.0)}, cfg.for_round(r),
                                     previous=previous, name=f'strike_{r}', obstacles=others)
        except ProbeError as exc:
            plans.append(str(exc))
            continue
        plans.append(plan)
        for s in plan.strikes:
            previous.setdefault(s.object_id, []).append(s.heading)
    return plans


def replay(world, probe, info) -> dict:
    """Execute ``probe`` from its first point with box_0 at its spec pose; the object's
    displacement along the strike and its largest roll/pitch while it moves."""
    from real2sim2real_ros.core.joint_trajectory import JointTrajectoryCommand
    n = len(probe.joint_names)
    world.set_trajectory(JointTrajectoryCommand(probe.joint_names, [2.0],
                                                [probe.positions[0]], [np.zeros(n)]),
                         now=world.time)
    world.step_for(2.5)
    world.reset_objects(['box_0'])
    world.step_for(0.3)
    t0 = world.time
    p0 = np.asarray(world.object_poses()['box_0'][0][:2], float).copy()
    world.set_trajectory(JointTrajectoryCommand(probe.joint_names, probe.times,
                                                probe.positions, probe.velocities), now=t0)
    tilt, end = 0.0, info.t_end + 0.2
    while world.time - t0 < end:
        world.step_for(0.004)
        q = world.object_poses()['box_0'][1]
        tilt = max(tilt, math.degrees(math.acos(
            float(np.clip(1 - 2 * (q[1] ** 2 + q[2] ** 2), -1, 1)))))
    p1 = np.asarray(world.object_poses()['box_0'][0][:2], float)
    u = np.array([math.cos(info.heading), math.sin(info.heading)])
    return {'along_m': float((p1 - p0) @ u), 'max_tilt_deg': tilt}


def run_cell(path: str, variants: dict, rounds: int) -> dict:
    from real2sim2real_ros.core.cell_spec import load_cell_spec
    from real2sim2real_ros.core.robot_description import default_cell_urdf, load_robot
    from real2sim2real_ros.core.truth import TruthDoor
    from real2sim2real_ros.core.world import make_world
    t0 = time.perf_counter()
    spec = load_cell_spec(path)
    robot = load_robot(default_cell_urdf())
    worlds = {e: make_world(dataclasses.replace(spec, engine=e), None,
                            truth=TruthDoor(strict=False)) for e in ('drake', 'mujoco')}
    out = {'cell': spec.name, 'friction': spec.object('box_0').friction[0],
           'mass': spec.object('box_0').mass, 'size': list(spec.object('box_0').extents),
           'variants': {}}
    try:
        worlds['drake'].step_for(0.5)
        q_start = worlds['drake'].joint_positions()
        for name, overrides in variants.items():
            rows = []
            for plan in plan_rounds(spec, robot, strike_config(overrides), rounds, q_start):
                if isinstance(plan, str):
                    rows.append({'not_planned': plan})
                    continue
                info = plan.strikes[0]
                row = {'speed': info.speed, 'heading': info.heading,
                       'gentle': info.gentle, 'push_m': info.push_length}
                for e, w in worlds.items():
                    r = replay(w, plan.probe, info)
                    row[f'{e}_m'], row[f'{e}_tilt_deg'] = r['along_m'], r['max_tilt_deg']
                free_d = row['drake_m'] - info.push_length
                free_m = row['mujoco_m'] - info.push_length
                row['free_ratio'] = free_d / free_m if free_m > 0.005 else None
                rows.append(row)
            out['variants'][name] = rows
    finally:
        for w in worlds.values():
            w.close()
    out['seconds'] = time.perf_counter() - t0
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--cells', nargs='+', default=[str(p) for p in CELLS])
    ap.add_argument('--variants', default='', help='JSON name -> StrikeConfig overrides')
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--jobs', type=int, default=1)
    ap.add_argument('--out', default='')
    args = ap.parse_args()
    variants = json.loads(args.variants) if args.variants else VARIANTS
    results = []
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_cell, c, variants, args.rounds) for c in args.cells]
        for f in futures:
            res = f.result()
            results.append(res)
            for name, rows in res['variants'].items():
                line = ', '.join(
                    f"{r['speed']:.2f} m/s {1000 * r['drake_m']:.0f}/{1000 * r['mujoco_m']:.0f}"
                    f" mm ({r['free_ratio'] or float('nan'):.2f}; tilt "
                    f"{r['drake_tilt_deg']:.1f}/{r['mujoco_tilt_deg']:.1f})"
                    if 'speed' in r else 'not planned' for r in rows)
                print(f"{res['cell']:14s} {name:26s} {line}", flush=True)
    summary = {}
    for name in variants:
        ratios = [r['free_ratio'] for res in results for r in res['variants'][name]
                  if r.get('free_ratio') is not None]
        summary[name] = {'strikes': len(ratios),
                         'median_free_ratio': float(np.median(ratios)) if ratios else None,
                         'mean_abs_log_ratio': float(np.mean(np.abs(np.log(
                             np.clip(ratios, 1e-3, None))))) if ratios else None}
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(
            {'command': 'python results/model_gap/strike_engine_gap.py '
                        + ' '.join(sys.argv[1:]),
             'variants': variants, 'summary': summary, 'results': results}, indent=1))


if __name__ == '__main__':
    main()
