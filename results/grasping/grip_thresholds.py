"""The grip that holds the gripper cell's 8 x 6 x 5 cm box through gentle_pick_and_place's
lift, per world: the twin (its grasp recipe), the MuJoCo cell and the Drake cell made from
config/cells/gripper.yaml (its box at the given mass, alone on the table), 3 episodes per
closing effort with zero offsets, true start pose; success as the task declares it.

    scripts/env.sh python results/grasping/grip_thresholds.py \
        --out results/grasping/grip_thresholds.json        # about 4 min
"""
import argparse
import copy
import json
from pathlib import Path

import numpy as np
import yaml

from real2sim2real_ros.core.cell_spec import load_cell_spec
from real2sim2real_ros.core.robot_description import gripper_cell_urdf, load_robot
from real2sim2real_ros.core.tasks import get_task
from real2sim2real_ros.core.tasks.worlds import CellWorld, TaskObject, TwinWorld, task_scene_xml
from real2sim2real_ros.core.twin import Twin
from real2sim2real_ros.core.world import make_world

CELLS = Path(__file__).resolve().parents[2] / 'real2sim2real_ros' / 'config' / 'cells'
SIZE = (0.08, 0.06, 0.05)
EFFORTS = {0.21: (2.0, 3.0, 4.0, 6.0, 8.0), 0.9: (8.0, 12.0, 15.0, 18.0, 20.0, 25.0)}


def world_for(engine: str, mass: float, robot):
    if engine == 'twin':
        xml = task_scene_xml(TaskObject('box_0', SIZE, mass, 0.55))
        return TwinWorld(Twin(robot, xml), 'box_0'), None
    base = yaml.safe_load((CELLS / 'gripper.yaml').read_text())
    base['cameras'] = []
    base['objects'] = [dict(base['objects'][0], id='box_0', mass=mass,
                            pose={'xyz': [0.75, 0.3], 'yaw': 0.0})]
    base['engine'] = engine
    if engine == 'drake':
        base['drake'] = yaml.safe_load((CELLS / 'drake_default.yaml').read_text())['drake']
    world = make_world(load_cell_spec(copy.deepcopy(base)))
    return CellWorld(world, 'box_0'), world.close


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--out', required=True)
    args = ap.parse_args()
    robot = load_robot(gripper_cell_urdf())
    task = get_task('gentle_pick_and_place', robot, {'object_size': SIZE})
    rows = []
    for engine in ('twin', 'mujoco', 'drake'):
        for mass, efforts in EFFORTS.items():
            world, close = world_for(engine, mass, robot)
            try:
                for effort in efforts:
                    rng = np.random.default_rng(0)
                    ok = 0
                    for _ in range(3):
                        reset = task.sample_reset(rng)
                        res = task.run_episode(world, reset,
                                               lambda _o, e=effort: np.array([0, 0, 0, 0, e]))
                        ok += int(res.success)
                    rows.append({'world': engine, 'mass_kg': mass, 'effort_n': effort,
                                 'successes': ok, 'episodes': 3})
                    print(rows[-1], flush=True)
            finally:
                if close is not None:
                    close()
    Path(args.out).write_text(json.dumps({'box_size_m': SIZE, 'rows': rows}, indent=1))


if __name__ == '__main__':
    main()
