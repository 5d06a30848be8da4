"""``r2s2r hold-test``: does a grasped box stay in the jaw while the arm carries it?
(``expert-check``: a task's scripted expert; ``slip-test``: the finger friction from a
controlled slip.)

Runs core/grasping/hold.py's test (a box grasped, lifted, carried through a base turn) in the
MuJoCo twin with and without its grasp contact recipe and on emulated cells of both engines,
prints the slip per world and writes the figures as JSON (``--out``). Offline: no ROS graph.

Wiring: ``add_parser(subparsers)`` adds ``hold-test``; its ``func`` returns 0, or 2 with one
line on stderr for bad input (an unknown world, a robot without a gripper, a bad cell spec).
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import sys
import time
from pathlib import Path

EXIT_OK, EXIT_USAGE = 0, 2
WORLDS = ('twin', 'twin-plain', 'mujoco', 'drake')
SLIP_TARGET_MM = 2.0


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        'hold-test', help='grasp, lift and carry a box: slip in the twin and on the cells',
        description='The hold test (docs/grasping.md): a box grasped, lifted and carried '
                    'through a base turn; prints its slip in the grasp per world.')
    p.add_argument('--robot', default='gripper',
                   help="'gripper' (urdf/cell_arm_gripper.urdf), 'default' (the pusher arm), "
                        "'example-robot-data:panda' or a URDF path (default: gripper)")
    p.add_argument('--cell', default='',
                   help='cell spec YAML whose servo, contact and camera values the cells use '
                        '(default: config/cells/default.yaml; panda.yaml for a Panda)')
    p.add_argument('--worlds', default=','.join(WORLDS),
                   help=f'comma-separated, of {list(WORLDS)} (default: all)')
    p.add_argument('--effort', type=float, default=None, help='jaw effort, N (default 30)')
    p.add_argument('--mass', type=float, default=None, help='box mass, kg (default 0.2)')
    p.add_argument('--turn-rate', type=float, default=None,
                   help='base turn speed, rad/s (default 1.0)')
    p.add_argument('--out', default='', help='write the results as JSON here')
    p.set_defaults(func=cmd_hold_test)
    return p


def _robot_urdf(name: str) -> str:
    from ..core.robot_description import default_cell_urdf, gripper_cell_urdf
    from ..core.tools import resolve_robot_urdf
    if name == 'gripper':
        return str(gripper_cell_urdf())
    if name == 'default':
        return str(default_cell_urdf())
    if name.startswith('example-robot-data:'):
        return str(resolve_robot_urdf(name))
    return name


def _cells_dir() -> Path:
    here = Path(__file__).resolve().parents[2] / 'config' / 'cells'
    if here.is_dir():
        return here
    from ament_index_python.packages import get_package_share_directory
    return Path(get_package_share_directory('real2sim2real_ros')) / 'config' / 'cells'


def _base_cell(path: str, urdf_name: str) -> tuple[dict, str]:
    import yaml
    shown = path
    if not path:
        stem = 'panda' if 'panda' in urdf_name else 'default'
        path, shown = str(_cells_dir() / f'{stem}.yaml'), f'config/cells/{stem}.yaml'
    with open(path, encoding='utf-8') as fh:
        return yaml.safe_load(fh), shown


def run(args) -> dict:
    """The hold test for the parsed ``args``; returns the JSON-ready record."""
    from ..core.grasping.hold import HoldConfig, hold_in_twin, hold_on_cells
    from ..core.robot_description import load_robot
    worlds = [w.strip() for w in args.worlds.split(',') if w.strip()]
    unknown = sorted(set(worlds) - set(WORLDS))
    if unknown or not worlds:
        raise ValueError(f'--worlds: unknown {unknown or worlds}; choose from {list(WORLDS)}')
    urdf = _robot_urdf(args.robot)
    robot = load_robot(urdf)
    cfg = HoldConfig()
    for field, value in (('effort', args.effort), ('box_mass', args.mass),
                         ('turn_rate', args.turn_rate)):
        if value is not None:
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f'--{field.replace("box_", "").replace("_", "-")}: must be '
                                 f'> 0, got {value}')
            cfg = dataclasses.replace(cfg, **{field: value})
    base, base_path = _base_cell(args.cell, args.robot)
    results = []
    for world in worlds:
        t0 = time.monotonic()
        if world.startswith('twin'):
            res = [hold_in_twin(robot, cfg, recipe=world == 'twin')]
        else:
            res = hold_on_cells(robot, urdf, base, cfg, engines=(world,))
        for r in res:
            rec = r.to_dict()
            rec['wall_s'] = round(time.monotonic() - t0, 2)
            results.append(rec)
            print(f"{rec['world']:<12} slip after lift {r.slip_mm['lifted']:5.2f} mm, after "
                  f"turn {r.slip_mm['turned']:5.2f} mm, after hold {r.slip_mm['end']:5.2f} mm"
                  f"  (jaw {1000 * r.jaw_position:.1f} mm at {abs(r.jaw_effort):.1f} N; "
                  f"box lifted {1000 * r.box_lifted:.0f} mm)", file=sys.stderr)
    return {'robot': args.robot, 'robot_urdf_name': robot.name, 'cell': base_path,
            'config': dataclasses.asdict(cfg), 'slip_target_mm': SLIP_TARGET_MM,
            'results': results,
            'command': 'r2s2r hold-test ' + ' '.join(sys.argv[2:])}


def _main(verb: str, run_fn, args) -> int:
    """Run ``run_fn(args)``; one error line and exit 2 for bad input, the JSON to --out."""
    from ..core.artifacts import atomic_write_json
    from ..core.cell_spec import CellSpecError
    from ..core.emulated_world import WorldBuildError
    from ..core.grasping.jaw import GripperError
    from ..core.robot_description import RobotDescriptionError
    try:
        record = run_fn(args)
    except (ValueError, OSError, CellSpecError, WorldBuildError, GripperError,
            RobotDescriptionError) as exc:     # TaskError is a ValueError
        print(f'r2s2r {verb}: error: {exc}', file=sys.stderr)
        return EXIT_USAGE
    if args.out:
        atomic_write_json(args.out, record)
        print(args.out)
    return EXIT_OK


def cmd_hold_test(args) -> int:
    """``r2s2r hold-test``."""
    return _main('hold-test', run, args)


# ----------------------------------------------------------------------------- expert-check

def add_expert_parser(subparsers) -> argparse.ArgumentParser:
    """``r2s2r expert-check``: a task's scripted expert in the twin and on the cells."""
    p = subparsers.add_parser(
        'expert-check', help="a task's scripted expert: success in the twin and on the cells",
        description="Run a task's scripted expert for N episodes in a twin of the task's "
                    'object and on emulated cells of both engines (the policy observes the '
                    'true start pose: observation source "truth"); print and write the '
                    'success per world.')
    p.add_argument('--task', default='pick_and_place', help='a task name or YAML')
    p.add_argument('--robot', default='gripper', help="as hold-test's --robot")
    p.add_argument('--cell', default='', help='cell spec YAML of the cells (default: '
                   'config/cells/gripper.yaml; its first box takes the task\'s object size)')
    p.add_argument('--worlds', default='twin,mujoco,drake',
                   help="comma-separated, of ['twin', 'mujoco', 'drake']")
    p.add_argument('--episodes', type=int, default=20, help='episodes per world')
    p.add_argument('--seed', type=int, default=0, help='seed of the episodes and the expert')
    p.add_argument('--out', default='', help='write the results as JSON here')
    p.set_defaults(func=cmd_expert_check)
    return p


