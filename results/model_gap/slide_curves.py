"""How far a struck object slides against the strike's speed, on a Drake cell and on the same
cell in MuJoCo (the twin's model class), for issue 15's question: can ONE MuJoCo friction
reproduce the Drake cell's slides at every speed a policy uses, or does the gap need another
parameter?

Per cell spec (default: the drawn Drake cells wide_7 and wide_8), slide_to_target's strike
(zero direction offset, heading 0) on the task object ``box_0`` (a box or a cylinder) at the
spec's position, at each speed of ``--speeds``. ``--yaw heading`` (the default) stands the
object square to the strike as the task's episodes do (their start yaw is about the goal
heading); ``--yaw spec`` keeps the spec's yaw (stop 48's first run, where the box was struck
0.6 rad off its face):

* ``drake``: the cell as drawn;
* ``mujoco_true``: the same spec with ``engine: mujoco`` (every true value, the object's
  dynamic friction as its one coefficient): what perfect identification within MuJoCo would
  give;
* ``mujoco_f<F>``: that MuJoCo cell with the object's friction set to F (``--frictions``);
* ``mujoco_identified_box`` (with ``--identified-from``): the friction and mass a harness run
  identified on that cell.

The slide is the object's displacement along the strike heading, read from the cells' true
poses (a measurement, not a stage: only the evaluator reads truth). Per MuJoCo curve: the RMS
difference to the Drake curve over all speeds, and over the task band (the speeds at which
the Drake object ends upright 7-21 cm away: the task's goals, 10-18 cm, +- its 3 cm radius),
with the number of those speeds at which the MuJoCo object tips; per speed the friction whose
slide equals Drake's (linear interpolation over the grid's upright outcomes). One friction
fitting every speed means a friction fit could close the gap; a friction that has to change
with the speed means it cannot. A cell whose strike is out of the arm's reach (a low table)
is reported as not struck.

    scripts/env.sh python results/model_gap/slide_curves.py --yaw spec \
        --out results/model_gap/slide_curves.json          # about 2 min on 2 cores
    scripts/env.sh python results/model_gap/slide_curves.py --yaw spec --arm-from \
        results/model_gap/friction_bound/drake_wide7to9_shipped_stop46.json \
        --out results/model_gap/slide_curves_identified_arm.json
    scripts/env.sh python results/model_gap/slide_curves.py \
        --cells results/model_gap/drake_cells/wide_{0,1,2,3,4,5,6,7,8,9}_drake.yaml \
        --speeds 0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0,1.2 --frictions 0.2,0.3,0.4,0.5,0.6,0.8,1.0 \
        --identified-from results/model_gap/harness_drake_wide10_seed1.json --jobs 2 \
        --out results/model_gap/slide_curves_task_yaw.json   # about 10 min on 2 cores
    scripts/env.sh python results/model_gap/slide_curves.py \
        --cells results/model_gap/drake_cells/wide_{0,1,2,3,4,5,6,7,8,9}_drake.yaml \
        --speeds $(python3 -c "print(','.join(f'{0.3 + 0.05 * i:.2f}' for i in range(31)))") \
        --frictions '' --jobs 2 --out results/model_gap/slide_curves_task_yaw_fine.json

Per curve also ``reachable``: the share of the task's goal distances (10-18 cm) that some
swept speed ends upright within 3 cm of (slide and drift), and that two neighbouring speeds
both reach. On the Drake curve with the fine sweep (0.3-1.8 m/s, 0.05 steps) it bounds what
any policy striking square with no direction offset from that start can score on the cell.

A PNG of the curves is written beside the JSON.
"""
import argparse
import copy
import json
import time
from pathlib import Path

import numpy as np
import yaml

from real2sim2real_ros.core.cell_spec import load_cell_spec
from real2sim2real_ros.core.robot_description import default_cell_urdf, load_robot
from real2sim2real_ros.core.tasks import get_task
from real2sim2real_ros.core.tasks.base import ResetSample
from real2sim2real_ros.core.tasks.kinematics import IKError
from real2sim2real_ros.core.tasks.worlds import CellWorld
from real2sim2real_ros.core.world import make_world

