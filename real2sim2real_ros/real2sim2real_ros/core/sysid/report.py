"""PNG report of an identification: recorded vs simulated traces before/after, estimates."""
from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ['render_report', 'write_object_report', 'write_report']


def write_report(path, twin, fit, recording, priors: dict[str, float],
                 truth: dict[str, float] | None = None, max_joints: int = 6) -> Path:
    """Write :func:`render_report`'s PNG to ``path`` (atomically); returns the path."""
    from ..artifacts import atomic_write_bytes
    return atomic_write_bytes(path, render_report(twin, fit, recording, priors, truth,
                                                  max_joints))


def render_report(twin, fit, recording, priors: dict[str, float],
                  truth: dict[str, float] | None = None, max_joints: int = 6) -> bytes:
    """A PNG (bytes): per joint, recorded vs simulated (prior, fitted) tracking error, plus
    a panel of estimates with 95% intervals (relative to the prior; truth when given).

    ``twin`` must hold the fitted values (identify() leaves them set); ``priors`` are the
    values before identification.
    """
    import io

    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fitted = {e.name: e.value for e in fit.parameters}
    rec = recording

    def simulate(values):
        return twin.rollout(rec.q0, rec.qd0, rec.traj_times, rec.traj_positions,
                            param_samples=[values], traj_velocities=rec.traj_velocities,
                            reference_start=rec.reference_start,
                            object_poses=rec.object_poses0 or None,
                            sample_times=rec.times).positions[0]

    before, after = simulate(priors), simulate(fitted)
    nj = min(max_joints, rec.positions.shape[1])
    fig, axes = plt.subplots(nj + 1, 1, figsize=(9, 2.0 * (nj + 1)), squeeze=False)
    for j in range(nj):
        ax = axes[j, 0]
        ax.plot(rec.times, 1e3 * (before[:, j] - rec.positions[:, j]), label='prior - recorded')
        ax.plot(rec.times, 1e3 * (after[:, j] - rec.positions[:, j]), label='fitted - recorded')
        ax.set_ylabel(f'{twin.joint_names[j][:14]}\n[mrad]', fontsize=8)
        if j == 0:
            ax.legend(fontsize=7, loc='upper right')
            ax.set_title(f'{rec.name}: residual RMS {fit.residual_before:.3g} -> '
                         f'{fit.residual_after:.3g} rad; held-out {fit.heldout_error_before:.3g}'
                         f' -> {fit.heldout_error_after:.3g} rad', fontsize=9)
    axes[nj - 1, 0].set_xlabel('time [s]')
    ax = axes[nj, 0]
    names = [e.name for e in fit.parameters]
    ref = np.array([(truth or {}).get(n, e.prior) or 1.0 for n, e in
                    zip(names, fit.parameters)])
    ref = np.where(ref == 0, 1.0, ref)
    val = np.array([e.value for e in fit.parameters]) / ref
    lo = np.array([e.lower_95 for e in fit.parameters]) / ref
    hi = np.array([e.upper_95 for e in fit.parameters]) / ref
    x = np.arange(len(names))
    ax.errorbar(x, val, yerr=[val - lo, hi - val], fmt='o', capsize=3, label='estimate, 95%')
    ax.axhline(1.0, color='k', lw=0.8, label='truth' if truth else 'prior')
    ax.set_xticks(x)
    ax.set_xticklabels([n.replace('joint/', '').replace('_joint', '') for n in names],
                       rotation=60, fontsize=6)
    ax.set_ylabel('estimate / ' + ('truth' if truth else 'prior'), fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format='png', dpi=90)
    plt.close(fig)
    return buf.getvalue()


def write_object_report(path, fit, max_strikes: int = 8) -> Path:
    """PNG of an object identification (core/sysid/object_fit.py ObjectFitResult): per
    strike, the tracked path of the object (dots) against the twin's with the priors and with
    the estimates (top view, the start marked), held-out strikes titled so; then the
    estimates with their 95% intervals relative to the priors."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    path = Path(path)
    strikes = fit.strikes[:max_strikes]
    n = max(1, len(strikes))
    cols = min(4, n)
    rows = (n + cols - 1) // cols
    fig = plt.figure(figsize=(3.2 * cols, 3.0 * rows + 2.6))
    for i, s in enumerate(strikes):
        ax = fig.add_subplot(rows + 1, cols, i + 1)
        ax.plot(1e3 * (s.observed[:, 0] - s.start[0]), 1e3 * (s.observed[:, 1] - s.start[1]),
                'k.', ms=4, label='tracked')
        ax.plot(1e3 * (s.prior[:, 0] - s.start[0]), 1e3 * (s.prior[:, 1] - s.start[1]),
                '-', color='tab:orange', label='twin, priors')
        ax.plot(1e3 * (s.fitted[:, 0] - s.start[0]), 1e3 * (s.fitted[:, 1] - s.start[1]),
                '-', color='tab:blue', label='twin, estimates')
        ax.plot([0], [0], 'kx')
        ax.set_aspect('equal', adjustable='datalim')
        ax.set_title(f'{s.recording} {s.object_id}{" (held out)" if s.heldout else ""}',
                     fontsize=8)
        ax.tick_params(labelsize=6)
        ax.set_xlabel('x [mm]', fontsize=7)
        if i == 0:
            ax.legend(fontsize=6)
    ax = fig.add_subplot(rows + 1, 1, rows + 1)
    est = list(fit.parameters)
    # Centre of mass offsets (prior 0) in mm on their own axis; the others relative to priors.
    offset = np.array(['/com_offset_' in e.name for e in est])
    ref = np.array([1e-3 if off else (e.prior or 1.0) for e, off in zip(est, offset)])
    val = np.array([e.value for e in est]) / ref
    lo = np.array([e.lower_95 for e in est]) / ref
    hi = np.array([e.upper_95 for e in est]) / ref
    x = np.arange(len(est))
    ax_mm = ax.twinx() if offset.any() else None
    for k, e in enumerate(est):
        color = ('tab:green' if offset[k] else 'tab:blue') if e.identified else 'tab:gray'
        (ax_mm if offset[k] else ax).errorbar(
            [x[k]], [val[k]], yerr=[[val[k] - lo[k]], [hi[k] - val[k]]],
            fmt='s' if offset[k] else 'o', capsize=3, color=color)
    if ax_mm is not None:
        ax_mm.set_ylabel('centre of mass offset [mm] (squares)', fontsize=7)
        ax_mm.tick_params(labelsize=6)
    ax.axhline(1.0, color='k', lw=0.8)
    ax.set_xticks(x)
    ax.set_xticklabels([e.name + ('' if e.identified else ' (not identified)') for e in est],
                       rotation=20, fontsize=6)
    ax.set_ylabel('estimate / prior', fontsize=8)
    ax.set_title(f'held-out rest error {1e3 * fit.heldout_error_before:.1f} -> '
                 f'{1e3 * fit.heldout_error_after:.1f} mm (along the path '
                 f'{1e3 * fit.heldout_along_before:.1f} -> {1e3 * fit.heldout_along_after:.1f}'
                 f' mm)', fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
