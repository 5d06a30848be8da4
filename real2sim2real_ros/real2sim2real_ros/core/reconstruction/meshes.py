"""Watertight meshes and collision geometry for reconstructed objects.

A well-fitted primitive gets the primitive's own mesh (exact, watertight) and collides as the
primitive. Anything else gets a surface from its points (alpha shape, closed at the table by
the footprint projected onto it; the convex hull when that is not watertight) and collision
hulls from CoACD, each capped in vertices. Meshes are in the object's frame, metres, STL.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import trimesh
from scipy.spatial import ConvexHull, QhullError

from ..artifacts import atomic_write_bytes


@dataclass
class MeshOutputs:
    """Meshes written for one object: its visual mesh, collision pieces, and whether it is
    watertight."""
    mesh_path: Path
    collision_paths: list[Path] = field(default_factory=list)
    watertight: bool = True


def primitive_mesh(shape: str, extents) -> trimesh.Trimesh:
    """A trimesh of a box or cylinder with ``extents`` (m) centred at the origin."""
    ext = np.asarray(extents, float)
    if shape == 'box':
        return trimesh.creation.box(extents=ext)
    if shape == 'cylinder':
        return trimesh.creation.cylinder(radius=ext[0] / 2, height=ext[2], sections=48)
    raise ValueError(f'no primitive mesh for shape {shape!r}')


def primitive_volume(shape: str, extents) -> float:
    """Volume in m^3 of a box or cylinder with ``extents`` (m)."""
    ext = np.asarray(extents, float)
    if shape == 'box':
        return float(np.prod(ext))
    if shape == 'cylinder':
        return float(np.pi * (ext[0] / 2) ** 2 * ext[2])
    raise ValueError(f'no primitive volume for shape {shape!r}')


def _closed_points(points: np.ndarray) -> np.ndarray:
    """The points plus their footprint on the table (z = 0): the unseen bottom closes them."""
    base = points.copy()
    base[:, 2] = 0.0
    return np.vstack([points, base])


def hull_volume(points: np.ndarray) -> float:
    """Volume of the convex hull of the points closed at the table (table frame, z up)."""
    try:
        return float(ConvexHull(_closed_points(points)).volume)
    except QhullError:
        return 0.0


def _fix_diagonal_contacts(layers: np.ndarray) -> np.ndarray:
    """Raise cells so no two columns touch along an edge only (2x2 blocks where a diagonal
    pair is higher than the other pair): such edges would be shared by four faces."""
    lv = layers.copy()
    for _ in range(100):
        a, b, c, d = lv[:-1, :-1], lv[1:, :-1], lv[:-1, 1:], lv[1:, 1:]
        fix_bc = np.minimum(a, d) > np.maximum(b, c)
        fix_ad = np.minimum(b, c) > np.maximum(a, d)
        if not (fix_bc.any() or fix_ad.any()):
            break
        i, j = np.nonzero(fix_bc)
        lv[i + 1, j] = np.maximum(lv[i + 1, j], np.minimum(a, d)[i, j])
        i, j = np.nonzero(fix_ad & ~fix_bc)
        lv[i, j] = np.maximum(lv[i, j], np.minimum(b, c)[i, j])
    return lv


def _column_mesh(layers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Boundary of the union of unit columns (cell (i, j) filled from 0 to layers[i, j]) as
    unit quads on the integer lattice, wound outward: (vertices, triangles)."""
    quads = []
    i, j = np.nonzero(layers > 0)
    for ii, jj in zip(i, j):
        top = layers[ii, jj]
        quads.append([(ii, jj, top), (ii + 1, jj, top), (ii + 1, jj + 1, top), (ii, jj + 1, top)])
        quads.append([(ii, jj, 0), (ii, jj + 1, 0), (ii + 1, jj + 1, 0), (ii + 1, jj, 0)])
    padded = np.pad(layers, 1)
    # Walls between a cell and its +x / +y neighbour, one quad per exposed layer.
    for axis in (0, 1):
        lo = padded[:-1, :] if axis == 0 else padded[:, :-1]
        hi = padded[1:, :] if axis == 0 else padded[:, 1:]
        for a, b in zip(*np.nonzero(lo != hi)):
            h1, h2 = lo[a, b], hi[a, b]
            # Padded index -> cell corner on the lattice: the shared face sits at index a.
            x, y = (a, b - 1) if axis == 0 else (a - 1, b)
            for k in range(min(h1, h2), max(h1, h2)):
                if axis == 0:
                    q = [(x, y, k), (x, y + 1, k), (x, y + 1, k + 1), (x, y, k + 1)]
                else:
                    q = [(x, y, k), (x, y, k + 1), (x + 1, y, k + 1), (x + 1, y, k)]
                quads.append(q if h1 > h2 else q[::-1])
    verts, inverse = np.unique(np.array(quads, dtype=np.int64).reshape(-1, 3), axis=0,
                               return_inverse=True)
    q = inverse.reshape(-1, 4)
    return verts, np.vstack([q[:, [0, 1, 2]], q[:, [0, 2, 3]]])


