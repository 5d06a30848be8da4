"""Evaluator side: compare a reconstruction with the cell's hidden truth.

Only tests and the evaluator call this (it takes truth objects: anything with ``id``,
``shape``, ``extents`` (full, along object axes), ``xyz`` and ``yaw``, e.g. cell_spec.ObjectSpec).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import trimesh
from scipy.optimize import linear_sum_assignment
from scipy.spatial import cKDTree

from ..geometry import angle_gap
from .meshes import primitive_mesh


@dataclass
class ObjectError:
    """One matched object: ids, whether the shape matches, position (m) and yaw (rad) and size
    errors."""
    truth_id: str
    found_id: str
    shape_ok: bool
    position_error: float        # m, Euclidean, centre of the shape
    yaw_error: float             # rad, modulo the shape's symmetry (nan for cylinders)
    extents_error: float         # m, largest per-axis error after symmetry matching
    chamfer: float               # m, symmetric mean surface distance


@dataclass
class SceneErrors:
    """A reconstruction scored against the truth: matched objects, missed and spurious ids."""
    matched: list[ObjectError]
    missed: list[str]            # truth ids without a found object
    spurious: list[str]          # found ids without a truth object

    @property
    def counts_match(self) -> bool:
        """True when no truth object is missed and no found object is spurious."""
        return not self.missed and not self.spurious


def yaw_and_extent_errors(shape: str, found_yaw: float, found_ext, true_yaw: float,
                          true_ext) -> tuple[float, float]:
    """Box: the smallest error over the box's 90-degree symmetries (extents swap with it)."""
    found_ext, true_ext = np.asarray(found_ext, float), np.asarray(true_ext, float)
    if shape == 'cylinder':
        return float('nan'), float(np.max(np.abs(found_ext - true_ext)))
    candidates = []
    for k in range(4):
        ext = found_ext[[1, 0, 2]] if k % 2 else found_ext
        yaw_err = angle_gap(found_yaw + k * np.pi / 2, true_yaw, np.pi)
        ext_err = float(np.max(np.abs(ext - true_ext)))
        # Extents decide (a square box is yaw-symmetric by 90 deg); 1 rad ~ 5 cm breaks ties.
        candidates.append((ext_err + 0.05 * yaw_err, yaw_err, ext_err))
    _, yaw_err, ext_err = min(candidates)
    best = (yaw_err, ext_err)
    return best


def _posed_mesh(shape, extents, xyz, yaw, mesh_path: str = '') -> trimesh.Trimesh:
    mesh = trimesh.load(mesh_path, force='mesh') if mesh_path else primitive_mesh(shape,
                                                                                  extents)
    tf = np.eye(4)
    c, s = np.cos(yaw), np.sin(yaw)
    tf[:3, :3] = [[c, -s, 0], [s, c, 0], [0, 0, 1]]
    tf[:3, 3] = xyz
    return mesh.copy().apply_transform(tf)


def chamfer_distance(mesh_a: trimesh.Trimesh, mesh_b: trimesh.Trimesh, n: int = 4000,
                     seed: int = 0) -> float:
    """Symmetric mean nearest-surface-point distance between two meshes (m)."""
    a, _ = trimesh.sample.sample_surface(mesh_a, n, seed=seed)
    b, _ = trimesh.sample.sample_surface(mesh_b, n, seed=seed + 1)
    da, _ = cKDTree(b).query(a)
    db, _ = cKDTree(a).query(b)
    return float((da.mean() + db.mean()) / 2)


def evaluate(found, truth, max_match_distance: float = 0.05) -> SceneErrors:
    """Match found objects (ReconstructedObject) to truth by centre distance (Hungarian)."""
    found, truth = list(found), list(truth)
    if not found or not truth:
        return SceneErrors([], [t.id for t in truth], [f.id for f in found])
    cost = np.array([[np.linalg.norm(np.asarray(f.position) - np.asarray(t.xyz)) for t in truth]
                     for f in found])
    rows, cols = linear_sum_assignment(cost)
    matched, used_f, used_t = [], set(), set()
    for i, j in zip(rows, cols):
        if cost[i, j] > max_match_distance:
            continue
        f, t = found[i], truth[j]
        used_f.add(i)
        used_t.add(j)
        yaw_err, ext_err = yaw_and_extent_errors(t.shape, f.yaw, f.extents, t.yaw, t.extents)
        fm = _posed_mesh(f.shape, f.extents, f.position, f.yaw,
                         f.mesh_path if f.shape == 'mesh' else '')
        tm = _posed_mesh(t.shape, t.extents, t.xyz, t.yaw)
        matched.append(ObjectError(t.id, f.id, f.shape == t.shape, float(cost[i, j]), yaw_err,
                                   ext_err, chamfer_distance(fm, tm)))
    return SceneErrors(matched, [t.id for j, t in enumerate(truth) if j not in used_t],
                       [f.id for i, f in enumerate(found) if i not in used_f])
