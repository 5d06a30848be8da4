"""Objects on the table: clusters above the plane, and a box or cylinder fitted to each.

All fitting happens in the table frame (z = the plane's up normal, origin on the plane): an
object rests on the table, so its bottom is the plane and its height is its top's height.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import open3d as o3d
from scipy.optimize import least_squares
from scipy.spatial import ConvexHull, QhullError

from .table import TablePlane


@dataclass
class TableFrame:
    """World <-> table frame: z along the plane normal, x along world x projected."""
    rotation: np.ndarray       # columns: table x, y, z axes in the world
    origin: np.ndarray

    @classmethod
    def from_plane(cls, table: TablePlane, anchor_xy=(0.0, 0.0)) -> TableFrame:
        """The table frame of ``table``: z along its normal, origin at ``anchor_xy`` on
        the plane."""
        z = table.normal / np.linalg.norm(table.normal)
        x = np.array([1.0, 0.0, 0.0]) - z[0] * z
        x /= np.linalg.norm(x)
        y = np.cross(z, x)
        origin = np.array([anchor_xy[0], anchor_xy[1],
                           table.table_height_at(anchor_xy[0], anchor_xy[1])])
        return cls(np.column_stack([x, y, z]), origin)

    def to_table(self, pts: np.ndarray) -> np.ndarray:
        """World points ``pts`` (N, 3) in the table frame."""
        return (np.asarray(pts) - self.origin) @ self.rotation

    def to_world(self, pts: np.ndarray) -> np.ndarray:
        """Table-frame points ``pts`` (N, 3) in the world."""
        return np.asarray(pts) @ self.rotation.T + self.origin


@dataclass
class FittedObject:
    """An object in the table frame: centre (x, y, z) with z = half height, yaw about z."""
    shape: str                               # 'box', 'cylinder' or 'mesh'
    center: np.ndarray
    yaw: float
    extents: np.ndarray                      # along the object axes (cyl: d, d, h)
    residual: float                          # RMS point-to-surface distance of that shape, m
    residuals: dict = field(default_factory=dict)   # every candidate's residual
    points: np.ndarray | None = None         # the cluster, table frame
    solidity: float = 1.0                    # occupied footprint area / convex footprint area
    top_levels: int = 1                      # distinct heights of upward-facing surfaces
    normals: np.ndarray | None = None        # unit normals of ``points`` (sign arbitrary)


def cluster_objects(points: np.ndarray, eps: float = 0.01, min_points: int = 30,
                    min_extent: float = 0.01) -> list[np.ndarray]:
    """DBSCAN clusters of table-frame points above the plane (indices into ``points``)."""
    if len(points) == 0:
        return []
    cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(points))
    labels = np.asarray(cloud.cluster_dbscan(eps, min_points, print_progress=False))
    out = []
    for lab in range(labels.max() + 1 if labels.size else 0):
        idx = np.flatnonzero(labels == lab)
        span = np.ptp(points[idx], axis=0)
        if len(idx) >= min_points and max(span[0], span[1]) >= min_extent:
            out.append(idx)
    return out


# ------------------------------------------------------------------ 2D geometry helpers

def min_area_rectangle(xy: np.ndarray) -> tuple[float, np.ndarray]:
    """(angle of the rectangle's first axis, (2,) side lengths) of the smallest enclosing
    rectangle; one side is collinear with a convex hull edge (rotating calipers)."""
    try:
        hull = xy[ConvexHull(xy).vertices]
    except QhullError:
        hull = xy
    edges = np.diff(np.vstack([hull, hull[:1]]), axis=0)
    angles = np.unique(np.mod(np.arctan2(edges[:, 1], edges[:, 0]), np.pi / 2))
    best = (np.inf, 0.0, None)
    for a in angles:
        c, s = np.cos(a), np.sin(a)
        local = hull @ np.array([[c, -s], [s, c]])
        sides = np.ptp(local, axis=0)
        if sides[0] * sides[1] < best[0]:
            best = (sides[0] * sides[1], a, sides)
    return best[1], best[2]


def wall_normal_yaw(normals: np.ndarray | None, min_points: int = 30) -> float | None:
    """Direction of vertical walls modulo 90 deg: circular mean of 4x the normals' azimuths,
    weighted by how horizontal each normal is (None when too few wall points)."""
    if normals is None:
        return None
    horizontal = np.linalg.norm(normals[:, :2], axis=1)
    wall = horizontal > 0.95
    if wall.sum() < min_points:
        return None
    theta = np.arctan2(normals[wall, 1], normals[wall, 0])
    vote = np.sum(horizontal[wall] * np.exp(4j * theta))
    return float(np.angle(vote) / 4)


def fit_circle(xy: np.ndarray) -> tuple[np.ndarray, float]:
    """Geometric least-squares circle (centre, radius), started from the algebraic fit."""
    a = np.column_stack([2 * xy, np.ones(len(xy))])
    b = (xy ** 2).sum(axis=1)
    sol, *_ = np.linalg.lstsq(a, b, rcond=None)
    c0 = sol[:2]
    r0 = np.sqrt(max(sol[2] + c0 @ c0, 1e-12))
    res = least_squares(lambda p: np.linalg.norm(xy - p[:2], axis=1) - p[2],
                        np.append(c0, r0), loss='soft_l1', f_scale=0.002)
    return res.x[:2], float(abs(res.x[2]))


def footprint_solidity(xy: np.ndarray, cell: float = 0.004) -> float:
    """Area of occupied grid cells / area of the convex hull (1 for a convex footprint)."""
    try:
        hull_area = ConvexHull(xy).volume
    except QhullError:
        return 1.0
    cells = np.unique(np.floor(xy / cell).astype(np.int64), axis=0)
    return float(min(1.0, len(cells) * cell * cell / max(hull_area, 1e-12)))


def count_top_levels(pts: np.ndarray, normals: np.ndarray | None, bin_size: float = 0.004,
                     min_fraction: float = 0.08) -> int:
    """Distinct heights of upward-facing surfaces (a single box or cylinder has one): groups
    of adjacent height bins that each hold at least ``min_fraction`` of those points."""
    if normals is None or len(pts) == 0:
        return 1
    heights = pts[(np.abs(normals[:, 2]) > 0.9) & (pts[:, 2] > 0.01), 2]
    if len(heights) < 20:
        return 1
    edges = np.arange(heights.min(), heights.max() + 2 * bin_size, bin_size)
    counts, _ = np.histogram(heights, edges)
    big = counts >= min_fraction * len(heights)
    return int(np.sum(big[1:] & ~big[:-1]) + big[0])


# ------------------------------------------------------------------ signed distances

def _rot2(yaw: float) -> np.ndarray:
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([[c, -s], [s, c]])


def box_surface_distance(pts: np.ndarray, center, yaw, extents) -> np.ndarray:
    """Signed distance (m) of points ``pts`` to a box's surface (``center``, ``yaw`` rad,
    ``extents`` m)."""
    local_xy = (pts[:, :2] - center[:2]) @ _rot2(yaw)
    local = np.column_stack([local_xy, pts[:, 2] - center[2]])
    q = np.abs(local) - np.asarray(extents) / 2
    outside = np.linalg.norm(np.maximum(q, 0), axis=1)
    inside = np.minimum(q.max(axis=1), 0)
    return np.abs(outside + inside)


def cylinder_surface_distance(pts: np.ndarray, center, radius, height) -> np.ndarray:
    """Signed distance (m) of points ``pts`` to an upright cylinder's surface (``radius``,
    ``height`` m)."""
    q = np.column_stack([np.linalg.norm(pts[:, :2] - center[:2], axis=1) - radius,
                         np.abs(pts[:, 2] - center[2]) - height / 2])
    outside = np.linalg.norm(np.maximum(q, 0), axis=1)
    inside = np.minimum(q.max(axis=1), 0)
    return np.abs(outside + inside)


def _rms(d: np.ndarray) -> float:
    return float(np.sqrt(np.mean(d ** 2))) if len(d) else np.inf


# ------------------------------------------------------------------ fitting

def _wall_bounds(local_xy, local_normals, z, height, lo, hi, min_points: int = 15):
    """Side positions as the median of each wall's points (normal along that side's axis).

    More faithful than extreme points, which carry the fusion's fattening at silhouettes and
    the rounding of edges; a wall with too few points keeps its percentile bound.
    """
    lo, hi = lo.copy(), hi.copy()
    mid = (lo + hi) / 2
    band = (z > 0.15 * height) & (z < 0.85 * height)
    for axis in (0, 1):
        along = np.abs(local_normals[:, axis]) > 0.85
        for side, bound in ((-1, lo), (1, hi)):
            wall = band & along & (side * (local_xy[:, axis] - mid[axis]) > 0)
            if wall.sum() >= min_points:
                bound[axis] = np.median(local_xy[wall, axis])
    return lo, hi


def refine_box_yaw(xy: np.ndarray, z: np.ndarray, height: float, angle: float, lo, hi,
                   band=(0.15, 0.85), max_change_deg: float = 20.0) -> float:
    """Yaw of the rectangle that best fits the walls (soft-L1 point-to-rectangle distance of
    the points in the walls' middle band), started from ``angle`` and the bounds lo/hi.

    The normal vote is biased when the views see some walls much more than others (four
    fixed cameras: 4-5 deg measured); the walls' positions themselves are not.
    """
    wall = (z > band[0] * height) & (z < band[1] * height)
    if wall.sum() < 30:
        return angle
    pts = xy[wall]
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)

    def distance(p):
        local = (pts - p[:2]) @ _rot2(p[2])
        q = np.abs(local) - p[3:5]
        return np.linalg.norm(np.maximum(q, 0), axis=1) + np.minimum(q.max(axis=1), 0)

    start = np.concatenate([_rot2(angle) @ ((lo + hi) / 2), [angle], (hi - lo) / 2])
    try:
        sol = least_squares(distance, start, loss='soft_l1', f_scale=0.002)
    except ValueError:
        return angle
    if not sol.success or abs(sol.x[2] - angle) > np.radians(max_change_deg):
        return angle
    return float(sol.x[2])


def estimate_normals(pts: np.ndarray, radius: float = 0.008) -> np.ndarray:
    """Unit normals (N, 3) of points ``pts`` from neighbours within ``radius`` m."""
    cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(pts))
    cloud.estimate_normals(o3d.geometry.KDTreeSearchParamHybrid(radius, 30))
    return np.asarray(cloud.normals)


def fit_object(pts: np.ndarray, normals: np.ndarray | None = None,
               bound_percentile: float = 0.3, wall_band=(0.2, 0.8)) -> FittedObject:
    """Fit a box and a cylinder to one cluster (table frame); keep the lower residual."""
    if normals is None:
        normals = estimate_normals(pts)
    z = pts[:, 2]
    z_top = np.percentile(z, 99.5)
    top = z > z_top - 0.003
    if normals is not None:             # the top face: upward-facing points near the top
        top |= (np.abs(normals[:, 2]) > 0.9) & (z > z_top - 0.01)
    height = float(np.median(z[top])) if top.sum() >= 5 else float(z_top)
    xy = pts[:, :2]
    solidity = footprint_solidity(xy)
    levels = count_top_levels(pts, normals)

    # Box: yaw from the walls' normals (every wall point votes; robust on small boxes),
    # else from the minimum-area rectangle; extents from the walls in that frame.
    angle = wall_normal_yaw(normals)
    if angle is None:
        angle, _ = min_area_rectangle(xy)
    local = xy @ _rot2(angle)
    lo = np.percentile(local, bound_percentile, axis=0)
    hi = np.percentile(local, 100 - bound_percentile, axis=0)
    refined = refine_box_yaw(xy, z, height, angle, lo, hi)
    if refined != angle:
        angle = refined
        local = xy @ _rot2(angle)
        lo = np.percentile(local, bound_percentile, axis=0)
        hi = np.percentile(local, 100 - bound_percentile, axis=0)
    if normals is not None:
        lo, hi = _wall_bounds(local, normals[:, :2] @ _rot2(angle), z, height, lo, hi)
    sides = hi - lo
    mid = _rot2(angle) @ ((lo + hi) / 2)
    if sides[1] > sides[0]:                  # x along the longer side, yaw in (-pi/2, pi/2]
        angle += np.pi / 2
        sides = sides[::-1]
    yaw = float(np.arctan2(np.sin(angle), np.cos(angle)))
    if yaw <= -np.pi / 2:
        yaw += np.pi
    elif yaw > np.pi / 2:
        yaw -= np.pi
    box_center = np.array([mid[0], mid[1], height / 2])
    box_ext = np.array([sides[0], sides[1], height])
    # The bottom face is never seen; score only points clear of the table.
    scored = pts[z > 0.004]
    box_res = _rms(box_surface_distance(scored, box_center, yaw, box_ext))

    # Cylinder: circle through the side walls (the top disk would bias a circle fit).
    wall = (z > wall_band[0] * height) & (z < wall_band[1] * height)
    ring = xy[wall] if wall.sum() >= 20 else xy
    c_xy, radius = fit_circle(ring)
    cyl_center = np.array([c_xy[0], c_xy[1], height / 2])
    cyl_res = _rms(cylinder_surface_distance(scored, cyl_center, radius, height))

    residuals = {'box': box_res, 'cylinder': cyl_res}
    if box_res <= cyl_res:
        return FittedObject('box', box_center, yaw, box_ext, box_res, residuals, pts,
                            solidity, levels, normals)
    return FittedObject('cylinder', cyl_center, 0.0, np.array([2 * radius, 2 * radius, height]),
                        cyl_res, residuals, pts, solidity, levels, normals)
