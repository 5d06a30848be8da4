"""push_to_pose, trained in the twin, run on emulated cells: ``python -m real2sim2real_ros.bench
push`` (options: ``--help``).

For each cell (the default cell with the box's friction and mass redrawn over 0.2-1.0 and
0.05-1 kg, its second object removed so nothing else is in the way), a twin is set to the
cell's true object friction and mass and arm parameters (joint damping, friction loss,
armature, servo gains, command latency, gravity compensation): what a perfect identification
would give. A policy is trained in that twin only (core/policies/pipeline.train_policy:
expert demos, DAgger, multi-step PPO with domain randomisation of +-``--spread`` around the
identified values, model selection in the twin), loaded back from its checkpoint with
core/policies/policy.py, and run for ``--trials`` episodes in the twin and on the emulated
cell (CellWorld(EmulatedWorld(spec))): the same resets, perturbed starts and a kick during
every push. The task's scripted expert runs the same episodes on the cell for reference.
"""
from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

# (name, box sliding friction, box mass kg)
CELLS = [('default', 0.55, 0.21), ('slippery_light', 0.2, 0.05), ('slippery_heavy', 0.2, 1.0),
         ('grippy_light', 1.0, 0.05), ('grippy_heavy', 1.0, 1.0), ('medium', 0.4, 0.5)]
OBJECT = 'box_0'


def drawn_cell_spec(index: int, seed: int = 0):
    """Cell ``index`` of core/evaluation/cells.draw_cells(seed) (box friction, mass, joint
    damping and command latency all redrawn), its second object removed."""
    from real2sim2real_ros.core.cell_spec import load_cell_spec
    from real2sim2real_ros.core.evaluation.cells import draw_cell_data
    rng = np.random.default_rng(seed)
    for i in range(index + 1):
        data = draw_cell_data(rng, i)
    data['objects'] = [o for o in data['objects'] if o['id'] == OBJECT]
    return load_cell_spec(data)


def cell_spec(name: str, friction: float, mass: float, base: str | None = None):
    """The default cell (or ``base``) with box_0's friction and mass set, other objects
    removed."""
    from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
    data = copy.deepcopy(yaml.safe_load(open(base or default_cell_spec_path())))
    data['objects'] = [o for o in data['objects'] if o['id'] == OBJECT]
    data['objects'][0]['friction'] = [float(friction), *data['objects'][0]['friction'][1:]]
    data['objects'][0]['mass'] = float(mass)
    data['name'] = name
    return load_cell_spec(data)


def identified_values(spec, joint_names) -> dict[str, float]:
    """The cell's true values of what identification finds, under the twin's names."""
    truth = spec.hidden_truth(list(joint_names))
    values = {f'geom/object/{OBJECT}/friction': truth[f'geom/{OBJECT}/friction'],
              f'body/object/{OBJECT}/mass': truth[f'body/{OBJECT}/mass'],
              'global/command_latency': truth['global/command_latency'],
              'global/gravity_compensation': truth['global/gravity_compensation']}
    for name, v in truth.items():
        if name.split('/')[0] in ('joint', 'actuator'):
            values[name] = v
    return values


def identified_twin(robot, spec, spread: float = 0.15):
    """(twin at the identified values, ParameterSet of them with +-spread 95% intervals for
    the object's friction and mass, the latency and the joint damping)."""
    from real2sim2real_ros.core.parameters import ParameterEstimate, ParameterSet
    from real2sim2real_ros.core.tasks.worlds import TaskObject, TaskTable, task_scene_xml
    from real2sim2real_ros.core.twin import Twin
    o, t = spec.object(OBJECT), spec.table
    twin = Twin(robot, task_scene_xml(TaskObject(OBJECT, tuple(o.size), o.mass, o.friction[0]),
                                      TaskTable(tuple(t.center), tuple(t.size[:2]), t.height)))
    values = identified_values(spec, twin.joint_names)
    twin.set_parameters(values)
    ps = ParameterSet()
    for name, v in values.items():
        if name.split('/')[-1] in ('friction', 'mass', 'damping', 'command_latency'):
            ps.add(ParameterEstimate(name, v, v * (1 - spread), v * (1 + spread), v, '', True))
    return twin, ps


