"""Which MuJoCo object model could follow a Drake cell's slides at the task's speeds: friction
alone (today's twin), or friction with a speed-dependent loss (linear damping on the object's
free joint) and an angular damping that keeps a fast-struck object from tipping? Issue 15's
question after stop 48: the identified twins of the drawn Drake cells predicted 90-100%
where the cells gave 20-50%.

Per cell (default: the ten drawn Drake cells), slide_to_target's strike on the task object
``box_0`` square to the strike (as the task's episodes start; slide_curves.py ``--yaw
heading``) at each speed, on the MuJoCo version of the cell (every true arm, table and
object value; ``engine: mujoco``) with the object's friction, translational damping (per
kilogram of its true mass, 1/s) and angular damping (N m s/rad) set from a grid. The Drake
curves are read from ``slide_curves_task_yaw.json`` (same strike, same speeds).

Per cell and grid point: the RMS slide difference over the task band (the speeds at which
the Drake object ends upright 7-21 cm away: the goals, 10-18 cm, +- the 3 cm radius) and how
many of those speeds tip the MuJoCo object; the hindsight best of friction alone and of the
whole family by that RMS among members tipping nothing (in hindsight: an identification
would have to find it from its probes). What the cells themselves allow over the task's whole
speed range is slide_curves.py's ``reachable``. Only the evaluator's truth is read (cell
specs): a measurement, not a stage.

    scripts/env.sh python results/model_gap/twin_family.py --jobs 2 \\
        --out results/model_gap/twin_family.json     # about 20 min on 2 cores

A PNG of the Drake curve, the best friction and the best family member per cell is written
beside the JSON.
"""
import argparse
import copy
import json
import time
from pathlib import Path

import mujoco
import numpy as np
import yaml
from slide_curves import label_axes, panels, plot_curve, save, task_for  # the same strike

from real2sim2real_ros.core.cell_spec import load_cell_spec
from real2sim2real_ros.core.emulated_world import OBJECT_PREFIX
from real2sim2real_ros.core.robot_description import default_cell_urdf, load_robot
from real2sim2real_ros.core.tasks.base import ResetSample
from real2sim2real_ros.core.tasks.worlds import CellWorld
from real2sim2real_ros.core.world import make_world

HERE = Path(__file__).resolve().parent
OBJECT_ID = 'box_0'
BAND = (0.07, 0.21)


def family_curves(path: Path, speeds, frictions, linear, angular,
                  mass: float | None = None) -> dict:
    """Slides (m) and upright per speed for every grid point on the cell's MuJoCo version
    (``linear`` per kg of the object's mass; ``mass``: the object's, None: the spec's)."""
    data = yaml.safe_load(path.read_text())
    data['cameras'] = []
    robot = load_robot(default_cell_urdf())
    obj = next(o for o in data['objects'] if o['id'] == OBJECT_ID)
    task = task_for(robot, data, obj)
    mj = dict(copy.deepcopy(data), engine='mujoco')
    mj.pop('drake', None)
    if mass is not None:
        next(o for o in mj['objects'] if o['id'] == OBJECT_ID)['mass'] = float(mass)
        obj = dict(obj, mass=float(mass))
    xy = np.asarray(obj['pose']['xyz'][:2], float)
    out = {}
    for f in frictions:
        cell = copy.deepcopy(mj)
        next(o for o in cell['objects'] if o['id'] == OBJECT_ID)['friction'][0] = float(f)
        world = make_world(load_cell_spec(cell))
        try:
            m = world._model            # the emulated MuJoCo cell's model: a measurement
            joint = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, OBJECT_PREFIX + OBJECT_ID)
            dof = int(m.jnt_dofadr[joint])
            backend = CellWorld(world, OBJECT_ID)
            for lin in linear:
                for ang in angular:
                    m.dof_damping[dof:dof + 3] = lin * float(obj['mass'])
                    m.dof_damping[dof + 3:dof + 6] = ang
                    points = []
                    for v in speeds:
                        with world.truth.scoring():
                            r = task.run_episode(backend, ResetSample(xy, 0.0, xy + [0.3, 0.0]),
                                                 lambda _o, v=v: np.array([float(v), 0.0]))
                        points.append({'speed': float(v),
                                       'slide_m': float(r.final_object_xy[0] - xy[0]),
                                       'upright': bool(r.info.get('upright', True))})
                    out[f'f{f:g}_l{lin:g}_a{ang:g}'] = {
                        'friction': float(f), 'linear_per_kg': float(lin),
                        'angular': float(ang), 'curve': points}
        finally:
            world.close()
    return out


