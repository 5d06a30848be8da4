"""Emulated cells for the evaluation: views of a cell for reconstruction, and cells drawn from
the wide prior of hidden physics the issue asks the loop to cope with.

Drawn cells start from the default cell and redraw what identification must find: the box's
sliding friction (0.2 to 1.0), its mass (0.05 to 1 kg, log-uniform), every joint's damping
(0.5 to 2 times the default cell's) and the command latency (0 to 40 ms, whole ms: the
emulated cell's delay queue has 1 ms resolution).
"""
from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import numpy as np
import yaml

from ..cell_spec import CellSpec, default_cell_spec_path, load_cell_spec, look_at_rotation

PRIOR = {
    'friction': (0.2, 1.0),
    'mass': (0.05, 1.0),
    'damping_scale': (0.5, 2.0),
    'latency_ms': (0, 40),
}


def draw_cell_data(rng: np.random.Generator, index: int, base: dict | None = None,
                   object_id: str = 'box_0') -> dict:
    """One cell spec (YAML mapping) with hidden physics drawn from :data:`PRIOR`."""
    data = copy.deepcopy(base if base is not None
                         else yaml.safe_load(open(default_cell_spec_path())))
    objs = [o for o in data['objects'] if o['id'] == object_id]
    if not objs:
        raise ValueError(f'the base cell has no object {object_id!r}')
    obj = objs[0]
    mu = float(rng.uniform(*PRIOR['friction']))
    lo, hi = PRIOR['mass']
    mass = float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
    obj['friction'] = [round(mu, 3), *obj['friction'][1:]]
    obj['mass'] = round(mass, 3)
    scale = rng.uniform(*PRIOR['damping_scale'], len(data['robot']['joint_damping']))
    data['robot']['joint_damping'] = [round(float(d * s), 4) for d, s in
                                      zip(data['robot']['joint_damping'], scale)]
    data['robot']['command_latency'] = int(rng.integers(PRIOR['latency_ms'][0],
                                                        PRIOR['latency_ms'][1] + 1)) / 1000.0
    data['name'] = f'drawn_{index}'
    data['seed'] = int(rng.integers(0, 2 ** 31 - 1))
    return data


def draw_cells(n: int, seed: int = 0, out_dir: str | Path | None = None) -> list[CellSpec]:
    """``n`` cells from the prior; with ``out_dir`` each is also written as YAML (the record
    of what was evaluated)."""
    rng = np.random.default_rng(seed)
    specs = []
    for i in range(n):
        data = draw_cell_data(rng, i)
        if out_dir is not None:
            path = Path(out_dir) / f'{data["name"]}.yaml'
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(data, sort_keys=False))
            specs.append(load_cell_spec(str(path)))
        else:
            specs.append(load_cell_spec(data))
    return specs


def ring_cameras(spec: CellSpec, n: int, radius: float = 0.55,
                 height: float = 0.6) -> CellSpec:
    """``spec`` with ``n`` cameras (copies of its first) on an arc around the table centre, all
    looking at it: the views a hand-held or wrist-mounted capture sweep gives. The arc leaves
    out the side of the robot base (a camera there would look into the arm)."""
    base = spec.cameras[0]
    t = spec.table
    centre = np.array([t.center[0], t.center[1], t.height])
    cams = []
    for i in range(n):
        a = np.radians(-135 + 270 * i / (n - 1)) if n > 1 else -np.pi / 2
        eye = centre + [radius * np.cos(a), radius * np.sin(a), height]
        rot = look_at_rotation(eye, centre)
        cams.append(dataclasses.replace(base, name=f'ring{i}', position=tuple(eye),
                                        rotation=tuple(map(tuple, rot))))
    return dataclasses.replace(spec, cameras=tuple(cams))


def capture_views(world, spec: CellSpec, calibration_error: bool = True, robot=None):
    """(views, robot mask) rendered by ``world`` from every camera of ``spec``, with the pose a
    real calibration would publish (the spec's calibration error drawn once per camera).
    The mask: with ``robot`` (a RobotDescription, the URDF) at the measured joint states, as
    a real cell's; without, from the world's own model (a truth read)."""
    from .. import camera_model
    from ..reconstruction import CameraIntrinsics, CaptureView
    from ..reconstruction.robot_mask import description_robot_mask, mujoco_robot_mask
    from ..reconstruction.views import pose_matrix
    rng = np.random.default_rng(spec.seed)
    views = []
    for cam in spec.cameras:
        rgb, depth = world.render(cam.name)
        rot, pos = cam.rotation_matrix, np.asarray(cam.position)
        if calibration_error:
            rot, pos = camera_model.perturb_pose(rot, pos, cam.calibration_error_translation,
                                                 cam.calibration_error_rotation, rng)
        intr = CameraIntrinsics(cam.fx, cam.fy, cam.cx, cam.cy, cam.width, cam.height)
        views.append(CaptureView(rgb, depth, intr, pose_matrix(rot, pos), cam.name))
    if robot is not None:
        q = dict(zip(world.joint_names, (float(v) for v in world.joint_positions())))
        return views, description_robot_mask(robot, [q])
    return views, mujoco_robot_mask(world.model, world.data)