HERE = Path(__file__).resolve().parent
OBJECT_ID = 'box_0'     # the harness's task object (HarnessConfig.object_id), box or cylinder
CELLS = [HERE / 'drake_cells' / 'wide_7_drake.yaml', HERE / 'drake_cells' / 'wide_8_drake.yaml']


def task_for(robot, data: dict, box: dict):
    """slide_to_target at the cell's box: its size, the table's height, the spec's start."""
    size = [float(v) for v in box['size']]
    if box['shape'] == 'cylinder':          # [diameter, height]: the task's x, y, z extents
        size = [size[0], size[0], size[1]]
    return get_task('slide_to_target', robot, {
        'object_size': tuple(size), 'object_shape': box['shape'],
        'table_height': float(data['table']['height']),
        'start_xy': tuple(float(v) for v in box['pose']['xyz'][:2])})


def slides(task, data: dict, box_id: str, speeds, heading: float,
           yaw: float | None = None) -> list[dict]:
    """The strike at each speed on the cell ``data`` (a spec dict): slide along the heading
    (m), sideways drift (m), upright. The box stands at ``yaw`` (None: the spec's)."""
    world = make_world(load_cell_spec(copy.deepcopy(data)))
    cell = CellWorld(world, box_id)
    box = next(o for o in data['objects'] if o['id'] == box_id)
    xy = np.asarray(box['pose']['xyz'][:2], float)
    yaw = float(box['pose'].get('yaw', 0.0)) if yaw is None else float(yaw)
    u = np.array([np.cos(heading), np.sin(heading)])
    out = []
    try:
        for v in speeds:
            reset = ResetSample(xy, yaw, xy + 0.3 * u)
            try:
                with world.truth.scoring():
                    r = task.run_episode(cell, reset,
                                         lambda _o, v=v: np.array([float(v), 0.0]))
            except IKError as e:     # a low table: the strike is out of the arm's reach
                raise Unreachable(str(e)) from e
            d = np.asarray(r.final_object_xy, float) - xy
            out.append({'speed': float(v), 'slide_m': float(d @ u),
                        'drift_m': float(d @ np.array([-u[1], u[0]])),
                        'upright': bool(r.info.get('upright', True))})
    finally:
        world.close()
    return out


class Unreachable(Exception):
    """The strike at the spec's box is out of the arm's reach (IK)."""


def nearest_friction(target: float, curve: dict[float, float]) -> float | None:
    """The friction whose slide is ``target`` by linear interpolation over ``curve``
    {friction: slide} (slides fall as friction rises); None outside the grid."""
    fs = sorted(curve)
    for lo, hi in zip(fs, fs[1:]):
        a, b = curve[lo], curve[hi]
        if min(a, b) <= target <= max(a, b) and a != b:
            return float(lo + (target - a) * (hi - lo) / (b - a))
    return None


ARM_FIELDS = {'damping': 'joint_damping', 'frictionloss': 'joint_frictionloss',
              'armature': 'armature'}


def identified_arm(harness_json: Path, cell_name: str, joint_names) -> dict:
    """The arm values the harness identified on ``cell_name`` (its JSON's parameter rows):
    the robot section's fields of a cell spec."""
    cells = json.loads(harness_json.read_text())['cells']
    rows = {r['name']: r['estimate'] for r in next(
        c for c in cells if c['name'] == cell_name)['identification']['parameters']}
    out = {spec: [float(rows[f'joint/{j}/{fld}']) for j in joint_names]
           for fld, spec in ARM_FIELDS.items()}
    out['command_latency'] = float(rows['global/command_latency'])
    out['gravity_compensation'] = float(rows['global/gravity_compensation'])
    return out


def identified_box(harness_json: Path, cell_name: str) -> dict:
    """The task object's friction and mass the harness identified on ``cell_name``
    (estimates, at the prior where a parameter was not identified; the one object the
    harness identifies, under its reconstructed id)."""
    cells = json.loads(harness_json.read_text())['cells']
    rows = {r['name']: r['estimate'] for r in next(
        c for c in cells if c['name'] == cell_name)['identification']['parameters']}
    fid = next(n.split('/')[1] for n in rows if n.startswith('geom/') and
               n.endswith('/friction'))
    return {'reconstructed_id': fid, 'friction': float(rows[f'geom/{fid}/friction']),
            'mass': float(rows[f'body/{fid}/mass'])}