def run_episodes(task, world, make_policy, trials: int, seed: int) -> dict:
    """Success rate and mean final errors of ``make_policy(reset, rng)`` (a policy per
    episode) over the resets core/policies/evaluate draws from ``seed``."""
    rng, own = np.random.default_rng(seed), np.random.default_rng(seed + 1)
    ok, pos, yaw, steps = [], [], [], []
    for _ in range(trials):
        reset = task.sample_reset(rng)
        res = task.run_episode(world, reset, make_policy(reset, own))
        ok.append(res.success)
        pos.append(res.final_error)
        yaw.append(res.info.get('yaw_error', np.nan))
        steps.append(res.info['steps'])
    return {'success_rate': float(np.mean(ok)), 'mean_error_m': float(np.mean(pos)),
            'mean_yaw_error_rad': float(np.mean(yaw)), 'mean_steps': float(np.mean(steps)),
            'trials': trials}


def bench_cell(robot, name, friction, mass, args, out_dir: Path, say=print,
               spec=None) -> dict:
    import torch

    from real2sim2real_ros.core.emulated_world import EmulatedWorld
    from real2sim2real_ros.core.policies.pipeline import TrainConfig, train_policy
    from real2sim2real_ros.core.policies.policy import load_checkpoint
    from real2sim2real_ros.core.tasks import get_task
    from real2sim2real_ros.core.tasks.worlds import CellWorld, TwinWorld
    torch.set_num_threads(1)
    spec = spec or cell_spec(name, friction, mass)
    task = get_task('push_to_pose', robot, args.task_config)
    twin, ps = identified_twin(robot, spec, args.spread)
    cfg = TrainConfig(**{'seed': args.seed, 'eval_trials': args.select_trials,
                         **args.train_config})
    t = time.perf_counter()
    res = train_policy(task, twin, ps, cfg, out_dir / name / 'checkpoint',
                       progress=lambda s, f, r: True)
    train_s = time.perf_counter() - t
    policy, _ = load_checkpoint(res.checkpoint)      # policy.py alone
    fn = policy.as_function()

    def learned(_reset, _rng):
        return fn
    row = {'name': name, 'friction': friction, 'mass': mass, 'train_wall_s': train_s,
           'train_cpu_s': res.cpu_seconds,
           'twin_select_bc': res.twin_eval_bc.success_rate,
           'twin_select_ppo': (None if res.details.get('twin_eval_ppo') is None
                               else res.details['twin_eval_ppo'].success_rate),
           'ppo_kept': res.details.get('ppo_kept'),
           'dagger_learner_success': res.details.get('dagger', {}).get('learner_success'),
           'checkpoint': str(res.checkpoint)}
    say(f'  {name}: trained in {train_s:.0f} s; evaluating')
    seed = args.seed + 5000
    row['twin'] = run_episodes(task, TwinWorld(twin, OBJECT), learned, args.trials, seed)
    world = EmulatedWorld(spec)
    try:
        cell = CellWorld(world, OBJECT)
        row['cell'] = run_episodes(task, cell, learned, args.trials, seed)
        row['cell_expert'] = run_episodes(task, cell, task.scripted_demo_policy, args.trials,
                                         seed)
    finally:
        world.close()
    twin.close()
    return row


