"""Arm identification: regression (+ one polish) against the multi-start rollout fit, side by
side on the same recordings (``python -m real2sim2real_ros.bench arm_id``).

Per setting the cell (default: config/cells/default.yaml) runs the probes once, recorded as
the harness records them (noisy joint states at ``period``), and both methods of
core/sysid/fit.identify fit the 20 parameters of config/identification.yaml on all probes but
the last, which is held out. Printed per method: wall time per sub-stage, held-out error,
per-parameter relative error against the cell's hidden truth (the bench is the evaluator),
how many are within 10%, how many 95% intervals cover the truth, the regressor's condition
number and the fit's warnings.

Settings: ``harness`` (2 x 8 s probes fitted, 500 Hz, nthread 1: what
core/evaluation/identification.py runs) and ``live`` (2 x 4 s fitted, 100 Hz joint states,
nthread 2: the node's defaults).
"""
from __future__ import annotations

import time

SETTINGS = {
    'harness': {'probes': 2, 'duration': 8.0, 'period': 0.002, 'nthread': 1},
    'live': {'probes': 2, 'duration': 4.0, 'period': 0.01, 'nthread': 2},
}


def record(spec, n_probes: int, duration: float, period: float):
    """(recordings, truth, known gains, joint names): ``n_probes + 1`` multisine probes on the
    emulated cell (the last for holding out), as the harness runs them."""
    from ..core.controller_config import cell_controller_config, load_servo_gains
    from ..core.emulated_world import EmulatedWorld
    from ..core.evaluation.identification import record_probe
    from ..core.robot_description import default_cell_urdf, load_robot
    from ..core.sysid.probes import multisine_probe
    world = EmulatedWorld(spec)
    robot = load_robot(spec.urdf_path() or default_cell_urdf())
    world.reset()
    center = world.joint_positions()
    recs, probes = [], []
    for s in range(n_probes + 1):
        p = multisine_probe(robot.joint_names, center, robot.lower, robot.upper,
                            robot.velocity_limits, duration=duration, amplitude=0.35,
                            velocity_fraction=0.5, seed=s, name=f'probe_{s}')
        probes.append(p)
        recs.append(record_probe(world, p, period=period))
    truth = spec.hidden_truth(list(world.joint_names))
    gains = load_servo_gains(cell_controller_config(spec), robot.joint_names)   # the lab's
    return recs, truth, gains, robot, probes, center


def fit_recordings(robot, recs, gains, *, method: str, nthread: int):
    """core/sysid/fit.identify with ``method`` on ``recs`` (all but the last fitted, the last
    held out), the 20 parameters of config/identification.yaml started at their priors with
    the lab's servo ``gains`` known: the one fit every comparison here runs."""
    from ..core.evaluation.identification import identification_config_path
    from ..core.sysid.config import load_identification_config
    from ..core.sysid.fit import identify
    from ..core.twin import Twin
    conf = load_identification_config(identification_config_path())
    conf.known.update(gains)
    twin = Twin(robot, parameters=conf.start_values())
    try:
        return identify(twin, conf.specs, recs[:-1], heldout=recs[-1:], method=method,
                        nthread=nthread)
    finally:
        twin.close()


def score(fit, truth: dict) -> dict:
    errors = {e.name: abs(e.value - truth[e.name]) / abs(truth[e.name])
              for e in fit.parameters if truth.get(e.name)}
    covered = [e.name for e in fit.parameters if e.contains(truth[e.name])]
    return {'method': fit.method, 'wall_s': fit.wall_time, 'cpu_s': fit.diagnostics.get('cpu_s'),
            'rollouts': fit.n_rollouts,
            'heldout_before': fit.heldout_error_before, 'heldout_after': fit.heldout_error_after,
            'residual_after': fit.residual_after, 'errors': errors,
            'within_10': sum(v <= 0.10 for v in errors.values()), 'covered': len(covered),
            'n': len(list(fit.parameters)), 'warnings': fit.warnings,
            'condition_number': fit.diagnostics.get('condition_number'),
            'stages_s': fit.diagnostics.get('stages_s', {}),
            'polish': fit.diagnostics.get('polish', {}),
            'values': {e.name: [e.value, e.lower_95, e.upper_95] for e in fit.parameters}}


def compare(setting: str = 'harness', cell_spec=None, methods=('least_squares', 'auto')) -> dict:
    """Both methods on one recording set; returns {'setting', 'record_s', method: score}."""
    from ..core.cell_spec import default_cell_spec_path, load_cell_spec
    from ..core.evaluation.identification import identification_config_path
    from ..core.sysid.config import load_identification_config
    from ..core.sysid.regression import planned_condition_number
    from ..core.twin import Twin
    cfg = SETTINGS[setting]
    spec = load_cell_spec(cell_spec or default_cell_spec_path())
    t = time.perf_counter()
    recs, truth, gains, robot, probes, center = record(spec, cfg['probes'], cfg['duration'],
                                                       cfg['period'])
    out = {'setting': setting, 'cell': spec.name, 'record_s': time.perf_counter() - t, **cfg}
    twin = Twin(robot, parameters=load_identification_config(
        identification_config_path()).start_values())
    try:
        out['planned_condition_number'] = planned_condition_number(twin, probes[:-1], center)
    finally:
        twin.close()
    for m in methods:
        out[m] = score(fit_recordings(robot, recs, gains, method=m, nthread=cfg['nthread']),
                       truth)
    return out