def band_fit(curve, drake) -> tuple[float | None, int]:
    """RMS (m) over the task band's speeds where both stay upright; speeds tipped here."""
    idx = [i for i, p in enumerate(drake)
           if p['upright'] and BAND[0] <= p['slide_m'] <= BAND[1]]
    up = [i for i in idx if curve[i]['upright']]
    err = [curve[i]['slide_m'] - drake[i]['slide_m'] for i in up]
    return (float(np.sqrt(np.mean(np.square(err)))) if err else None), len(idx) - len(up)


def run_cell(path: Path, reference: dict, frictions, linear, angular) -> dict:
    t0 = time.perf_counter()
    ref = next(r for r in reference['results'] if r['cell'] == path.name)
    if 'unreachable' in ref:
        return {'cell': path.name, 'unreachable': ref['unreachable']}
    drake = ref['curves']['drake']
    speeds = [p['speed'] for p in drake]
    grid = family_curves(path, speeds, frictions, linear, angular)
    for g in grid.values():
        g['band_rms_m'], g['band_tipped'] = band_fit(g['curve'], drake)

    def best(keys):
        ok = [k for k in keys if grid[k]['band_rms_m'] is not None and not grid[k]['band_tipped']]
        return min(ok, key=lambda k: grid[k]['band_rms_m']) if ok else None
    friction_only = best([k for k, g in grid.items()
                          if g['linear_per_kg'] == 0 and g['angular'] == 0])
    family = best(list(grid))
    named = {'mujoco_true': ref['curves']['mujoco_true']}
    if 'mujoco_identified_box' in ref['curves']:
        named['mujoco_identified_box'] = ref['curves']['mujoco_identified_box']
    return {'cell': path.name, 'speeds': speeds, 'drake': drake,
            'band_speeds': [p['speed'] for p in drake
                            if p['upright'] and BAND[0] <= p['slide_m'] <= BAND[1]],
            'reference': {k: dict(zip(('band_rms_m', 'band_tipped'), band_fit(c, drake)),
                                  curve=c) for k, c in named.items()},
            'identified_box': ref.get('identified_box'),
            'best_friction_only': friction_only, 'best_family': family,
            'grid': grid, 'seconds': time.perf_counter() - t0}


PROBE_SPEEDS = (0.4, 0.7, 1.0)


def probe_selection(r: dict, probe_speeds=PROBE_SPEEDS) -> dict:
    """Is the family's gain fit? Choose friction alone and the whole family by the RMS at
    ``probe_speeds`` only (three strikes, as an identification would make; a member tipping
    where Drake stays upright is out), then score the choice on the task band's other
    speeds: RMS (m) where both stay upright, and how many of them tip the MuJoCo object."""
    drake, speeds = r['drake'], r['speeds']
    probes = [speeds.index(v) for v in probe_speeds]
    held = [i for i, p in enumerate(drake) if p['upright'] and BAND[0] <= p['slide_m']
            <= BAND[1] and i not in probes]

    def rms(curve, idx):
        err = [curve[i]['slide_m'] - drake[i]['slide_m'] for i in idx
               if curve[i]['upright'] and drake[i]['upright']]
        return float(np.sqrt(np.mean(np.square(err)))) if err else None

    def choose(keys):
        ok = {k: rms(r['grid'][k]['curve'], probes) for k in keys
              if all(r['grid'][k]['curve'][i]['upright'] or not drake[i]['upright']
                     for i in probes)}
        ok = {k: v for k, v in ok.items() if v is not None}
        return min(ok, key=ok.get) if ok else None
    out = {'probe_speeds': list(probe_speeds), 'held_out_speeds': [speeds[i] for i in held]}
    for label, keys in (('friction_only', [k for k, g in r['grid'].items()
                                           if g['linear_per_kg'] == 0 and g['angular'] == 0]),
                        ('family', list(r['grid']))):
        k = choose(keys)
        curve = r['grid'][k]['curve'] if k else None
        out[label] = {'member': k, 'held_out_rms_m': rms(curve, held) if curve else None,
                      'held_out_tipped': sum(not curve[i]['upright'] for i in held)
                      if curve else None}
    return out


