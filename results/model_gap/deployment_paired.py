"""Round 2's held-out deployments per deployment: is the refitted twin worse than the prior
on any cell beyond what its ten deployments can tell?

A harness run with ``--refine-rounds 2`` holds round 2's deployments out of every twin fitted
before them and reports, per cell, the RMS of their capped misses under the nominal (prior),
the identified and round 1's refitted twin (``refit.rounds[1].heldout_rms_m``). This script
rebuilds those three twins from the run's own artifacts -- the reconstructed scene
(``OUT_DIR/<cell>/reconstruction/scene.xml``), the identified values and round 1's refit
values in the JSON, the task config in the JSON -- checks that they give the JSON's RMS
again (``reproduced``), and then compares the per-deployment misses in pairs: a one-sided Wilcoxon
signed-rank test of "the refitted (identified) twin misses by more than the prior", per cell.

A run whose out dir is gone: ``--reconstruct`` captures and reconstructs each cell again
with the harness's own ``reconstruct_cell`` (the run's seed and noise seed, from the cell
specs in OUT_DIR/cells, e.g. written again by ``draw_cells``) and reports whether its record
(position, yaw and extent errors) equals the run's (``reconstruction_reproduced``).

The twins read no truth. ``true_values`` is the scoring side's yardstick: the identified twin
with the Drake cell's true object friction, mass and centre of mass offsets (damping 0), what
a perfect identification of the object within MuJoCo gives on the same deployments.

    scripts/env.sh python results/model_gap/deployment_paired.py RUN.json OUT_DIR \\
        [--reconstruct] --json results/model_gap/deployment_paired_seed2.json
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from real2sim2real_ros.core.evaluation.deployment_refit import (
    Deployment,
    RefitOptions,
    miss_per_deployment,
    paired_p_worse,
)
from real2sim2real_ros.core.evaluation.harness import HELDOUT_ALPHA as ALPHA
from real2sim2real_ros.core.evaluation.harness import flagged_estimates
from real2sim2real_ros.core.evaluation.identification import identification_config_path
from real2sim2real_ros.core.robot_description import default_cell_urdf, load_robot
from real2sim2real_ros.core.sysid.config import load_identification_config
from real2sim2real_ros.core.tasks.base import ResetSample
from real2sim2real_ros.core.training_setup import build_task_and_twin, scene_info_from_mjcf


def verdict(row: dict) -> str:
    """The floor-aware per-cell reading of 'after < before' on held-out deployments (issue
    14's reading of the held-out criterion, with the deployments' own noise): 'below_prior'
    (refitted RMS below the prior's); else 'not_significantly_worse' (paired p >= ALPHA);
    else 'within_true_values' (no worse than the twin with the cell's true object values:
    the prior there beats a perfect identification within MuJoCo); else 'fails'."""
    rms = row['rms_mm']
    if rms['refitted'] < rms['nominal']:
        return 'below_prior'
    if row['p_refitted_worse'] >= ALPHA:
        return 'not_significantly_worse'
    if rms['refitted'] <= rms['true_values']:
        return 'within_true_values'
    return 'fails'


def _deployments(rows: list[dict]) -> list[Deployment]:
    return [Deployment(ResetSample(np.asarray(r['start_xy'], float), float(r['start_yaw']),
                                   np.asarray(r['goal_xy'], float)),
                       np.asarray(r['action'], float),
                       None if r['end_xy'] is None else np.asarray(r['end_xy'], float))
            for r in rows]


def _used(cell: dict) -> dict:
    """The identified values the harness's twin used: estimates, flagged arm ones at prior."""
    ident = cell['identification']
    flagged = flagged_estimates(ident, [p['name'] for p in ident['parameters']])
    return {p['name']: p['prior'] if p['name'] in flagged else p['estimate']
            for p in ident['parameters']}


def _twin(robot, cell, scene, start, parameters, overrides=None):
    return build_task_and_twin(robot, 'slide_to_target', scene=scene,
                               object_id=cell['task_config']['object_id'],
                               task_config=cell['task_config'], start_values=start,
                               parameters=parameters, overrides=overrides or {})[:2]


def _true_object(cell: dict, out_dir: Path, object_id: str) -> dict:
    """The Drake cell's true object friction, mass and lateral centre of mass offsets under
    the twin's names (a scoring read of the run's cell spec: what a perfect identification of
    the object within MuJoCo would give), linear and angular damping 0."""
    from real2sim2real_ros.core.cell_spec import load_cell_spec
    from real2sim2real_ros.core.evaluation.object_identification import offsets_in_twin_frame
    spec = load_cell_spec(str(out_dir / 'cells' / f"{cell['name']}.yaml"))
    obj = next(o for o in spec.objects if o.id == object_id)   # the harness's cfg.object_id
    oid = cell['task_config']['object_id']
    return {f'geom/{oid}/friction': float(obj.friction[0]), f'body/{oid}/mass': float(obj.mass),
            f'body/{oid}/linear_damping': 0.0, f'body/{oid}/angular_damping': 0.0,
            **offsets_in_twin_frame(spec, obj.id, oid,
                                    cell['identification'].get('object_frame_yaw'))}


def reconstruct_again(cell: dict, out_dir: Path, run_config: dict, robot) -> bool:
    """Capture and reconstruct ``cell`` again into OUT_DIR/<cell>/reconstruction as the run
    did; True when the record's errors equal the run's to 1e-9."""
    from real2sim2real_ros.core.cell_spec import load_cell_spec
    from real2sim2real_ros.core.evaluation.harness import (
        HarnessConfig,
        reconstruct_cell,
        truth_door,
    )
    from real2sim2real_ros.core.world import make_world
    spec = load_cell_spec(str(out_dir / 'cells' / f"{cell['name']}.yaml"))
    cfg = HarnessConfig(seed=run_config['seed'], capture_views=run_config['capture_views'],
                        reseed_noise=run_config['reseed_noise'])
    world = make_world(spec, None, truth=truth_door(),
                       noise_seed=cfg.seed if cfg.reseed_noise else None)
    try:
        rec = reconstruct_cell(world, cfg, out_dir / cell['name'] / 'reconstruction', robot)
    finally:
        world.close()
    keys = ('position_error_m', 'extents_error_m', 'chamfer_m')
    mine = [[o[k] for k in keys] for o in rec['objects']]
    theirs = [[o[k] for k in keys] for o in cell['reconstruction']['objects']]
    return len(mine) == len(theirs) and bool(np.allclose(mine, theirs, rtol=0, atol=1e-9))


def cell_rows(cell: dict, out_dir: Path, robot, start: dict, opts: RefitOptions,
              object_id: str) -> dict:
    rounds = cell['refit']['rounds']
    fresh = _deployments(cell['refit']['deployments'][
        rounds[0]['deployments_so_far']:rounds[1]['deployments_so_far']])
    scene = scene_info_from_mjcf(str(out_dir / cell['name'] / 'reconstruction' / 'scene.xml'),
                                 source='reconstruction (harness)')
    used = _used(cell)
    r1 = rounds[0]
    fname = f"geom/{cell['task_config']['object_id']}/friction"
    misses = {}
    for name, params, over in (
            ('nominal', None, None), ('identified', used, None),
            ('refitted', {**used, **r1['values']},
             {'demo_friction': float(r1['values'][fname]),
              'twin_rest_offset': [float(v) for v in r1['rest_offset_m']]}),
            ('true_values', {**used, **_true_object(cell, out_dir, object_id)}, None)):
        task, twin = _twin(robot, cell, scene, start, params, over)
        try:
            misses[name] = miss_per_deployment(task, twin, fresh, opts)
        finally:
            twin.close()
    rms = {k: math.sqrt(float(np.mean(v ** 2))) for k, v in misses.items()}
    recorded = rounds[1]['heldout_rms_m']
    return {'cell': cell['name'], 'deployments': len(fresh),
            'miss_mm': {k: [round(1e3 * x, 2) for x in v] for k, v in misses.items()},
            'rms_mm': {k: 1e3 * v for k, v in rms.items()},
            'recorded_rms_mm': {k: 1e3 * v for k, v in recorded.items() if k != 'deployments'},
            'reproduced': all(abs(rms[k] - recorded[k]) < 1e-4 for k in ('nominal', 'identified',
                                                                  'refitted')),
            'p_refitted_worse': paired_p_worse(misses['refitted'], misses['nominal']),
            'p_identified_worse': paired_p_worse(misses['identified'], misses['nominal']),
            'p_true_values_worse': paired_p_worse(misses['true_values'], misses['nominal']),
            'p_refitted_worse_than_true_values': paired_p_worse(misses['refitted'],
                                                       misses['true_values']),
            'p_refitted_better': paired_p_worse(misses['nominal'], misses['refitted'])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('run_json')
    ap.add_argument('out_dir', help="the run's --out-dir (its reconstructed scenes)")
    ap.add_argument('--reconstruct', action='store_true',
                    help='capture and reconstruct the cells again (the out dir is gone)')
    ap.add_argument('--json', default='')
    args = ap.parse_args()
    run = json.loads(Path(args.run_json).read_text())
    if run['config'].get('refine_rounds', 1) < 2:
        raise SystemExit(f'{args.run_json}: no second round (run with --refine-rounds 2)')
    robot = load_robot(default_cell_urdf())
    conf = load_identification_config(run['config']['identification_config']
                                      or identification_config_path(), robot)
    start = conf.start_values()
    opts = RefitOptions(**run['config'].get('refit_options', {}))
    rows = []
    for cell in run['cells']:
        if not cell.get('completed') or len(cell.get('refit', {}).get('rounds', [])) < 2:
            continue
        again = reconstruct_again(cell, Path(args.out_dir), run['config'], robot) \
            if args.reconstruct else None
        rows.append(cell_rows(cell, Path(args.out_dir), robot, start, opts,
                              run['config']['object_id']))
        if again is not None:
            rows[-1]['reconstruction_reproduced'] = again
        rows[-1]['verdict'] = verdict(rows[-1])
        r = rows[-1]
        print(f"{r['cell']}: RMS mm nominal {r['rms_mm']['nominal']:.1f} identified "
              f"{r['rms_mm']['identified']:.1f} refitted {r['rms_mm']['refitted']:.1f} "
              f"true values {r['rms_mm']['true_values']:.1f} (reproduced {r['reproduced']}); "
              f"p(refitted worse) {r['p_refitted_worse']:.3f}, p(true values worse) "
              f"{r['p_true_values_worse']:.3f}",
              flush=True)
    out = {'source': args.run_json, 'seed': run['config']['seed'], 'alpha': ALPHA,
           'test': 'one-sided Wilcoxon signed-rank, paired per deployment (capped misses)',
           'rows': rows,
           'refitted_significantly_worse': [r['cell'] for r in rows
                                            if r['p_refitted_worse'] < ALPHA],
           'identified_significantly_worse': [r['cell'] for r in rows
                                              if r['p_identified_worse'] < ALPHA],
           'refitted_significantly_better': [r['cell'] for r in rows
                                             if r['p_refitted_better'] < ALPHA],
           'refitted_below_nominal': sum(r['rms_mm']['refitted'] < r['rms_mm']['nominal']
                                         for r in rows),
           'verdicts': {r['cell']: r['verdict'] for r in rows},
           'cells_pass': sum(r['verdict'] != 'fails' for r in rows), 'cells': len(rows),
           'pooled_rms_mm': {k: math.sqrt(float(np.mean(np.concatenate(
               [np.square(r['miss_mm'][k]) for r in rows])))) for k in (
               'nominal', 'identified', 'refitted', 'true_values')}}
    out['pooled_refitted_vs_nominal'] = (out['pooled_rms_mm']['refitted']
                                         / out['pooled_rms_mm']['nominal'])
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + '\n')
    print(json.dumps({k: v for k, v in out.items() if k != 'rows'}))


if __name__ == '__main__':
    main()