def print_comparison(out: dict, console=None) -> None:
    from rich.console import Console
    from rich.table import Table
    console = console or Console()
    methods = [k for k in ('least_squares', 'auto') if k in out]
    t = Table(title=f"arm identification, {out['cell']} cell, {out['setting']}: "
                    f"{out['probes']} x {out['duration']:g} s fitted + 1 held out, "
                    f"{1 / out['period']:.0f} Hz, nthread {out['nthread']}")
    t.add_column('')
    for m in methods:
        t.add_column(out[m]['method'])
    rows = [('wall s (CPU s)', lambda s: f"{s['wall_s']:.1f} ({s['cpu_s']:.1f})"),
            ('rollouts', lambda s: str(s['rollouts'])),
            ('held-out mrad (prior -> fit)',
             lambda s: f"{s['heldout_before'] * 1e3:.3f} -> {s['heldout_after'] * 1e3:.4f}"),
            ('within 10%', lambda s: f"{s['within_10']}/{s['n']}"),
            ('95% covers truth', lambda s: f"{s['covered']}/{s['n']}"),
            ('condition number', lambda s: f"{s['condition_number']:.1f}"
             if s['condition_number'] else '-'),
            ('stages s', lambda s: ', '.join(f'{k[:-2]} {v:.1f}'
                                             for k, v in s['stages_s'].items()) or '-'),
            ('warnings', lambda s: str(len(s['warnings'])))]
    for label, f in rows:
        t.add_row(label, *[f(out[m]) for m in methods])
    for name in out[methods[0]]['errors']:
        t.add_row(name, *[f"{out[m]['errors'][name]:.1%}" for m in methods])
    console.print(t)
    console.print(f"planned condition number of the fitted probes (q = reference, no latency "
                  f"column): {out['planned_condition_number']:.1f}")
    for m in methods:
        for w in out[m]['warnings']:
            console.print(f'[yellow]{out[m]["method"]}: {w}[/]')


def coverage(setting: str = 'live', seeds=range(100, 160), cell_spec=None) -> dict:
    """Interval honesty over joint-state noise draws: per seed of the cell's noise, the probes
    recorded as in ``setting``, method ``auto`` fitted, and per run how many 95% intervals
    cover the truth and the truth's squared Mahalanobis distance under the fit's covariance
    (chi-square with 20 degrees of freedom when the intervals are honest)."""
    import dataclasses

    import numpy as np
    from scipy import stats

    from ..core.cell_spec import default_cell_spec_path, load_cell_spec
    cfg = SETTINGS[setting]
    base = load_cell_spec(cell_spec or default_cell_spec_path())
    runs = []
    for seed in seeds:
        recs, truth, gains, robot, _, _ = record(dataclasses.replace(base, seed=seed),
                                                 cfg['probes'], cfg['duration'], cfg['period'])
        fit = fit_recordings(robot, recs, gains, method='auto', nthread=cfg['nthread'])
        s = score(fit, truth)
        d = np.array([e.value - truth[e.name] for e in fit.parameters])
        m2 = float(d @ np.linalg.solve(fit.covariance, d))
        runs.append({'seed': seed, 'covered': s['covered'], 'within_10': s['within_10'],
                     'n': s['n'], 'mahalanobis2': m2, 'method': fit.method})
        print(f"seed {seed}: {s['covered']}/{s['n']} intervals cover, {s['within_10']} within "
              f"10%, squared Mahalanobis distance {m2:.1f}", flush=True)
    m2 = np.array([r['mahalanobis2'] for r in runs])
    n = runs[0]['n']
    summary = {'runs': len(runs),
               'interval_coverage': sum(r['covered'] for r in runs) / (n * len(runs)),
               'runs_below_75pct_covered': sum(r['covered'] < 0.75 * n for r in runs),
               'mahalanobis2_mean': float(m2.mean()), 'mahalanobis2_max': float(m2.max()),
               'chi2_999': float(stats.chi2.ppf(0.999, n)),
               'chi2_9999': float(stats.chi2.ppf(0.9999, n))}
    print(summary)
    return {'setting': setting, 'cell': base.name, **cfg, 'summary': summary, 'runs': runs}


def main(settings=('harness', 'live'), cell_spec=None) -> list:
    results = []
    for s in settings:
        out = compare(s, cell_spec)
        print_comparison(out)
        results.append(out)
    return results


if __name__ == '__main__':
    import json
    import sys
    print(json.dumps(main(sys.argv[1:] or ('harness', 'live')), indent=1, default=str))