def extend(r: dict, path: Path, fine: dict) -> dict:
    """The chosen members (hindsight best and probe-chosen, friction alone and family) at the
    speeds above the grid's, up to the task's 1.8 m/s, against the Drake curve of
    ``fine`` (slide_curves_task_yaw_fine.json): does a member chosen at 0.3-1.2 m/s follow
    Drake where the cells give their far goals? RMS (m) where both stay upright, and the
    speeds at which only one of them tips."""
    ref = next(x for x in fine['results'] if x['cell'] == r['cell'])['curves']['drake']
    fast = [p for p in ref if p['speed'] > max(r['speeds']) + 1e-9]
    keys = {r['best_friction_only'], r['best_family'],
            r['probe_selection']['friction_only']['member'],
            r['probe_selection']['family']['member']} - {None}
    out = {'speeds': [p['speed'] for p in fast], 'drake': fast, 'members': {}}
    for k in sorted(keys):
        g = r['grid'][k]
        curve = next(iter(family_curves(path, out['speeds'], [g['friction']],
                                        [g['linear_per_kg']], [g['angular']]).values()))['curve']
        err = [c['slide_m'] - d['slide_m'] for c, d in zip(curve, fast)
               if c['upright'] and d['upright']]
        out['members'][k] = {
            'curve': curve,
            'rms_m': float(np.sqrt(np.mean(np.square(err)))) if err else None,
            'tips_where_drake_does_not': [d['speed'] for c, d in zip(curve, fast)
                                          if d['upright'] and not c['upright']],
            'upright_where_drake_tips': [d['speed'] for c, d in zip(curve, fast)
                                         if c['upright'] and not d['upright']]}
    return out


def summarize(results: list[dict]) -> dict:
    """Per curve kind: the median band RMS over the cells where it tips nothing in the band,
    and how many cells it tips in."""
    out = {}
    for key in ('mujoco_true', 'mujoco_identified_box', 'best_friction_only', 'best_family'):
        rows = [r['reference'][key] if key in r['reference'] else r['grid'].get(r[key] or '')
                for r in results if key in r['reference'] or key.startswith('best')]
        ok = [g['band_rms_m'] for g in rows if g and not g['band_tipped']
              and g['band_rms_m'] is not None]
        out[key] = {'median_band_rms_m': float(np.median(ok)) if ok else None,
                    'cells': len(ok), 'tipping': sum(bool(g and g['band_tipped'])
                                                     for g in rows)}
    for label in ('friction_only', 'family'):      # chosen on three probe speeds
        sel = [r['probe_selection'][label] for r in results]
        ok = [x['held_out_rms_m'] for x in sel
              if x['held_out_rms_m'] is not None and not x['held_out_tipped']]
        out[f'probe_chosen_{label}'] = {
            'median_held_out_rms_m': float(np.median(ok)) if ok else None, 'cells': len(ok),
            'tipping': sum(bool(x['held_out_tipped']) for x in sel)}
    return out


def plot(results: list[dict], path: Path) -> None:
    fig, axes = panels(len(results), 5.5, 4.2)
    for ax, r in zip(axes, results):
        ax.axhspan(1e3 * BAND[0], 1e3 * BAND[1], color='0.92')
        lines = [('drake', r['drake'], 'black', 'Drake cell')]
        if r['best_friction_only']:
            g = r['grid'][r['best_friction_only']]
            lines.append(('f', g['curve'], 'tab:blue', f'friction {g["friction"]:g} '
                          f'(band RMS {1e3 * g["band_rms_m"]:.0f} mm)'))
        if r['best_family']:
            g = r['grid'][r['best_family']]
            lines.append(('fam', g['curve'], 'tab:green',
                          f'friction {g["friction"]:g}, damping {g["linear_per_kg"]:g}/s, '
                          f'angular {g["angular"]:g} (band RMS {1e3 * g["band_rms_m"]:.0f} mm)'))
        t = r['reference']['mujoco_true']
        lines.append(('t', t['curve'], 'tab:red', 'true values'))
        for _, curve, color, label in lines:
            plot_curve(ax, curve, color=color, lw=2.5 if color == 'black' else 1.5, label=label)
        ax.set_title(r['cell'].replace('.yaml', ''))
        label_axes(ax, 'slide (mm); x: tipped; grey: task band', 400)
    save(fig, path, 100)


