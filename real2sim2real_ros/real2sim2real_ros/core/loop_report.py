"""The loop's summary (ROS-free): ``<run_dir>/loop_NNN/`` with summary.json and PNG plots.

``summary.json`` (schema ``real2sim2real/loop_summary/1``):

* ``task``, ``run_dir``, ``status`` (succeeded | failed | canceled), ``error``,
  ``failed_stage``, ``wall_s``;
* ``stages``: per stage in loop order ``stage``, ``status`` (ran | skipped | failed |
  canceled | not_run), ``seconds`` (wall time of a stage that ran), ``artifact`` (path),
  ``reason``, ``detail`` (stage-specific numbers);
* ``identified_parameters``: name, value, lower_95, upper_95, prior, unit, identified;
* ``twin``: the evaluation in the twin (trials, successes, success_rate, Wilson
  ``interval_95``), ``train_twin``: the training's own twin evaluation;
* ``cell``: the trials on the cell, same fields plus ``per_trial`` (goal, task_success,
  error, duration, bag);
* ``plots``: the PNGs (stage_times, parameters, success).

Plots are drawn with matplotlib's Agg canvas directly (no pyplot state: safe in a node's
worker thread) and written atomically.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .artifacts import atomic_output_path, atomic_write_json

SCHEMA = 'real2sim2real/loop_summary/1'
PLOTS = ('stage_times', 'parameters', 'success')


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: Path) -> Path:
    with atomic_output_path(path) as tmp:
        fig.savefig(tmp, format='png')
    return path


def plot_stage_times(stages: list[dict], path: Path) -> Path:
    """Horizontal bars: wall time of each stage that ran; skipped / not run ones labelled."""
    fig = _figure(7.5, 0.5 * len(stages) + 1.4)
    ax = fig.add_subplot(1, 1, 1)
    names = [s['stage'] for s in stages]
    secs = [float(s.get('seconds') or 0.0) if s['status'] in ('ran', 'failed', 'canceled')
            else 0.0 for s in stages]
    colours = {'ran': '#3b7dd8', 'failed': '#d8453b', 'canceled': '#d8a23b'}
    y = np.arange(len(stages))[::-1]
    ax.barh(y, secs, color=[colours.get(s['status'], '#999999') for s in stages])
    top = max(secs) if secs and max(secs) > 0 else 1.0
    for yi, s, t in zip(y, stages, secs):
        label = f'{t:.1f} s' if s['status'] == 'ran' else (
            f'{s["status"]} ({t:.1f} s)' if s['status'] in ('failed', 'canceled') else
            s['status'])
        ax.text(t + 0.01 * top, yi, label, va='center', fontsize=8)
    ax.set_yticks(y)
    ax.set_yticklabels(names)
    ax.set_xlim(0, top * 1.25)
    ax.set_xlabel('wall time [s]')
    total = sum(secs)
    ax.set_title(f'loop stage times (total of the stages that ran: {total:.1f} s)', fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def _reference(p: dict) -> float:
    for key in ('prior', 'value'):
        v = float(p.get(key) or 0.0)
        if v != 0 and math.isfinite(v):
            return abs(v)
    return 1.0


def plot_parameters(parameters: list[dict], path: Path) -> Path:
    """Each identified parameter relative to its prior: estimate with its 95% interval, the
    prior at 1 (a parameter with a zero prior is shown relative to its value)."""
    n = max(1, len(parameters))
    fig = _figure(8.0, 0.28 * n + 1.5)
    ax = fig.add_subplot(1, 1, 1)
    if not parameters:
        ax.text(0.5, 0.5, 'no identified parameters', ha='center', va='center')
        ax.set_axis_off()
        return _save(fig, path)
    y = np.arange(len(parameters))[::-1]
    ref = np.array([_reference(p) for p in parameters])
    val = np.array([float(p['value']) for p in parameters]) / ref
    lo = np.array([float(p['lower_95']) for p in parameters]) / ref
    hi = np.array([float(p['upper_95']) for p in parameters]) / ref
    prior = np.array([float(p.get('prior', math.nan)) for p in parameters]) / ref
    ident = np.array([bool(p.get('identified', True)) for p in parameters])
    err = np.vstack([np.clip(val - lo, 0, None), np.clip(hi - val, 0, None)])
    for mask, colour, label in ((ident, '#3b7dd8', 'estimate, 95% interval'),
                                (~ident, '#999999', 'not identified (prior)')):
        if mask.any():
            ax.errorbar(val[mask], y[mask], xerr=err[:, mask], fmt='o', color=colour,
                        capsize=3, ms=4, label=label)
    ax.plot(prior, y, '|', color='k', ms=10, label='prior')
    ax.set_yticks(y)
    ax.set_yticklabels([f'{p["name"]} = {float(p["value"]):.4g} {p.get("unit", "")}'.strip()
                        for p in parameters], fontsize=7)
    ax.set_xlabel('relative to the prior')
    ax.axvline(1.0, color='k', lw=0.5, alpha=0.5)
    ax.legend(fontsize=7, loc='best')
    ax.set_title('identified parameters (95% intervals)', fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def plot_success(bars: list[tuple[str, dict | None]], path: Path) -> Path:
    """Success rates with Wilson 95% intervals: twin vs cell (and the training's twin
    evaluation). ``bars``: (label, {trials, successes, success_rate, interval_95} or None)."""
    bars = [(label, r) for label, r in bars if r and r.get('trials')]
    fig = _figure(5.5, 3.8)
    ax = fig.add_subplot(1, 1, 1)
    if not bars:
        ax.text(0.5, 0.5, 'no success rates (twin evaluation / cell trials did not run)',
                ha='center', va='center', fontsize=8)
        ax.set_axis_off()
        return _save(fig, path)
    x = np.arange(len(bars))
    rate = np.array([float(r['success_rate']) for _, r in bars])
    lo = np.array([float(r['interval_95'][0]) for _, r in bars])
    hi = np.array([float(r['interval_95'][1]) for _, r in bars])
    colours = ['#3b7dd8', '#e07b39', '#8fb3e8', '#999999'][:len(bars)]
    ax.bar(x, rate, color=colours, yerr=[rate - lo, hi - rate], capsize=6)
    for xi, top, (_, r) in zip(x, hi, bars):
        ax.text(xi + 0.08, min(top, 1.0) + 0.02, f'{r["successes"]}/{r["trials"]}',
                ha='left', fontsize=9)
    ax.set_xticks(x)
    ax.set_xticklabels([label for label, _ in bars], fontsize=8)
    ax.set_ylim(0, 1.15)
    ax.set_ylabel('success rate (Wilson 95%)')
    ax.set_title('twin vs cell success', fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def write_summary(folder: str | Path, summary: dict, plots: bool = True) -> Path:
    """``summary.json`` (+ the PNGs when ``plots``) into ``folder``; returns the JSON path.
    A plot that cannot be drawn is reported in ``plot_errors`` and does not stop the rest."""
    folder = Path(folder)
    summary = {'schema': SCHEMA, **summary}
    summary['plots'], errors = {}, {}
    if plots:
        jobs = {
            'stage_times': lambda p: plot_stage_times(summary.get('stages', []), p),
            'parameters': lambda p: plot_parameters(
                summary.get('identified_parameters') or [], p),
            'success': lambda p: plot_success([
                ('twin (evaluate)', summary.get('twin')), ('cell', summary.get('cell')),
                ('twin (training eval)', summary.get('train_twin'))], p),
        }
        for name, job in jobs.items():
            try:
                summary['plots'][name] = str(job(folder / f'{name}.png'))
            except Exception as exc:  # noqa: BLE001 - a plot must never lose the summary
                errors[name] = f'{type(exc).__name__}: {exc}'
    if errors:
        summary['plot_errors'] = errors
    return atomic_write_json(folder / 'summary.json', summary)