def run_cell(path: Path, speeds, frictions, heading: float, yaw_mode: str = 'heading',
             arm_from: Path | None = None, identified_from: Path | None = None) -> dict:
    data = yaml.safe_load(path.read_text())
    data['cameras'] = []
    robot = load_robot(default_cell_urdf())
    box = next(o for o in data['objects'] if o['id'] == OBJECT_ID)
    task = task_for(robot, data, box)
    yaw = heading if yaw_mode == 'heading' else None    # the task's start: about the heading
    t0 = time.perf_counter()
    try:
        curves = {'drake': slides(task, data, box['id'], speeds, heading, yaw)}
    except Unreachable as e:
        return {'cell': path.name, 'unreachable': str(e)}
    mj = dict(copy.deepcopy(data), engine='mujoco')
    mj.pop('drake', None)
    arm = None
    if arm_from is not None:    # the identified twin's arm: its effective values
        arm = identified_arm(arm_from, data['name'], robot.joint_names)
        mj['robot'] = {**mj['robot'], **arm}
    curves['mujoco_true'] = slides(task, mj, box['id'], speeds, heading, yaw)
    for f in frictions:
        cell = copy.deepcopy(mj)
        b = next(o for o in cell['objects'] if o['id'] == box['id'])
        b['friction'] = [float(f), *b['friction'][1:]]
        curves[f'mujoco_f{f:g}'] = slides(task, cell, box['id'], speeds, heading, yaw)
    ident = None
    if identified_from is not None:
        ident = identified_box(identified_from, data['name'])
        cell = copy.deepcopy(mj)
        b = next(o for o in cell['objects'] if o['id'] == box['id'])
        b['friction'] = [ident['friction'], *b['friction'][1:]]
        b['mass'] = ident['mass']
        curves['mujoco_identified_box'] = slides(task, cell, box['id'], speeds, heading, yaw)
    drake = np.array([p['slide_m'] for p in curves['drake']])
    rms = {k: float(np.sqrt(np.mean((np.array([p['slide_m'] for p in c]) - drake) ** 2)))
           for k, c in curves.items() if k != 'drake'}
    per_speed = []
    for i, v in enumerate(speeds):
        curve = {f: curves[f'mujoco_f{f:g}'][i]['slide_m'] for f in frictions
                 if curves[f'mujoco_f{f:g}'][i]['upright']}      # a tipped box: no slide
        per_speed.append({'speed': float(v), 'drake_slide_m': float(drake[i]),
                          'matching_mujoco_friction': nearest_friction(float(drake[i]), curve)})
    band = task_band(curves, TASK_SLIDES)
    return {'cell': path.name, 'task_band': band,
            'reachable': {k: reachable(c) for k, c in curves.items()},
            'box': {k: box[k] for k in ('id', 'size', 'mass', 'friction')},
            'mujoco_arm': 'identified' if arm is not None else 'true', 'arm_values': arm,
            'identified_box': ident, 'box_yaw': 'heading' if yaw is not None else 'spec',
            'drake': data.get('drake', {}), 'heading': heading, 'curves': curves,
            'rms_vs_drake_m': rms, 'best_single_friction': min(
                (k for k in rms if k.startswith('mujoco_f')), key=rms.get, default=None),
            'per_speed': per_speed, 'seconds': time.perf_counter() - t0}


TASK_SLIDES = (0.07, 0.21)   # slide_to_target's goals, 0.10-0.18 m, +- its 0.03 m radius


