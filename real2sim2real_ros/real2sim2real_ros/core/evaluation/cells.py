"""Emulated cells for the evaluation: views of a cell for reconstruction, and cells drawn from
a prior of what real cells vary.

``draw_cells(prior='physics')`` (the default): the default cell with what identification must
find redrawn (:data:`PRIOR`): the box's sliding friction (0.2 to 1.0), its mass (0.05 to 1 kg,
log-uniform), every joint's damping (0.5 to 2 times the default cell's) and the command
latency (0 to 40 ms, whole ms: the emulated cell's delay queue has 1 ms resolution).

``draw_cells(prior='wide')`` (:data:`WIDE_PRIOR`): the cell itself varies too: the table's
height (0.3 m below to 0.2 m above the robot base) and placement, the task object's shape
(box, or an upright cylinder: slide_to_target strikes both; push_to_pose ends such a cell
UNSUPPORTED_OBJECT), size (4-15 cm), start pose (within the arm's reach of its goals) and
yaw, centre of mass offset and edge radius, friction (0.15-1.0) and mass (0.03-1.5 kg,
log-uniform), 0-3 other objects on the table (off the task's work area: the tool's approach
and every goal's sector), the camera's pose, every joint's damping, friction loss and
armature (0.5-2x), the gravity compensation, the latency and the contact stiffness. The arm
starts at its tool-down ready pose 0.2 m above the drawn table
(core/tasks/kinematics.ready_pose), or where the arm cannot hold the tool down there (a low
table), 0.2 m above its base.

``drake_share`` (issue 15): that share of the drawn cells runs on Drake (``engine: drake``),
the rest on MuJoCo, spread evenly over the indices (0.5: every second cell). A Drake cell
keeps every value the same draw gives a MuJoCo cell (its own random stream draws what only
Drake has, :data:`DRAKE_PRIOR`) and is named ``<name>_drake``. The engine is hidden truth:
nothing downstream of the world factory reads it.
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


WIDE_PRIOR = {
    'table_height': (-0.30, 0.20),        # m, top relative to the robot base
    'table_shift': (0.05, 0.10),          # m, |dx|, |dy| of the table centre from (0.6, 0)
    'cylinder_probability': 0.2,          # the task object's shape
    'size': (0.04, 0.15),                 # m, footprint extents; height 0.04-0.10
    'height': (0.04, 0.10),
    # m, the object's pose in the spec (where the task starts): its goals, up to 0.18 m
    # further in +x, stay within the arm's reach tool-down for every table height drawn
    'start_box': ((0.42, 0.56), (-0.12, 0.12)),
    'com_fraction': 0.15,                 # lateral COM offset up to this x the extent
    'edge_radius': (0.0, 0.005),          # m
    'friction': (0.15, 1.0),
    'mass': (0.03, 1.5),                  # kg, log-uniform
    'clutter': (0, 3),                    # other objects
    'clutter_gap': 0.06,                  # m of free table between two objects' footprints
    # the task's work area kept free of clutter (a lab clears the path): the tool's approach
    # behind the object and every goal's sector (slide_to_target: headings +-0.35 rad about
    # +x, 0.10-0.18 m; push_to_pose alike), as points within this of the object's start
    'work_area_back': 0.12,               # m behind (-x of) the object, the tool's approach
    'work_area_reach': 0.26,              # m ahead (+x), the farthest goal plus a box
    'work_area_half_angle': 0.45,         # rad
    'camera_eye_jitter': 0.06,            # m
    'camera_target_jitter': 0.04,         # m
    'joint_scale': (0.5, 2.0),            # damping, friction loss, armature vs the default's
    'gravity_compensation': (0.90, 1.0),
    'latency_ms': (0, 40),
    'solref_timeconst': (0.002, 0.008),   # s, contact stiffness
}


def _footprint_radius(obj: dict) -> float:
    s = obj['size']
    return float(np.hypot(s[0], s[1]) / 2 if obj['shape'] == 'box' else s[0] / 2)


def _work_area_points(xy, p=WIDE_PRIOR) -> np.ndarray:
    """Points (N, 2) of the task's work area around a start ``xy`` (see WIDE_PRIOR)."""
    pts = [np.asarray(xy, float) + [-d, 0.0] for d in np.linspace(0, p['work_area_back'], 7)]
    for a in np.linspace(-p['work_area_half_angle'], p['work_area_half_angle'], 7):
        for d in np.linspace(0, p['work_area_reach'], 14):
            pts.append(np.asarray(xy, float) + d * np.array([np.cos(a), np.sin(a)]))
    return np.array(pts)