def _expert_worlds(args, robot, task, urdf):
    """[(name, task backend, closer)] for the requested worlds."""
    import copy

    import yaml

    from ..core.cell_spec import load_cell_spec
    from ..core.tasks.worlds import CellWorld, TaskObject, TwinWorld, task_scene_xml
    from ..core.twin import Twin
    from ..core.world import make_world
    names = [w.strip() for w in args.worlds.split(',') if w.strip()]
    unknown = sorted(set(names) - {'twin', 'mujoco', 'drake'})
    if unknown or not names:
        raise ValueError(f"--worlds: unknown {unknown or names}; choose from "
                         "['twin', 'mujoco', 'drake']")
    path = args.cell or str(_cells_dir() / 'gripper.yaml')
    with open(path, encoding='utf-8') as fh:
        base = yaml.safe_load(fh)
    base['cameras'] = []
    base['robot'] = dict(base['robot'], urdf=urdf)
    boxes = [o for o in base['objects'] if o.get('shape') == 'box']
    if not boxes:
        raise ValueError(f'--cell {path}: has no box for the task to act on')
    scene = task.scene_objects()   # the manipulated box first, then any other (a base)
    base['objects'] = [dict(boxes[0], id=oid, size=list(size),
                            pose={'xyz': [0.75, 0.3 + 0.15 * k], 'yaw': 0.0})
                       for k, (oid, size) in enumerate(scene)]
    out = []
    for name in names:
        if name == 'twin':
            objs = [TaskObject(oid, tuple(size)) for oid, size in scene]
            xml = task_scene_xml(objs[0], others=tuple(objs[1:]))
            out.append(('twin', TwinWorld(Twin(robot, xml), task.object_id), None))
        else:
            world = make_world(load_cell_spec(dict(copy.deepcopy(base), engine=name)))
            out.append((f'{name}_cell', CellWorld(world, task.object_id), world.close))
    return out, path


