"""Robot masks: world points -> True where they lie on the robot (known geometry + FK)."""
from __future__ import annotations

import numpy as np


def geom_box_mask(centres: np.ndarray, rotations: np.ndarray, half_sizes: np.ndarray,
                  margin: float = 0.01):
    """Mask of points inside any oriented box (inflated by ``margin``).

    centres (G, 3), rotations (G, 3, 3) world-from-box, half_sizes (G, 3).
    """
    centres = np.asarray(centres, float)
    rotations = np.asarray(rotations, float)
    half = np.asarray(half_sizes, float) + margin

    def mask(points: np.ndarray) -> np.ndarray:
        pts = np.asarray(points, float)
        out = np.zeros(len(pts), bool)
        for c, r, h in zip(centres, rotations, half):
            local = (pts - c) @ r
            out |= np.all(np.abs(local) <= h, axis=1)
        return out
    return mask


def mujoco_robot_mask(model, data, body_prefix: str = 'robot/', margin: float = 0.01):
    """Mask from the bounding boxes of every geom of bodies named ``body_prefix*``, at the
    configuration in ``data`` (after mj_forward): what the robot's URDF + FK give a real cell."""
    import mujoco
    centres, rots, halves = [], [], []
    for g in range(model.ngeom):
        body = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, model.geom_bodyid[g]) or ''
        if not body.startswith(body_prefix):
            continue
        aabb = model.geom_aabb[g]                   # centre (3), half sizes (3), geom frame
        rot = data.geom_xmat[g].reshape(3, 3)
        centres.append(data.geom_xpos[g] + rot @ aabb[:3])
        rots.append(rot)
        halves.append(aabb[3:])
    if not centres:
        raise ValueError(f'no geoms on bodies named {body_prefix!r}*')
    return geom_box_mask(np.array(centres), np.array(rots), np.array(halves), margin)


def description_robot_mask(robot, configurations, margin: float = 0.01):
    """Mask from a RobotDescription (core.robot_description.load_robot: the URDF, base at the
    world origin) at each joint configuration ``{joint name: position}`` (union over them:
    an arm that moved between views hides its every pose). Joints a configuration lacks stay
    at their URDF zero; raises ValueError when one has none of the robot's joints."""
    import mujoco
    model = robot.compile()
    data = mujoco.MjData(model)
    idx = robot.qpos_indices(model)
    masks = []
    for config in configurations or [{}]:
        known = [n for n in robot.joint_names if n in config]
        if configurations and not known:
            raise ValueError(f'joint states name none of the robot joints '
                             f'{list(robot.joint_names)} (got {sorted(config)})')
        data.qpos[:] = model.qpos0
        data.qpos[idx] = [config.get(n, 0.0) for n in robot.joint_names]
        mujoco.mj_kinematics(model, data)
        masks.append(_geom_masks(model, data, margin))
    if len(masks) == 1:
        return masks[0]

    def union(points: np.ndarray) -> np.ndarray:
        out = masks[0](points)
        for m in masks[1:]:
            out |= m(points)
        return out
    return union


def _geom_masks(model, data, margin: float):
    """Oriented boxes around every geom not on the world body, at ``data``'s configuration."""
    centres, rots, halves = [], [], []
    for g in range(model.ngeom):
        if model.geom_bodyid[g] == 0:
            continue
        aabb = model.geom_aabb[g]
        rot = data.geom_xmat[g].reshape(3, 3)
        centres.append(data.geom_xpos[g] + rot @ aabb[:3])
        rots.append(rot)
        halves.append(aabb[3:])
    if not centres:
        raise ValueError('the robot has no geoms to mask')
    return geom_box_mask(np.array(centres), np.array(rots), np.array(halves), margin)
