"""Issue 15's held-out criterion on Drake cells, from harness JSONs, beside what perfect
identification within MuJoCo would give.

Per cell and run (each a harness JSON of 10 drawn Drake cells):

* ``strike``: the identification's own held-out strike (the stage holds out its last
  strike): the rest-position error of the twin with the prior values (``before``), with the
  identified values (``after``) and with the Drake cell's true values (``true_values``: what
  a perfect identification within MuJoCo's model class gives; a scoring read of truth);
* ``folds``: the same RMS over every strike held out in turn (the harness's folds);
* ``deployments`` (runs with ``--refine-rounds 2``): round 2's tracked deployments, fitted by
  no twin before them, as a held-out test in the task's own regime: the capped miss RMS of
  the prior (nominal), the identified and round 1's refitted twin.

Pooled ratios are sqrt(mean(after^2) / mean(before^2)) over the cells (the deployments:
over the deployments). No truth reaches the figures but ``true_values``.

    python results/model_gap/heldout_table.py RUN.json [RUN.json ...] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import math

import numpy as np


def _pooled(after, before) -> float:
    return math.sqrt(float(np.mean(np.square(after))) / float(np.mean(np.square(before))))


def _strike_rows(summary: dict, key: str) -> list[dict]:
    return [{'cell': c['cell'], 'before_mm': 1e3 * c['before'], 'after_mm': 1e3 * c['after'],
             'true_values_mm': 1e3 * c['floor']} for c in summary.get(key, [])]


def _deployment_rows(cells: list[dict]) -> list[dict]:
    rows = []
    for c in cells:
        for r in (c.get('refit') or {}).get('rounds', []):
            h = r.get('heldout_rms_m')
            if h:
                rows.append({'cell': c['name'], 'deployments': h['deployments'],
                             **{f'{k}_mm': 1e3 * h[k]
                                for k in ('nominal', 'identified', 'refitted')}})
    return rows


def _strike_figures(rows: list[dict]) -> dict:
    b, a, t = (np.array([r[k] for r in rows]) for k in ('before_mm', 'after_mm',
                                                        'true_values_mm'))
    return {'cells': len(rows), 'after_below_before': int(np.sum(a < b)),
            'true_values_below_before': int(np.sum(t < b)),
            'pooled_after_vs_before': _pooled(a, b),
            'pooled_true_values_vs_before': _pooled(t, b), 'rows': rows}


def _deployment_figures(rows: list[dict], summary: dict) -> dict:
    """Per-cell rows beside the harness summary's pooled figures (``deployment_heldout``)."""
    h = summary['deployment_heldout']
    return {'cells': len(rows), 'deployments': h['deployments'],
            'pooled_mm': {k: 1e3 * v for k, v in h['pooled_rms_m'].items()},
            'pooled_refitted_vs_nominal': h['ratio_refitted_vs_nominal'],
            'pooled_identified_vs_nominal': h['ratio_identified_vs_nominal'],
            'refitted_below_nominal': h['refitted_below_nominal'],
            'identified_below_nominal': h['identified_below_nominal'], 'rows': rows}


def run_table(path: str) -> dict:
    """The figures above for one harness JSON."""
    with open(path) as f:
        d = json.load(f)
    s = d['summary']
    out = {'source': path, 'seed': d['config']['seed'],
           'refine_rounds': d['config'].get('refine_rounds', 1),
           'strike': _strike_figures(_strike_rows(s, 'object_heldout_criterion')),
           'folds': _strike_figures(_strike_rows(s, 'object_heldout_folds_criterion'))}
    deps = _deployment_rows(d['cells'])
    if deps:
        out['deployments'] = _deployment_figures(deps, s)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('runs', nargs='+', help='harness JSONs')
    ap.add_argument('--json', help='write the table here')
    args = ap.parse_args()
    tables = [run_table(p) for p in args.runs]
    for t in tables:
        print(f"{t['source']} (seed {t['seed']}, {t['refine_rounds']} round(s))")
        for k in ('strike', 'folds'):
            f = t[k]
            print(f"  {k:6s}: after < before {f['after_below_before']}/{f['cells']}, pooled "
                  f"{f['pooled_after_vs_before']:.2f}; true values {f['true_values_below_before']}"
                  f"/{f['cells']}, pooled {f['pooled_true_values_vs_before']:.2f}")
        if 'deployments' in t:
            f = t['deployments']
            print(f"  deployments ({f['deployments']}): refitted / prior "
                  f"{f['pooled_refitted_vs_nominal']:.2f}, below on "
                  f"{f['refitted_below_nominal']}/{f['cells']}; identified / prior "
                  f"{f['pooled_identified_vs_nominal']:.2f}, below on "
                  f"{f['identified_below_nominal']}/{f['cells']}")
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'runs': tables}, f, indent=1)


if __name__ == '__main__':
    main()