def surface_from_points(points: np.ndarray, cell: float = 0.003,
                        normals: np.ndarray | None = None,
                        min_footprint_height: float = 0.012) -> trimesh.Trimesh:
    """Watertight surface of an object resting on the table (points in a table frame, z up,
    table at z = 0): the height map of its points extruded down to the table.

    Cameras above a table see tops and sides, not undersides, so a 2.5D solid is what the
    views support; small gaps in the footprint are closed, the unseen bottom is the table.
    """
    from scipy import ndimage
    pts = np.asarray(points, float)
    lo = pts[:, :2].min(axis=0)
    ij = np.floor((pts[:, :2] - lo) / cell).astype(int)
    shape = ij.max(axis=0) + 1
    # Footprint: cells with a few points clear of the table (fusion leaves thin skirts of
    # stray surface around an object's base where views disagree).
    clear = pts[:, 2] > min_footprint_height
    counts = np.zeros(shape, int)
    np.add.at(counts, (ij[clear, 0], ij[clear, 1]), 1)
    footprint = counts >= 2
    # Heights from upward-facing points only: wall points straddle cell borders and would
    # lift the cells just outside a tall wall.
    # |n_z|: estimated normals have no sign; a table object shows tops, not undersides.
    if normals is not None and (np.abs(normals[:, 2]) > 0.5).sum() >= 10:
        up = np.abs(normals[:, 2]) > 0.5
    else:
        up = np.ones(len(pts), bool)
    height = np.zeros(shape)
    np.maximum.at(height, (ij[up, 0], ij[up, 1]), np.clip(pts[up, 2], 0.0, None))
    if (height > 0).any():               # cells seen only as walls: the nearest top's height
        _, (ni, nj) = ndimage.distance_transform_edt(height <= 0, return_indices=True)
        height = np.where(footprint & (height <= 0), height[ni, nj], height)
    footprint = ndimage.binary_fill_holes(ndimage.binary_closing(footprint, iterations=1))
    height = ndimage.median_filter(height, size=3)
    height[~footprint] = 0.0
    layers = _fix_diagonal_contacts(np.round(height / cell).astype(np.int64))
    if not layers.any():
        return trimesh.convex.convex_hull(_closed_points(pts))
    verts, faces = _column_mesh(layers)
    mesh = trimesh.Trimesh(verts * cell + [lo[0], lo[1], 0.0], faces, process=True)
    if not mesh.is_watertight:
        return trimesh.convex.convex_hull(_closed_points(pts))
    trimesh.repair.fix_normals(mesh)
    return mesh