def _draw_object(rng, oid: str, shape: str, xy, p=WIDE_PRIOR) -> dict:
    lo, hi = p['size']
    h = float(rng.uniform(*p['height']))
    if shape == 'box':
        size = [round(float(rng.uniform(lo, hi)), 4), round(float(rng.uniform(lo, hi)), 4),
                round(h, 4)]
        foot = min(size[:2])
    else:
        d = float(rng.uniform(lo, min(hi, 0.10)))
        size = [round(d, 4), round(h, 4)]
        foot = d
    r = float(rng.uniform(*p['edge_radius']))
    r = round(min(r, foot / 4, h / 4), 4)
    f = p['com_fraction']
    com = [round(float(rng.uniform(-f, f) * size[0]), 4),
           round(float(rng.uniform(-f, f) * (size[1] if shape == 'box' else size[0])), 4),
           round(float(rng.uniform(-0.2, 0.2) * h), 4)]
    lo_m, hi_m = p['mass']
    return {'id': oid, 'shape': shape, 'size': size,
            'pose': {'xyz': [round(float(xy[0]), 4), round(float(xy[1]), 4)],
                     'yaw': round(float(rng.uniform(-np.pi / 2, np.pi / 2)), 4)},
            'mass': round(float(np.exp(rng.uniform(np.log(lo_m), np.log(hi_m)))), 4),
            'com_offset': com,
            'friction': [round(float(rng.uniform(*p['friction'])), 3), 0.005, 0.0001],
            'edge_radius': r,
            'rgba': [round(float(v), 3) for v in rng.uniform(0.1, 0.9, 3)] + [1.0]}


def draw_wide_cell_data(rng: np.random.Generator, index: int, base: dict | None = None,
                        object_id: str = 'box_0') -> dict:
    """One cell spec (YAML mapping) drawn from :data:`WIDE_PRIOR` (module docstring)."""
    from ..robot_description import default_cell_urdf, load_robot
    from ..tasks.kinematics import READY_TIP, IKError, ready_pose
    p = WIDE_PRIOR
    data = copy.deepcopy(base if base is not None
                         else yaml.safe_load(open(default_cell_spec_path())))
    t = data['table']
    t['height'] = round(float(rng.uniform(*p['table_height'])), 4)
    cx = 0.6 + float(rng.uniform(-p['table_shift'][0], p['table_shift'][0]))
    cy = float(rng.uniform(-p['table_shift'][1], p['table_shift'][1]))
    t['center'] = [round(cx, 4), round(cy, 4)]
    shape = 'cylinder' if rng.random() < p['cylinder_probability'] else 'box'
    (x0, x1), (y0, y1) = p['start_box']
    task_obj = _draw_object(rng, object_id, shape, (rng.uniform(x0, x1), rng.uniform(y0, y1)))
    objects = [task_obj]
    half = np.array(t['size'][:2]) / 2
    work = _work_area_points(task_obj['pose']['xyz'][:2])
    for k in range(int(rng.integers(p['clutter'][0], p['clutter'][1] + 1))):
        kind = 'box' if rng.random() < 0.6 else 'cylinder'
        for _ in range(50):   # rejection: on the table, clear of every object so far and
            #                   of the task's work area
            xy = np.array([cx, cy]) + rng.uniform(-half + 0.08, half - 0.08)
            cand = _draw_object(rng, f'{kind}_{k + 1}', kind, xy)
            r = _footprint_radius(cand)
            clear_of_work = np.min(np.hypot(*(work - xy).T)) >= r + p['clutter_gap']
            if clear_of_work and all(np.hypot(*(xy - o['pose']['xyz'][:2])) >= r
                                     + _footprint_radius(o) + p['clutter_gap']
                                     for o in objects):
                objects.append(cand)
                break
    data['objects'] = objects
    cam = data['cameras'][0]
    eye = np.array(cam['pose']['xyz'], float) + rng.uniform(-1, 1, 3) * p['camera_eye_jitter']
    eye[2] += t['height']
    target = np.array([cx, cy, t['height']]) + np.append(
        rng.uniform(-1, 1, 2) * p['camera_target_jitter'], 0.0)
    cam['pose'] = {'xyz': [round(float(v), 4) for v in eye],
                   'look_at': [round(float(v), 4) for v in target]}
    rb = data['robot']
    for key in ('joint_damping', 'joint_frictionloss', 'armature'):
        scale = rng.uniform(*p['joint_scale'], len(rb[key]))
        rb[key] = [round(float(v * s), 4) for v, s in zip(rb[key], scale)]
    rb['gravity_compensation'] = round(float(rng.uniform(*p['gravity_compensation'])), 3)
    rb['command_latency'] = int(rng.integers(p['latency_ms'][0], p['latency_ms'][1] + 1)) / 1000
    # The ready pose 0.2 m above the table; where the arm cannot hold the tool down there
    # (a low table), the default's (0.2 m above the base).
    robot = load_robot(default_cell_urdf())
    try:
        q0 = ready_pose(robot, target=(READY_TIP[0], READY_TIP[1], READY_TIP[2] + t['height']),
                        n_seeds=6, explain=False)
    except IKError:
        q0 = ready_pose(robot)
    rb['initial_positions'] = [round(float(q), 6) for q in q0]
    c = data['contact']
    c['solref'] = [round(float(rng.uniform(*p['solref_timeconst'])), 4), 1.0]
    data['name'] = f'wide_{index}'
    data['seed'] = int(rng.integers(0, 2 ** 31 - 1))
    return data


