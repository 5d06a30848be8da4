"""Reconstruction and identification only (the harness's own stage code, no training), on one
cell spec, with the shipped identification config or that config with StrikeConfig
overrides: what a strike's shape does to the object estimates. Prints one ``RESULT`` JSON
line: the task object's estimates [value, lower 95, upper 95, identified] beside the cell's
true friction and mass (read for the report only, after the stage), and the held-out folds.

    scripts/env.sh python results/model_gap/identify_only.py \\
        results/model_gap/drake_cells/wide_5_drake.yaml \\
        --strike '{"tilt_deg": 0, "accel": 15, "decel": 25, "lift": 0}'   # about 2.5 min
    scripts/env.sh python results/model_gap/identify_only.py \
        results/model_gap/drake_cells/wide_8_drake.yaml \
        --config results/model_gap/identification_damping.yaml --task-curve \
        --strike '{"target_slides": [0.05, 0.2, 0.12]}'    # spread the strikes' speeds

``--config``: another identification config (default: the shipped one), e.g.
``identification_damping.yaml``, which also fits the object's linear and angular damping.
``--task-curve``: afterwards, slide_to_target's square strike at every speed of
``slide_curves_task_yaw_fine.json`` on the MuJoCo version of the cell with the object's
identified friction, mass and damping (the arm's true values), against the Drake curve there:
RMS over the task band and the speeds at which only one of them tips (a measurement: it reads
the spec). ``results/model_gap/strike_shape.json`` and ``damping_fit.json`` hold the stop-49
runs (seed 1).
"""
import argparse
import copy
import json
import tempfile
import time
from pathlib import Path

import torch
import yaml

from real2sim2real_ros.core.cell_spec import load_cell_spec
from real2sim2real_ros.core.controller_config import cell_controller_config
from real2sim2real_ros.core.evaluation.harness import (
    HarnessConfig,
    reconstruct_cell,
    truth_door,
)
from real2sim2real_ros.core.evaluation.identification import (
    identification_config_path,
    identify_cell,
)
from real2sim2real_ros.core.robot_description import default_cell_urdf, load_robot
from real2sim2real_ros.core.world import make_world


def config_with(strike: dict, folder: Path, base: str = '') -> str | None:
    """The identification config ``base`` (default: the shipped one) with ``strike`` merged
    into objects.strike (None: the shipped file as it is)."""
    if not strike and not base:
        return None
    src = Path(base) if base else identification_config_path()
    data = yaml.safe_load(src.read_text())
    data = copy.deepcopy(data)
    ctrl = Path(data['controller_config'])
    if not ctrl.is_absolute():
        ctrl = (src.parent / ctrl) if (src.parent / ctrl).exists() else \
            identification_config_path().parent / ctrl
    data['controller_config'] = str(ctrl)
    data['objects']['strike'] = {**data['objects'].get('strike', {}), **strike}
    out = folder / 'identification.yaml'
    out.write_text(yaml.safe_dump(data))
    return str(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('cell_spec')
    ap.add_argument('--strike', default='{}', help='StrikeConfig overrides (JSON)')
    ap.add_argument('--config', default='', help='identification config (default: shipped)')
    ap.add_argument('--task-curve', action='store_true',
                    help='the identified object under the task strike against Drake')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--out', default='', help='artifacts folder (default: a temporary one)')
    args = ap.parse_args()
    torch.set_num_threads(1)
    strike = json.loads(args.strike)
    folder = Path(args.out or tempfile.mkdtemp(prefix='identify_only_'))
    folder.mkdir(parents=True, exist_ok=True)
    spec = load_cell_spec(args.cell_spec)
    cfg = HarnessConfig(seed=args.seed, nthread=1,
                        identification_config=config_with(strike, folder, args.config))
    robot = load_robot(default_cell_urdf())
    world = make_world(spec, None, truth=truth_door())
    t0 = time.perf_counter()
    try:
        recon = reconstruct_cell(world, cfg, folder / 'reconstruction', robot)
        found = recon['_found'][recon['_by_truth'][cfg.object_id].found_id]
        ident = identify_cell(world, robot, cfg, found, recon['table_height'],
                              folder / 'identification', list(recon['_found'].values()),
                              recon['mjcf_path'],
                              controller_config=str(cell_controller_config(spec)))
    finally:
        world.close()
    truth = next(o for o in spec.objects if o.id == cfg.object_id)   # the report only
    res = {'cell': spec.name, 'strike': strike, 'seed': args.seed,
           'config': args.config or 'shipped',
           'true_friction': truth.friction[0], 'true_mass': truth.mass,
           'seconds': time.perf_counter() - t0,
           'estimates': {e.name: [e.value, e.lower_95, e.upper_95, bool(e.identified)]
                         for e in ident['parameters'] if e.name.split('/')[0] in
                         ('geom', 'body')},
           'heldout_folds': ident.get('object_heldout_folds')}
    if args.task_curve:
        res['task_curve'] = task_curve(Path(args.cell_spec), found.id, res['estimates'])
    print('RESULT', json.dumps(res), flush=True)


def task_curve(path: Path, found_id: str, estimates: dict) -> dict:
    """The identified object (friction, mass, damping) under the task's square strike on the
    MuJoCo version of the cell, against the Drake curve of slide_curves_task_yaw_fine.json."""
    import numpy as np
    from twin_family import BAND, HERE, family_curves
    fine = json.loads((HERE / 'slide_curves_task_yaw_fine.json').read_text())
    drake = next(r for r in fine['results'] if r['cell'] == path.name)['curves']['drake']
    est = {k.split('/')[-1]: v[0] for k, v in estimates.items() if f'/{found_id}/' in k}
    mass = est['mass']
    curve = next(iter(family_curves(
        path, [p['speed'] for p in drake], [est['friction']],
        [est.get('linear_damping', 0.0) / mass], [est.get('angular_damping', 0.0)],
        mass=mass).values()))['curve']
    band = [i for i, p in enumerate(drake) if p['upright'] and BAND[0] <= p['slide_m'] <= BAND[1]]
    err = [curve[i]['slide_m'] - drake[i]['slide_m'] for i in band if curve[i]['upright']]
    return {'values': est, 'curve': curve,
            'band_rms_m': float(np.sqrt(np.mean(np.square(err)))) if err else None,
            'band_tipped': sum(not curve[i]['upright'] for i in band),
            'tips_where_drake_does_not': [drake[i]['speed'] for i in range(len(drake))
                                          if drake[i]['upright'] and not curve[i]['upright']]}


if __name__ == '__main__':
    main()