def run_expert(args) -> dict:
    """The expert check for the parsed ``args``; returns the JSON-ready record."""
    import numpy as np

    from ..core.robot_description import load_robot
    from ..core.tasks import get_task
    if args.episodes < 1:
        raise ValueError(f'--episodes: must be >= 1, got {args.episodes}')
    urdf = _robot_urdf(args.robot)
    robot = load_robot(urdf)
    task = get_task(args.task, robot)
    worlds, cell = _expert_worlds(args, robot, task, urdf)
    results = []
    for name, world, close in worlds:
        rng = np.random.default_rng(args.seed)
        t0, episodes = time.monotonic(), []
        try:
            for _ in range(args.episodes):
                reset = task.sample_reset(rng)
                res = task.run_episode(world, reset, task.scripted_demo_policy(reset, rng))
                episodes.append({'success': bool(res.success),
                                 'final_error_m': round(float(res.final_error), 5),
                                 'upright': bool(res.info.get('upright', False))})
        finally:
            if close is not None:
                close()
        n_ok = sum(e['success'] for e in episodes)
        err = [e['final_error_m'] for e in episodes]
        results.append({'world': name, 'success': n_ok, 'episodes': len(episodes),
                        'mean_error_m': round(float(np.mean(err)), 5),
                        'max_error_m': round(float(np.max(err)), 5),
                        'wall_s': round(time.monotonic() - t0, 1), 'per_episode': episodes})
        print(f'{name:<12} {n_ok}/{len(episodes)} succeeded; distance to the target centre '
              f'mean {1000 * np.mean(err):.1f} mm, max {1000 * np.max(err):.1f} mm',
              file=sys.stderr)
    return {'task': task.name, 'robot': args.robot, 'cell': args.cell or
            'config/cells/gripper.yaml', 'observation_source': 'truth', 'seed': args.seed,
            'results': results, 'command': 'r2s2r expert-check ' + ' '.join(sys.argv[2:])}


def cmd_expert_check(args) -> int:
    """``r2s2r expert-check``."""
    return _main('expert-check', run_expert, args)


# ----------------------------------------------------------------------------- slip-test

def add_slip_parser(subparsers) -> argparse.ArgumentParser:
    """``r2s2r slip-test``: the finger friction from a controlled slip, on the cells."""
    p = subparsers.add_parser(
        'slip-test', help='identify the finger-object friction from a controlled slip',
        description='The slip probe (core/grasping/slip.py: a box grasped, lifted, the '
                    'closing effort lowered step by step until the jaw closes past it) on '
                    'emulated cells of each engine and box friction, and its fit in a twin '
                    'given the box\'s mass: the twin\'s finger friction at which its box '
                    'comes out at the same step. The grasp is planned from the true start '
                    '(observation source "truth").')
    p.add_argument('--task', default='gentle_pick_and_place', help='a grasping task name or '
                   'YAML (its box size and motion)')
    p.add_argument('--robot', default='gripper', help="as hold-test's --robot")
    p.add_argument('--cell', default='', help="cell spec YAML (default: "
                   "config/cells/gripper.yaml); its first box is the probed one")
    p.add_argument('--engines', default='mujoco,drake', help='comma-separated cell engines')
    p.add_argument('--frictions', default='0.2,0.35,0.55,0.9',
                   help="comma-separated box frictions (the cells' dynamic; Drake's static "
                        'is drake.static_friction_ratio x it)')
    p.add_argument('--masses', default='0.21', help='comma-separated box masses, kg (each '
                   'with each friction; default 0.21)')
    p.add_argument('--seed', type=int, default=0, help='seed of the start pose')
    p.add_argument('--out', default='', help='write the results as JSON here')
    p.set_defaults(func=cmd_slip_test)
    return p