PRIORS = ('physics', 'wide')

# What only Drake has, per drawn Drake cell (core/cell_spec.DrakeSpec): static over dynamic
# friction (1.0: no stick), the objects' hydroelastic modulus (Pa, log-uniform) and the
# Hunt-Crossley dissipation (s/m, log-uniform).
DRAKE_PRIOR = {
    'static_friction_ratio': (1.0, 1.5),
    'hydroelastic_modulus': (1.0e6, 2.0e7),
    'hunt_crossley_dissipation': (1.0, 10.0),
}


def is_drake_index(i: int, share: float) -> bool:
    """Does drawn cell ``i`` run on Drake when ``share`` of the cells do (evenly spread)?"""
    return int(np.floor((i + 1) * share + 1e-9)) > int(np.floor(i * share + 1e-9))


def as_drake_cell(data: dict, seed: int, index: int) -> dict:
    """``data`` (a drawn cell) on Drake: ``engine: drake`` and a ``drake:`` section from
    :data:`DRAKE_PRIOR`, drawn from its own stream (the cell's other values stay as drawn)."""
    rng = np.random.default_rng([int(seed), int(index), 15])
    p = DRAKE_PRIOR

    def log_uniform(lo, hi):
        return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
    out = copy.deepcopy(data)
    out['name'] = f'{data["name"]}_drake'
    out['engine'] = 'drake'
    out['drake'] = {
        'static_friction_ratio': round(float(rng.uniform(*p['static_friction_ratio'])), 3),
        'hydroelastic_modulus': float(f'{log_uniform(*p["hydroelastic_modulus"]):.3g}'),
        'hunt_crossley_dissipation': round(log_uniform(*p['hunt_crossley_dissipation']), 2),
    }
    return out


def draw_cells(n: int, seed: int = 0, out_dir: str | Path | None = None,
               prior: str = 'physics', drake_share: float = 0.0) -> list[CellSpec]:
    """``n`` cells from the prior (``'physics'``: :data:`PRIOR`; ``'wide'``:
    :data:`WIDE_PRIOR`), ``drake_share`` of them on Drake (module docstring); with
    ``out_dir`` each is also written as YAML (the record of what was evaluated)."""
    if prior not in PRIORS:
        raise ValueError(f'prior must be one of {PRIORS}, got {prior!r}')
    if not 0.0 <= drake_share <= 1.0:
        raise ValueError(f'drake_share must be within [0, 1], got {drake_share!r}')
    draw = draw_cell_data if prior == 'physics' else draw_wide_cell_data
    rng = np.random.default_rng(seed)
    specs = []
    for i in range(n):
        data = draw(rng, i)
        if is_drake_index(i, drake_share):
            data = as_drake_cell(data, seed, i)
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
