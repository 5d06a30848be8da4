"""How repeatable is a cell's slide under the task's own starts? From a harness JSON run with
``--refine-trials`` (each cell's ``refit.deployments``: tracked start, goal, action, tracked
rest; no truth), per cell:

* along: the tracked slide along the strike line against the commanded speed, fitted by a
  least-squares line; ``along_scatter_mm``: the RMS of its residuals (n - 2 degrees of
  freedom);
* across: the tracked sideways drift, its mean and RMS about the mean;
* ``ceiling``: the share of deployments whose along residual and across drift about the mean
  both lie within the task's success radius: what a policy that chose each speed and
  direction exactly for the fitted mean response would score on those starts. An estimate
  from 10 episodes, not a bound;
* the refit's RMS before/after (the twin's) beside it.

    python results/model_gap/deployment_scatter.py HARNESS.json [--radius 0.03] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import math

import numpy as np


def cell_scatter(cell: dict, radius: float) -> dict | None:
    """The figures above for one cell record, None without deployments."""
    deps = [d for d in (cell.get('refit') or {}).get('deployments', [])
            if d['end_xy'] is not None]
    if len(deps) < 3:
        return None
    v, along, across = [], [], []
    for d in deps:
        s, g, e = (np.asarray(d[k], float) for k in ('start_xy', 'goal_xy', 'end_xy'))
        heading = math.atan2(*(g - s)[::-1]) + d['action'][1]
        u = np.array([math.cos(heading), math.sin(heading)])
        m = e - s
        v.append(d['action'][0])
        along.append(float(m @ u))
        across.append(float(u[0] * m[1] - u[1] * m[0]))
    v, along, across = map(np.asarray, (v, along, across))
    design = np.column_stack([np.ones_like(v), v])
    coef, *_ = np.linalg.lstsq(design, along, rcond=None)
    res = along - design @ coef
    scatter = float(np.sqrt(np.sum(res ** 2) / max(len(v) - 2, 1)))
    drift = across - across.mean()
    inside = np.hypot(res, drift) <= radius
    refit = cell['refit']
    return {'deployments_seen': len(deps), 'deployments': len(refit['deployments']),
            'speeds_m_s': [round(float(x), 3) for x in v],
            'slide_mm': [round(1e3 * x, 1) for x in along],
            'slide_per_speed_mm_per_m_s': round(1e3 * float(coef[1]), 1),
            'along_scatter_mm': round(1e3 * scatter, 1),
            'across_mean_mm': round(1e3 * float(across.mean()), 1),
            'across_scatter_mm': round(1e3 * float(np.sqrt(np.mean(drift ** 2))), 1),
            'ceiling': float(np.mean(inside)),
            'refit_rms_mm': [round(1e3 * refit['rms_before_m'], 1),
                             round(1e3 * refit['rms_after_m'], 1)]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('harness_json')
    p.add_argument('--radius', type=float, default=0.03, help='success radius (m)')
    p.add_argument('--json', default='', help='write the figures here')
    args = p.parse_args(argv)
    report = json.load(open(args.harness_json))
    out = {'source': args.harness_json, 'radius_m': args.radius, 'cells': {}}
    for c in report['cells']:
        if 'error' in c:
            continue
        s = cell_scatter(c, args.radius)
        if s is None:
            continue
        out['cells'][c['name']] = s
        print(f"{c['name']:14s} seen {s['deployments_seen']:2d}/{s['deployments']:2d}  "
              f"along +-{s['along_scatter_mm']:5.1f} mm  across {s['across_mean_mm']:+6.1f} "
              f"+-{s['across_scatter_mm']:4.1f} mm  ceiling {s['ceiling']:.1f}  "
              f"refit {s['refit_rms_mm'][0]:.0f} -> {s['refit_rms_mm'][1]:.0f} mm")
    if out['cells']:
        out['mean_ceiling'] = float(np.mean([s['ceiling'] for s in out['cells'].values()]))
        print(f"mean ceiling {out['mean_ceiling']:.2f} over {len(out['cells'])} cells")
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