def run_slip(args) -> dict:
    """The slip test for the parsed ``args``; returns the JSON-ready record."""
    import numpy as np
    import yaml

    from ..core.grasping.slip import SlipConfig
    from ..core.robot_description import load_robot
    from ..core.tasks import get_task
    engines = [e.strip() for e in args.engines.split(',') if e.strip()]
    if not engines or set(engines) - {'mujoco', 'drake'}:
        raise ValueError(f"--engines: choose from ['mujoco', 'drake'], got {args.engines!r}")
    frictions = [float(v) for v in args.frictions.split(',') if v.strip()]
    if not frictions or not all(0 < f <= 2 for f in frictions):
        raise ValueError(f'--frictions: values in (0, 2] expected, got {args.frictions!r}')
    masses = [float(v) for v in args.masses.split(',') if v.strip()]
    if not masses or not all(math.isfinite(m) and m > 0 for m in masses):
        raise ValueError(f'--masses: values > 0 kg expected, got {args.masses!r}')
    urdf = _robot_urdf(args.robot)
    robot = load_robot(urdf)
    task = get_task(args.task, robot)
    if not hasattr(task, 'grasp_plan'):
        raise ValueError(f'--task {args.task}: not a grasping task')
    path = args.cell or str(_cells_dir() / 'gripper.yaml')
    with open(path, encoding='utf-8') as fh:
        base = yaml.safe_load(fh)
    boxes = [o for o in base.get('objects', []) if o.get('shape') == 'box']
    if not boxes:
        raise ValueError(f'--cell {path}: has no box to probe')
    base['cameras'] = []
    base['robot'] = dict(base['robot'], urdf=urdf)
    cfg = SlipConfig()
    reset = task.sample_reset(np.random.default_rng(args.seed))
    results = [_slip_case(robot, task, base, boxes[0], engine, mass, friction, reset, cfg)
               for engine, mass, friction in itertools.product(engines, masses, frictions)]
    return {'task': task.name, 'robot': args.robot, 'cell': args.cell or
            'config/cells/gripper.yaml', 'observation_source': 'truth', 'seed': args.seed,
            'config': dataclasses.asdict(cfg), 'twin_mass': 'the cell box\'s (given)',
            'results': results, 'command': 'r2s2r slip-test ' + ' '.join(sys.argv[2:])}


def _slip_case(robot, task, base, box, engine, mass, friction, reset, cfg) -> dict:
    """One cell of the slip test: the probe on it, the fit in a twin given its box's mass,
    the held mass from the arm's efforts; printed and returned as a JSON-ready record."""
    import copy

    from ..core.cell_spec import load_cell_spec
    from ..core.grasping.slip import (
        fit_finger_friction,
        friction_covered,
        friction_error,
        held_mass,
        run_slip_probe,
    )
    from ..core.tasks.worlds import CellWorld, TaskObject, TwinWorld, task_scene_xml
    from ..core.twin import Twin
    from ..core.world import make_world
    size = tuple(task.cfg.object_size)
    spec = dict(copy.deepcopy(base), engine=engine)
    spec['objects'] = [dict(box, id=task.object_id, size=list(size), mass=mass,
                            friction=[friction, 0.005, 0.0001])]
    cell_spec = load_cell_spec(spec)
    static = friction * (cell_spec.drake.static_friction_ratio if engine == 'drake' else 1.0)
    t0 = time.monotonic()
    world = make_world(cell_spec)
    try:
        run = run_slip_probe(task, CellWorld(world, task.object_id), reset, cfg)
    finally:
        world.close()
    t1 = time.monotonic()
    twin = Twin(robot, task_scene_xml(TaskObject(task.object_id, size, mass)))
    try:
        fit = fit_finger_friction(task, TwinWorld(twin, task.object_id), run, cfg)
    finally:
        twin.close()
    held = held_mass(robot, run)
    slip = run.slip_effort
    print(f'{engine:<7} {mass:.3f} kg, friction {friction:.2f} (static {static:.3f}): out at '
          f"{'-' if slip is None else f'{slip:.2f} N'}; twin finger friction "
          f'{fit.value:.3f} [{fit.lower_95:.3f}, {fit.upper_95:.3f}]'
          f"{'' if fit.identified else ' (bound: ' + fit.note + ')'}; held mass "
          f"{'-' if held is None else f'{held[0]:.3f} +- {held[1]:.3f} kg'}", file=sys.stderr)
    return {'engine': engine, 'box_friction': friction, 'static_friction': static,
            'mass': mass, 'cell': run.to_dict(), 'fit': fit.to_dict(),
            'covered': friction_covered(fit.lower_95, fit.upper_95, friction, static),
            'relative_error': friction_error(fit.value, friction, static),
            'held_mass': None if held is None else list(held),
            'held_mass_covered': None if held is None else
            bool(abs(held[0] - mass) <= held[1]),
            'cell_s': round(t1 - t0, 2), 'fit_s': round(time.monotonic() - t1, 2)}


def cmd_slip_test(args) -> int:
    """``r2s2r slip-test``."""
    return _main('slip-test', run_slip, args)