def extend_file(out: Path, fine_path: Path, cells, jobs: int) -> None:
    """``extend`` on every cell of an existing twin_family JSON, written back."""
    data = json.loads(out.read_text())
    fine = json.loads(fine_path.read_text())
    by_name = {Path(c).name: Path(c) for c in cells}
    done = [r for r in data['results'] if 'unreachable' not in r]
    jobs_ = [(r, by_name[r['cell']], fine) for r in done]
    if jobs > 1:
        import multiprocessing
        with multiprocessing.get_context('spawn').Pool(jobs) as pool:
            ext = pool.starmap(extend, jobs_)
    else:
        ext = [extend(*j) for j in jobs_]
    for r, e in zip(done, ext):
        r['extension'] = e
        print(r['cell'] + ': ' + '; '.join(
            f"{k}: {_mm(m['rms_m'])}, tips where Drake does not at "
            f"{m['tips_where_drake_does_not']}" for k, m in e['members'].items()))
    out.write_text(json.dumps(data, indent=1) + '\n')


def _mm(v: float | None) -> str:
    return '-' if v is None else f'{1e3 * v:.0f} mm'


def _floats(s: str) -> list[float]:
    return [float(v) for v in s.split(',')]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--cells', nargs='*', default=[
        str(HERE / 'drake_cells' / f'wide_{i}_drake.yaml') for i in range(10)])
    ap.add_argument('--reference', default=str(HERE / 'slide_curves_task_yaw.json'))
    ap.add_argument('--frictions', default='0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0')
    ap.add_argument('--linear', default='0,1,2,4,8', help='translational damping, 1/s')
    ap.add_argument('--angular', default='0,0.002,0.005', help='angular damping, N m s/rad')
    ap.add_argument('--fine', default=str(HERE / 'slide_curves_task_yaw_fine.json'),
                    help='Drake curves to 1.8 m/s (slide_curves.py): the chosen members are '
                    'run at the speeds above the grid and compared there')
    ap.add_argument('--extend-only', action='store_true',
                    help='no grid: add the comparison above to the existing --out JSON')
    ap.add_argument('--jobs', type=int, default=1)
    ap.add_argument('--out', default=str(HERE / 'twin_family.json'))
    args = ap.parse_args()
    if args.extend_only:
        extend_file(Path(args.out), Path(args.fine), args.cells, args.jobs)
        return
    reference = json.loads(Path(args.reference).read_text())
    jobs = [(Path(c), reference, _floats(args.frictions), _floats(args.linear),
             _floats(args.angular)) for c in args.cells]
    if args.jobs > 1:
        import multiprocessing
        with multiprocessing.get_context('spawn').Pool(args.jobs) as pool:
            results = pool.starmap(run_cell, jobs)
    else:
        results = [run_cell(*j) for j in jobs]
    done = [r for r in results if 'unreachable' not in r]
    for r in done:
        r['probe_selection'] = probe_selection(r)
    summary = summarize(done)
    fine = json.loads(Path(args.fine).read_text()) if Path(args.fine).exists() else None
    if fine is not None:
        by_name = {Path(c).name: Path(c) for c in args.cells}
        for r in done:
            r['extension'] = extend(r, by_name[r['cell']], fine)
    for r in results:
        if 'unreachable' in r:
            print(f"{r['cell']}: not struck ({r['unreachable']})")
            continue
        parts = []
        for label, g in (('true', r['reference']['mujoco_true']),
                         ('friction', r['grid'].get(r['best_friction_only'] or '', None)),
                         ('family', r['grid'].get(r['best_family'] or '', None))):
            if g is None:
                parts.append(f'{label}: -')
                continue
            rms = '-' if g['band_rms_m'] is None else f"{1e3 * g['band_rms_m']:.0f} mm"
            parts.append(f"{label}: {rms}" + (f" ({g['band_tipped']} tipped)"
                                              if g['band_tipped'] else ''))
        print(f"{r['cell']}: best friction {r['best_friction_only']}, family "
              f"{r['best_family']}; " + '; '.join(parts))
    print('band RMS, median over the cells (mm): ' + ', '.join(
        f"{k} {1e3 * v['median_band_rms_m']:.0f} ({v['cells']} cells, {v['tipping']} tipping)"
        for k, v in summary.items() if v['median_band_rms_m'] is not None))
    plot(done, Path(args.out).with_suffix('.png'))
    Path(args.out).write_text(json.dumps({
        'command': 'python results/model_gap/twin_family.py ' + ' '.join(
            f'--{k} {getattr(args, k)}' for k in ('frictions', 'linear', 'angular')),
        'reference': Path(args.reference).name, 'summary': summary,
        'results': results}, indent=1) + '\n')


if __name__ == '__main__':
    main()