def task_band(curves: dict, slides_m=TASK_SLIDES) -> dict:
    """Per MuJoCo curve, how it matches the Drake cell at the speeds the task uses (Drake's
    box ends upright within ``slides_m``): RMS slide difference (m) over the speeds where
    both boxes stay upright, and how many of those speeds tip the MuJoCo box."""
    idx = [i for i, p in enumerate(curves['drake'])
           if p['upright'] and slides_m[0] <= p['slide_m'] <= slides_m[1]]
    out = {'speeds': [curves['drake'][i]['speed'] for i in idx]}
    for k, c in curves.items():
        if k == 'drake':
            continue
        up = [i for i in idx if c[i]['upright']]
        err = [c[i]['slide_m'] - curves['drake'][i]['slide_m'] for i in up]
        out[k] = {'rms_m': float(np.sqrt(np.mean(np.square(err)))) if err else None,
                  'tipped': len(idx) - len(up)}
    return out


def reachable(curve: list[dict], slides_m=(0.10, 0.18), radius: float = 0.03,
              goals: int = 81) -> dict:
    """What the swept speeds can do on this cell for slide_to_target's goal distances (along
    the strike): the share of ``goals`` distances over ``slides_m`` that some speed of the
    curve ends upright within ``radius`` of (slide and sideways drift), and the share that two
    neighbouring speeds both reach (an outcome that survives a speed error of half the grid's
    step). An upper bound for a policy that strikes square with no direction offset from this
    start, whatever its twin."""
    hit = np.zeros((goals, len(curve)), bool)
    for i, g in enumerate(np.linspace(*slides_m, goals)):
        for j, p in enumerate(curve):
            hit[i, j] = p['upright'] and np.hypot(p['slide_m'] - g, p['drift_m']) <= radius
    return {'any_speed': float(hit.any(axis=1).mean()),
            'two_neighbouring_speeds': float((hit[:, 1:] & hit[:, :-1]).any(axis=1).mean())}


def band_line(band: dict) -> str:
    """One line: per MuJoCo curve its task-band RMS (mm) and tipped count."""
    parts = []
    for k, v in band.items():
        if k == 'speeds':
            continue
        rms = '-' if v['rms_m'] is None else f"{1e3 * v['rms_m']:.0f}"
        parts.append(f"{k}: {rms} mm" + (f" ({v['tipped']} tipped)" if v['tipped'] else ''))
    return ('task band ' + ', '.join(f'{s:g}' for s in band['speeds']) + ' m/s: '
            + '; '.join(parts))


def plot(results: list[dict], path: Path) -> None:
    """Slide against strike speed per cell: Drake, MuJoCo with the true values, MuJoCo at
    each friction of the grid (a tipped box: a cross)."""
    import matplotlib.pyplot as plt
    fig, axes = panels(len(results), 6.5, 4.8)
    for ax, r in zip(axes, results):
        grid = sorted((k for k in r['curves'] if k.startswith('mujoco_f')),
                      key=lambda k: float(k[len('mujoco_f'):]))
        cmap = plt.get_cmap('viridis')
        for i, k in enumerate(grid):
            plot_curve(ax, r['curves'][k], color=cmap(i / max(len(grid) - 1, 1)), lw=1,
                   label=f'MuJoCo, friction {k[len("mujoco_f"):]}')
        plot_curve(ax, r['curves']['mujoco_true'], color='tab:red', lw=2, ls='--',
               label=f'MuJoCo, true values (friction {r["box"]["friction"][0]:g})')
        if 'mujoco_identified_box' in r['curves']:
            ib = r['identified_box']
            plot_curve(ax, r['curves']['mujoco_identified_box'], color='tab:orange', lw=2, ls=':',
                   label=f'MuJoCo, identified box (friction {ib["friction"]:.2f}, '
                   f'{ib["mass"] * 1e3:.0f} g)')
        plot_curve(ax, r['curves']['drake'], color='black', lw=2.5, label='Drake cell')
        ratio = r['drake'].get('static_friction_ratio', 1)
        ax.set_title(f'{r["cell"]}: box {r["box"]["mass"] * 1e3:.0f} g, friction '
                     f'{r["box"]["friction"][0]:g} (static x{ratio:g})')
        label_axes(ax, 'slide along the strike (mm); x: the box tipped', 600)
    save(fig, path, 110)


