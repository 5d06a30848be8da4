"""The table: the dominant horizontal plane (RANSAC), its normal oriented up, its outline."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import open3d as o3d
from scipy.spatial import ConvexHull, QhullError

from .errors import ErrorCode, ReconstructionError


@dataclass
class TablePlane:
    """A fitted table plane (unit normal up), its outline (K, 2) in world x, y, and inlier count."""
    plane: np.ndarray          # a, b, c, d with (a, b, c) a unit normal pointing up
    outline: np.ndarray        # (K, 2) convex hull of the inliers in world x, y
    num_inliers: int

    @property
    def normal(self) -> np.ndarray:
        """The plane's unit normal (3,)."""
        return self.plane[:3]

    def height_of(self, points: np.ndarray) -> np.ndarray:
        """Signed distance of (N, 3) points above the plane (m)."""
        return np.asarray(points) @ self.plane[:3] + self.plane[3]

    def table_height_at(self, x: float, y: float) -> float:
        """Height z (m) of the plane at world ``x``, ``y``."""
        a, b, c, d = self.plane
        return float(-(a * x + b * y + d) / c)

    def inside_outline(self, xy: np.ndarray, margin: float = 0.0) -> np.ndarray:
        """(N,) True where x, y lies inside the outline shrunk by ``margin`` (m)."""
        hull = self.outline
        edges = np.roll(hull, -1, axis=0) - hull
        normals = np.column_stack([edges[:, 1], -edges[:, 0]])     # outward for CCW hulls
        normals /= np.linalg.norm(normals, axis=1, keepdims=True)
        dist = np.einsum('nkd,kd->nk', np.asarray(xy)[:, None, :] - hull[None], normals)
        return np.all(dist <= -margin, axis=1)


def find_table(points: np.ndarray, up=(0.0, 0.0, 1.0), max_tilt_deg: float = 15.0,
               distance: float = 0.004, min_inliers: int = 2000, max_planes: int = 4,
               seed: int = 0) -> TablePlane:
    """Largest plane within ``max_tilt_deg`` of ``up`` among the first ``max_planes`` found."""
    up = np.asarray(up, float) / np.linalg.norm(up)
    rest = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(np.asarray(points, float)))
    o3d.utility.random.seed(seed)
    best = None
    for _ in range(max_planes):
        if len(rest.points) < min_inliers:
            break
        model, inliers = rest.segment_plane(distance, 3, 200)
        model = np.asarray(model, float)
        model /= np.linalg.norm(model[:3])
        if model[:3] @ up < 0:
            model = -model
        tilt = np.degrees(np.arccos(np.clip(model[:3] @ up, -1, 1)))
        pts = np.asarray(rest.points)[inliers]
        if tilt <= max_tilt_deg and len(inliers) >= min_inliers and (
                best is None or len(inliers) > best[2]):
            best = (model, pts, len(inliers))
        rest = rest.select_by_index(inliers, invert=True)
    if best is None:
        raise ReconstructionError(ErrorCode.NO_TABLE_PLANE,
                                  f'no plane within {max_tilt_deg} deg of horizontal with at '
                                  f'least {min_inliers} points ({len(points)} points in view)')
    model, pts, n = best
    # Refine on the inliers by least squares: RANSAC's model is only as good as 3 points.
    centroid = pts.mean(axis=0)
    _, _, vt = np.linalg.svd(pts - centroid, full_matrices=False)
    normal = vt[2] if vt[2] @ up > 0 else -vt[2]
    model = np.append(normal, -normal @ centroid)
    pts = _largest_region(pts)
    try:
        hull = ConvexHull(pts[:, :2])
    except QhullError:
        raise ReconstructionError(ErrorCode.NO_TABLE_PLANE,
                                  'the table plane inliers are degenerate (a line)') from None
    return TablePlane(model, pts[hull.vertices, :2], n)


def _largest_region(pts: np.ndarray, cell: float = 0.02) -> np.ndarray:
    """The inliers of the largest connected region in x, y (``cell`` m grid, 8-connected).

    A plane's inliers also hold the rings where it cuts the arm's and other vertical walls
    (a table level with the robot's shoulder: depth noise puts those points outside the robot
    mask's margin); their convex hull with the table's would stretch the outline over the
    robot. The table is the largest connected patch; separate patches are left out."""
    from scipy import ndimage
    ij = np.floor(pts[:, :2] / cell).astype(int)
    ij -= ij.min(axis=0)
    grid = np.zeros(ij.max(axis=0) + 1, bool)
    grid[ij[:, 0], ij[:, 1]] = True
    labels, n = ndimage.label(grid, structure=np.ones((3, 3), bool))
    if n <= 1:
        return pts
    lab = labels[ij[:, 0], ij[:, 1]]
    keep = lab == np.argmax(np.bincount(lab)[1:]) + 1
    return pts[keep]