def print_table(rows) -> None:
    header = ('cell', 'mu', 'mass', 'train s', 'sel BC/PPO', 'PPO kept', 'twin succ',
              'cell succ', 'expert@cell', 'twin err mm', 'cell err mm', 'cell yaw rad')
    lines = []
    for r in rows:
        ppo = '-' if r['twin_select_ppo'] is None else f"{r['twin_select_ppo']:.2f}"
        lines.append((r['name'], f"{r['friction']:.2f}", f"{r['mass']:.2f}",
                      f"{r['train_wall_s']:.0f}", f"{r['twin_select_bc']:.2f}/{ppo}",
                      str(r['ppo_kept']), f"{r['twin']['success_rate']:.2f}",
                      f"{r['cell']['success_rate']:.2f}",
                      f"{r['cell_expert']['success_rate']:.2f}",
                      f"{1e3 * r['twin']['mean_error_m']:.1f}",
                      f"{1e3 * r['cell']['mean_error_m']:.1f}",
                      f"{r['cell']['mean_yaw_error_rad']:.3f}"))
    if rows:
        lines.append(('mean', '', '', f"{np.mean([r['train_wall_s'] for r in rows]):.0f}", '',
                      '', f"{np.mean([r['twin']['success_rate'] for r in rows]):.2f}",
                      f"{np.mean([r['cell']['success_rate'] for r in rows]):.2f}",
                      f"{np.mean([r['cell_expert']['success_rate'] for r in rows]):.2f}",
                      '', '', ''))
    widths = [max(len(h), *(len(x[i]) for x in lines)) for i, h in enumerate(header)]
    print('push_to_pose: trained in the identified twin, run on emulated cells (perturbed '
          'starts, a kick in every push)')
    for line in (header, *lines):
        print('  '.join(x.rjust(w) for x, w in zip(line, widths)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog='python -m real2sim2real_ros.bench push',
                                 description=__doc__.split('\n\n')[0])
    ap.add_argument('--cells', type=int, default=len(CELLS), help='how many of the cells')
    ap.add_argument('--only', default='', help='comma-separated cell names')
    ap.add_argument('--drawn', type=int, default=0,
                    help='also this many cells drawn by core/evaluation/cells.draw_cells '
                         '(joint damping and command latency redrawn too)')
    ap.add_argument('--trials', type=int, default=20, help='episodes per policy and backend')
    ap.add_argument('--select-trials', type=int, default=30,
                    help='twin episodes of the BC / PPO model selection')
    ap.add_argument('--spread', type=float, default=0.15,
                    help='domain randomisation: +- this fraction around the identified values')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--task-config', type=json.loads, default={},
                    help='push_to_pose config overrides (JSON)')
    ap.add_argument('--train-config', type=json.loads, default={},
                    help='TrainConfig overrides (JSON; closed_loop may be a dict)')
    ap.add_argument('--out', default='bench_results/push.json', help='the results (JSON)')
    ap.add_argument('--runs-dir', default=None,
                    help='checkpoints go here (default: a new temporary folder)')
    args = ap.parse_args(argv)
    from real2sim2real_ros.core.robot_description import default_cell_urdf, load_robot
    robot = load_robot(default_cell_urdf())
    cells = CELLS[:args.cells]
    if args.only:
        cells = [c for c in CELLS if c[0] in args.only.split(',')]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    runs = Path(args.runs_dir or tempfile.mkdtemp(prefix='r2s2r_push_bench_'))
    print(f'checkpoints in {runs}')
    specs = [(name, mu, mass, None) for name, mu, mass in cells]
    for i in range(args.drawn):
        spec = drawn_cell_spec(i, args.seed)
        o = spec.object(OBJECT)
        specs.append((spec.name, o.friction[0], o.mass, spec))
    rows = []
    t0 = time.perf_counter()
    for name, mu, mass, spec in specs:
        extra = '' if spec is None else (f', latency {spec.robot.command_latency * 1e3:.0f} ms'
                                         f', joint damping redrawn')
        print(f'cell {name} (box friction {mu}, mass {mass} kg{extra}): training in its twin',
              flush=True)
        rows.append(bench_cell(robot, name, mu, mass, args, runs, spec=spec))
        r = rows[-1]
        print(f"  twin {r['twin']['success_rate']:.2f}, cell {r['cell']['success_rate']:.2f} "
              f"(expert on the cell {r['cell_expert']['success_rate']:.2f})", flush=True)
        out.write_text(json.dumps({'rows': rows, 'args': vars(args)}, indent=2, default=str))
    print_table(rows)
    print(f'{len(rows)} cells in {time.perf_counter() - t0:.0f} s; saved {out}')
    return 0


if __name__ == '__main__':
    import sys
    sys.exit(main())