def panels(n: int, width: float, height: float):
    """A figure of ``n`` panels, up to 5 a row (Agg backend): (figure, the n axes)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    cols = min(n, 5)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)
    return fig, list(axes.ravel()[:n])


def label_axes(ax, ylabel: str, ymax: float) -> None:
    """Strike speed against ``ylabel`` up to ``ymax``, a light grid, the legend."""
    ax.set_xlabel('strike speed (m/s)')
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, ymax)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc='upper left')


def save(fig, path: Path, dpi: int) -> None:
    import matplotlib.pyplot as plt
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def plot_curve(ax, points, **kw):
    """Slide (mm) against strike speed; a cross where the object tipped."""
    v = [p['speed'] for p in points]
    d = [1e3 * p['slide_m'] for p in points]
    ax.plot(v, d, **kw)
    tipped = [(a, b) for a, b, p in zip(v, d, points) if not p['upright']]
    if tipped:
        ax.scatter(*zip(*tipped), marker='x', color=kw.get('color'), s=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--cells', nargs='*', default=[str(p) for p in CELLS])
    ap.add_argument('--speeds', default='0.3,0.5,0.7,0.9,1.2,1.5,1.8')
    ap.add_argument('--frictions', default='0.2,0.25,0.3,0.35,0.4,0.5,0.6,0.8,1.0')
    ap.add_argument('--heading', type=float, default=0.0)
    ap.add_argument('--yaw', choices=('heading', 'spec'), default='heading',
                    help="the box's yaw: the strike heading (slide_to_target's start, a face "
                    "square to the strike) or the spec's pose (stop 48's first run)")
    ap.add_argument('--identified-from', default='',
                    help='a harness JSON: one more MuJoCo curve with the box friction and mass '
                    'identified on the cell of the same name')
    ap.add_argument('--arm-from', default='',
                    help="a harness JSON: the MuJoCo cells get the arm values identified on "
                    "the cell of the same name (the identified twin's), not the true ones")
    ap.add_argument('--jobs', type=int, default=1)
    ap.add_argument('--out', default=str(HERE / 'slide_curves.json'))
    args = ap.parse_args()
    speeds = [float(v) for v in args.speeds.split(',')]
    frictions = [float(v) for v in args.frictions.split(',') if v]
    jobs = [(Path(c), speeds, frictions, args.heading, args.yaw,
             Path(args.arm_from) if args.arm_from else None,
             Path(args.identified_from) if args.identified_from else None)
            for c in args.cells]
    if args.jobs > 1:
        import multiprocessing
        with multiprocessing.get_context('spawn').Pool(args.jobs) as pool:
            results = pool.starmap(run_cell, jobs)
    else:
        results = [run_cell(*j) for j in jobs]
    for r in results:
        if 'unreachable' in r:
            print(f"{r['cell']}: not struck, {r['unreachable']}")
            continue
        best = r['best_single_friction']
        print(f"{r['cell']}: best single MuJoCo friction {best} "
              f"(RMS {1e3 * r['rms_vs_drake_m'][best] if best else float('nan'):.1f} mm), true "
              f"values in MuJoCo RMS {1e3 * r['rms_vs_drake_m']['mujoco_true']:.1f} mm; "
              'matching friction per speed: ' + ', '.join(
                  f"{p['speed']:g}: {p['matching_mujoco_friction'] or float('nan'):.2f}"
                  for p in r['per_speed']))
        print('  ' + band_line(r['task_band']))
        print('  reachable goals (any speed / two neighbouring speeds): ' + '; '.join(
            f"{k} {100 * v['any_speed']:.0f} / {100 * v['two_neighbouring_speeds']:.0f}%"
            for k, v in r['reachable'].items()))
    plot([r for r in results if 'unreachable' not in r], Path(args.out).with_suffix('.png'))
    Path(args.out).write_text(json.dumps({
        'command': 'python results/model_gap/slide_curves.py ' + ' '.join(
            f'--{k} {v}' for k, v in (('speeds', args.speeds), ('frictions', args.frictions),
                                      ('heading', args.heading), ('yaw', args.yaw))) + (
            f' --identified-from {args.identified_from}' if args.identified_from else '') + (
            f' --arm-from {args.arm_from}' if args.arm_from else ''),
        'results': results}, indent=1) + '\n')


if __name__ == '__main__':
    main()