def _decimated(mesh: trimesh.Trimesh, target_faces: int) -> trimesh.Trimesh:
    """Fewer faces for CoACD (its time grows with them); the mesh itself when already small
    or when decimation breaks it."""
    if len(mesh.faces) <= target_faces:
        return mesh
    import open3d as o3d
    o3 = o3d.geometry.TriangleMesh(o3d.utility.Vector3dVector(np.asarray(mesh.vertices)),
                                   o3d.utility.Vector3iVector(np.asarray(mesh.faces)))
    o3 = o3.simplify_quadric_decimation(target_faces)
    small = trimesh.Trimesh(np.asarray(o3.vertices), np.asarray(o3.triangles), process=True)
    return small if small.is_watertight and small.volume > 0 else mesh


def convex_decomposition(mesh: trimesh.Trimesh, max_vertices: int = 32,
                         threshold: float = 0.08,
                         target_faces: int = 1500) -> list[trimesh.Trimesh]:
    """CoACD hulls with at most ``max_vertices`` vertices each (convex hull without CoACD)."""
    try:
        import coacd
    except ImportError:
        coacd = None
    parts = []
    if coacd is not None:
        coacd.set_log_level('error')
        work = _decimated(mesh, target_faces)
        cm = coacd.Mesh(np.asarray(work.vertices, float), np.asarray(work.faces, np.int32))
        for verts, faces in coacd.run_coacd(cm, threshold=threshold, max_convex_hull=8,
                                            preprocess_resolution=30, resolution=1000,
                                            mcts_iterations=60, mcts_max_depth=2,
                                            max_ch_vertex=max_vertices):
            parts.append(trimesh.Trimesh(verts, faces))
    if not parts:
        parts = [mesh.convex_hull]
    return [_cap_vertices(p, max_vertices) for p in parts]


def _cap_vertices(hull: trimesh.Trimesh, max_vertices: int) -> trimesh.Trimesh:
    """A hull with at most ``max_vertices`` vertices (farthest-point subset, re-hulled)."""
    hull = hull.convex_hull
    v = np.asarray(hull.vertices)
    if len(v) <= max_vertices:
        return hull
    chosen = [int(np.argmax(np.linalg.norm(v - v.mean(0), axis=1)))]
    dist = np.linalg.norm(v - v[chosen[0]], axis=1)
    while len(chosen) < max_vertices:
        k = int(np.argmax(dist))
        chosen.append(k)
        dist = np.minimum(dist, np.linalg.norm(v - v[k], axis=1))
    return trimesh.convex.convex_hull(v[chosen])


def _write_stl(path: Path, mesh: trimesh.Trimesh) -> Path:
    return atomic_write_bytes(path, mesh.export(file_type='stl'))


def object_meshes(object_id: str, fit, out_dir: str | Path, max_vertices: int = 32,
                  threshold: float = 0.08) -> MeshOutputs:
    """Write ``<id>.stl`` (visual, watertight) and, for a non-primitive, its collision hulls."""
    out_dir = Path(out_dir)
    if fit.shape in ('box', 'cylinder'):
        mesh = primitive_mesh(fit.shape, fit.extents)
        return MeshOutputs(_write_stl(out_dir / f'{object_id}.stl', mesh))
    # Object frame: origin at the fitted centre, x along the yaw (same frame as the body).
    c, s = np.cos(fit.yaw), np.sin(fit.yaw)
    rot = np.array([[c, -s], [s, c]])
    local = np.asarray(fit.points, float).copy()
    local[:, :2] = (local[:, :2] - fit.center[:2]) @ rot
    # Table-frame heights (bottom at z = 0); a yaw leaves the normals' z unchanged.
    surface = surface_from_points(local, normals=fit.normals)
    surface.apply_translation([0.0, 0.0, -fit.center[2]])
    paths = []
    for k, hull in enumerate(convex_decomposition(surface, max_vertices, threshold)):
        paths.append(_write_stl(out_dir / f'{object_id}_hull{k}.stl', hull))
    return MeshOutputs(_write_stl(out_dir / f'{object_id}.stl', surface), paths,
                       bool(surface.is_watertight))
