"""``r2s2r hold-test``: does a grasped box stay in the jaw while the arm carries it?

Runs core/grasping/hold.py's test (a box grasped, lifted, carried through a base turn) in the
MuJoCo twin with and without its grasp contact recipe and on emulated cells of both engines,
prints the slip per world and writes the figures as JSON (``--out``). Offline: no ROS graph.

Wiring: ``add_parser(subparsers)`` adds ``hold-test``; its ``func`` returns 0, or 2 with one
line on stderr for bad input (an unknown world, a robot without a gripper, a bad cell spec).
"""
from __future__ import annotations

import argparse
import dataclasses
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
                   help="'gripper' (urdf/cell_arm_gripper.urdf), "
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
    from ..core.robot_description import gripper_cell_urdf
    from ..core.tools import resolve_robot_urdf
    if name == 'gripper':
        return str(gripper_cell_urdf())
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


def cmd_hold_test(args) -> int:
    from ..core.artifacts import atomic_write_json
    from ..core.cell_spec import CellSpecError
    from ..core.emulated_world import WorldBuildError
    from ..core.grasping.jaw import GripperError
    from ..core.robot_description import RobotDescriptionError
    try:
        record = run(args)
    except (ValueError, OSError, CellSpecError, WorldBuildError, GripperError,
            RobotDescriptionError) as exc:
        print(f'r2s2r hold-test: error: {exc}', file=sys.stderr)
        return EXIT_USAGE
    if args.out:
        atomic_write_json(args.out, record)
        print(args.out)
    return EXIT_OK
