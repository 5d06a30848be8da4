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
