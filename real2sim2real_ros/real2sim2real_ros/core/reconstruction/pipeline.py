"""Capture set -> fused geometry -> table plane -> objects -> meshes -> MJCF scene.

``reconstruct(views, config)`` is the whole stage without ROS. Every failure the caller can act
on raises ReconstructionError(code, message) with a code from Reconstruct.action.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import open3d as o3d
from scipy.spatial import cKDTree

from . import fusion, meshes, scene_mjcf
from .config import STAGES, ProgressCallback, ReconstructionConfig
from .errors import ErrorCode, ReconstructionError
from .objects import FittedObject, TableFrame, cluster_objects, fit_object
from .table import TablePlane, find_table
from .views import CaptureView

__all__ = ['STAGES', 'ProgressCallback', 'ReconstructedObject', 'ReconstructionConfig',
           'ReconstructionResult', 'reconstruct']


@dataclass
class ReconstructedObject:
    """One reconstructed object: id, shape, pose in the world (m), size, mesh paths and
    fit figures."""
    id: str
    shape: str                            # 'box', 'cylinder' or 'mesh'
    position: np.ndarray                  # world, centre of the shape
    quat_wxyz: np.ndarray                 # world orientation of the object frame
    yaw: float                            # about the table normal, rad
    extents: np.ndarray                   # along the object axes (cylinder: d, d, h)
    mass: float
    mass_is_prior: bool
    volume: float
    fit_residual: float
    residuals: dict
    num_points: int
    mesh_path: str = ''
    collision_paths: list[str] = field(default_factory=list)
    points: np.ndarray | None = field(default=None, repr=False)   # fused points, world (N, 3)


@dataclass
class ReconstructionResult:
    """A reconstruction's output: table plane, height and outline, objects, the scene MJCF and
    timings."""
    table_plane: np.ndarray
    table_height: float
    table_outline: np.ndarray             # (K, 2) world x, y
    objects: list[ReconstructedObject]
    mjcf_path: str = ''
    timings: dict = field(default_factory=dict)
    num_fused_points: int = 0
    poses: list[np.ndarray] = field(default_factory=list)   # view poses used for fusion

    def summary(self) -> dict:
        """JSON-able results for the stage manifest (StageRecord.results)."""
        return {
            'table_plane': [float(v) for v in self.table_plane],
            'table_height': float(self.table_height),
            'mjcf_path': self.mjcf_path,
            'num_fused_points': int(self.num_fused_points),
            'timings_s': {k: round(v, 4) for k, v in self.timings.items()},
            'objects': [{
                'id': o.id, 'shape': o.shape, 'position': [float(v) for v in o.position],
                'quat_wxyz': [float(v) for v in o.quat_wxyz], 'yaw': float(o.yaw),
                'extents': [float(v) for v in o.extents], 'mass': float(o.mass),
                'mass_is_prior': bool(o.mass_is_prior), 'volume': float(o.volume),
                'fit_residual': float(o.fit_residual),
                'residuals': {k: float(v) for k, v in o.residuals.items()},
                'num_points': int(o.num_points), 'mesh_path': o.mesh_path,
                'collision_paths': list(o.collision_paths)} for o in self.objects],
        }


class _Progress:
    def __init__(self, callback: ProgressCallback | None):
        self.callback = callback
        self.timings: dict[str, float] = {}
        self._t = time.perf_counter()

    def __call__(self, stage: str, fraction: float):
        now = time.perf_counter()
        self.timings[stage] = self.timings.get(stage, 0.0) + now - self._t
        self._t = now
        if self.callback is not None and self.callback(stage, fraction) is False:
            raise ReconstructionError(ErrorCode.CANCELED, f'canceled during {stage}')


def _check_views(views: list[CaptureView], cfg: ReconstructionConfig):
    if not views:
        raise ReconstructionError(ErrorCode.INVALID_CAPTURE, 'the capture set has no views')
    for k, view in enumerate(views):
        view.validate(k)
        coverage = float(view.valid_depth_mask().mean())
        if coverage < cfg.min_depth_coverage:
            raise ReconstructionError(
                ErrorCode.INSUFFICIENT_DEPTH,
                f'view {k} ({view.name}): only {coverage:.0%} of pixels have depth '
                f'(need {cfg.min_depth_coverage:.0%})')


def _drop_mask(cfg: ReconstructionConfig, table: TablePlane | None = None, rois=None):
    """World points -> True where they cannot belong to the table or an object (outside the
    workspace, off the table, on the robot, outside every region of interest)."""
    lo = None if cfg.workspace_min is None else np.asarray(cfg.workspace_min, float)
    hi = None if cfg.workspace_max is None else np.asarray(cfg.workspace_max, float)

    def drop(pts: np.ndarray) -> np.ndarray:
        # Cheapest tests first; each later test only sees the points still kept.
        keep = np.ones(len(pts), bool)

        def narrow(test):
            idx = np.flatnonzero(keep)
            if len(idx):
                keep[idx[~test(pts[idx])]] = False

        if rois is not None:
            narrow(lambda p: np.any([np.all((p >= lo_r) & (p <= hi_r), axis=1)
                                     for lo_r, hi_r in rois], axis=0))
        if lo is not None:
            narrow(lambda p: np.all(p >= lo, axis=1))
        if hi is not None:
            narrow(lambda p: np.all(p <= hi, axis=1))
        if table is not None:
            narrow(lambda p: (table.height_of(p) > -0.02)
                   & (table.height_of(p) < cfg.max_object_height))
            narrow(lambda p: table.inside_outline(p[:, :2]))
        if cfg.robot_mask is not None:
            narrow(lambda p: ~np.asarray(cfg.robot_mask(p), bool))
        return ~keep
    return drop


def _object_regions(points: np.ndarray, table: TablePlane, cfg: ReconstructionConfig):
    """World AABBs (lo, hi) around coarse clusters of raw points above the table."""
    # Raw depth is noisy (sigma ~ 5 mm at 1.1 m): seed regions only from points clearly
    # above the table, in dense groups; the region then reaches down to the table.
    h = table.height_of(points)
    keep = (h > cfg.roi_seed_height) & (h < cfg.max_object_height)
    keep &= table.inside_outline(points[:, :2], cfg.outline_margin)
    above = points[keep]
    clusters = cluster_objects(above, eps=0.015, min_points=10, min_extent=cfg.min_object_size)
    rois = []
    for idx in clusters:
        lo = above[idx].min(axis=0) - cfg.roi_margin
        hi = above[idx].max(axis=0) + cfg.roi_margin
        lo[2] = min(lo[2], table.table_height_at(*above[idx].mean(0)[:2]) - 0.02)
        rois.append((lo, hi))
    if not rois:
        raise ReconstructionError(ErrorCode.EMPTY_TABLE,
                                  f'no object on the table ({len(above)} points above the '
                                  f'plane, none rising {cfg.roi_seed_height * 1000:.0f} mm '
                                  f'over {cfg.min_object_size * 1000:.0f} mm or more)')
    return rois


def _object_points(cloud: o3d.geometry.PointCloud, frame: TableFrame, table: TablePlane,
                   cfg: ReconstructionConfig):
    pts = np.asarray(cloud.points)
    local = frame.to_table(pts)
    keep = (local[:, 2] > cfg.min_object_height) & (local[:, 2] < cfg.max_object_height)
    keep &= table.inside_outline(pts[:, :2], cfg.outline_margin)
    if cfg.robot_mask is not None and keep.any():
        idx = np.flatnonzero(keep)
        keep[idx[np.asarray(cfg.robot_mask(pts[idx]), bool)]] = False
    normals = np.asarray(cloud.normals)[keep] @ frame.rotation if cloud.has_normals() else None
    near_table = (np.abs(local[:, 2]) < cfg.min_object_height) & ~keep
    return local[keep], normals, local[near_table]


def _local_table_offset(cluster: np.ndarray, table_pts: np.ndarray, ring: float = 0.02) -> float:
    """Height of the fused table surface around a cluster relative to the global plane.

    The global plane comes from raw, noisy, imperfectly calibrated views; the fused surface
    next to the object is what the object actually stands on.
    """
    lo, hi = cluster[:, :2].min(axis=0) - ring, cluster[:, :2].max(axis=0) + ring
    near = np.all((table_pts[:, :2] >= lo) & (table_pts[:, :2] <= hi), axis=1)
    return float(np.median(table_pts[near, 2])) if near.sum() >= 50 else 0.0


def _on_local_table(pts: np.ndarray, clusters: list[np.ndarray], table_pts: np.ndarray,
                    cfg: ReconstructionConfig) -> list[tuple[np.ndarray, float]]:
    """The clusters cut at ``min_object_height`` above the fused table around each, not the
    global plane. Where the table lies above that plane (calibration error, a plane fitted to
    noisy views), its surface passes the global cut and joins the nearest object as a skirt:
    on a drawn Drake cell, one noise draw grew a 68 mm cylinder's cluster to 138 mm (a skirt
    1-3 mm above the table there, 5 mm above the plane), which then fitted no primitive and
    failed the cell as OBJECTS_TOUCHING. What is left is split into its parts connected
    within ``cluster_eps`` (a skirt can join two objects; connectivity, not density, so a
    cluster that lost a few points keeps its sparse ones); a part under
    ``cluster_min_points`` or ``min_object_size`` (a cluster that was all skirt) is gone.
    Returns (cluster, its local table offset) pairs: a split part's offset is its own."""
    out = []
    for idx in clusters:
        offset = _local_table_offset(pts[idx], table_pts)
        above = idx[pts[idx, 2] > offset + cfg.min_object_height]
        if above.size == idx.size:
            out.append((idx, offset))
        elif above.size:
            out += [(above[p], _local_table_offset(pts[above[p]], table_pts))
                    for p in cluster_objects(pts[above], cfg.cluster_eps, 1,
                                             cfg.min_object_size)
                    if p.size >= cfg.cluster_min_points]
    return out


def _check_in_view(clusters: list[np.ndarray], views: list[CaptureView],
                   depths: list[np.ndarray], frame: TableFrame, cfg: ReconstructionConfig):
    """OBJECT_OUT_OF_VIEW when no view sees a cluster without it touching the image border."""
    labels = np.concatenate([np.full(len(c), k) for k, c in enumerate(clusters)])
    tree = cKDTree(np.vstack(clusters))
    seen_whole = np.zeros(len(clusters), bool)
    cut = np.zeros(len(clusters), bool)
    for view, depth in zip(views, depths):
        masked = CaptureView(None, np.where(depth > 0, depth, np.nan), view.intrinsics,
                             view.T_world_camera, view.name)
        pts, uv = masked.world_points()
        local = frame.to_table(pts)
        near = (local[:, 2] > cfg.min_object_height) & (local[:, 2] < cfg.max_object_height)
        if not near.any():
            continue
        dist, nn = tree.query(local[near], distance_upper_bound=2 * cfg.voxel + 0.003)
        hit = np.isfinite(dist)
        lab = labels[nn[hit]]
        uv_hit = uv[near][hit]
        m = cfg.border_margin_px
        w, h = view.intrinsics.width, view.intrinsics.height
        at_border = ((uv_hit[:, 0] < m) | (uv_hit[:, 1] < m) | (uv_hit[:, 0] >= w - m)
                     | (uv_hit[:, 1] >= h - m))
        for k in range(len(clusters)):
            mine = lab == k
            if mine.sum() < cfg.cluster_min_points:
                continue
            if at_border[mine].any():
                cut[k] = True
            else:
                seen_whole[k] = True
    return [k for k in range(len(clusters)) if cut[k] and not seen_whole[k]]


FIT_DECIMALS = 7   # 0.1 um, 0.1 urad: the reported centre, extents and yaw of a fitted object


def _settle(fit: FittedObject) -> None:
    """Round a fit's centre, extents and yaw to ``FIT_DECIMALS``, so the same views give the
    same scene bit for bit: Open3D's multi-threaded fusion and normals change the last bits
    from run to run (measured: 4e-13 m, 3e-11 rad on the default cell's box), and a contact
    amplifies them (two harness runs of one cell struck the held-out box at headings 0.35
    and 1.92 rad, a held-out error of 0.9 against 29.1 mm)."""
    fit.center = np.round(np.asarray(fit.center, float), FIT_DECIMALS)
    fit.extents = np.round(np.asarray(fit.extents, float), FIT_DECIMALS)
    fit.yaw = round(float(fit.yaw), FIT_DECIMALS)


def _world_pose(fit: FittedObject, frame: TableFrame):
    from ..geometry import matrix_to_quat_wxyz
    c, s = np.cos(fit.yaw), np.sin(fit.yaw)
    rot_local = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])
    rot = frame.rotation @ rot_local
    return frame.to_world(fit.center[None])[0], matrix_to_quat_wxyz(rot), rot


def reconstruct(views: list[CaptureView], config: ReconstructionConfig | None = None,
                run_dir: str | Path | None = None,
                progress: ProgressCallback | None = None) -> ReconstructionResult:
    """Reconstruct the table and the objects on it; write meshes and MJCF into ``run_dir``."""
    cfg = config or ReconstructionConfig()
    step = _Progress(progress)
    _check_views(views, cfg)
    step('validate', 1.0)

    drop = _drop_mask(cfg)
    raw_points = []
    for view in views:
        pts, _ = view.world_points(stride=3)
        raw_points.append(pts[~drop(pts)])
    raw = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(np.vstack(raw_points)))
    raw = raw.voxel_down_sample(0.005)
    table = find_table(np.asarray(raw.points), cfg.up, cfg.max_table_tilt_deg,
                       cfg.plane_distance, cfg.min_table_points)
    step('table', 1.0)

    # Only regions around coarse object clusters are fused: the rest of the table, the robot,
    # the floor and the room are holes (fusion time grows with the fused area).
    rois = _object_regions(np.asarray(raw.points), table, cfg)
    drop = _drop_mask(cfg, table, rois)
    depths = [fusion.masked_depth(v, drop) for v in views]
    poses = (fusion.refine_poses_icp(views, depths, 2 * cfg.voxel) if cfg.refine_poses
             else [np.asarray(v.T_world_camera, float) for v in views])
    cloud = fusion.tsdf_fuse(views, depths, cfg.voxel, cfg.trunc_voxels, cfg.depth_trunc,
                             poses)
    if not cloud.has_normals():
        cloud.estimate_normals(o3d.geometry.KDTreeSearchParamHybrid(3 * cfg.voxel, 30))
    step('fusion', 1.0)

    centre = table.outline.mean(axis=0)
    frame = TableFrame.from_plane(table, centre)
    pts, normals, table_pts = _object_points(cloud, frame, table, cfg)
    on_table = [(c, offset) for c, offset in _on_local_table(
                    pts, cluster_objects(pts, cfg.cluster_eps, cfg.cluster_min_points,
                                         cfg.min_object_size), table_pts, cfg)
                if np.percentile(pts[c, 2], 99) >= cfg.min_object_top
                and footprint_thickness(pts[c, :2]) >= cfg.min_object_thickness]
    clusters = [c for c, _ in on_table]
    if not clusters:
        raise ReconstructionError(ErrorCode.EMPTY_TABLE,
                                  f'no object on the table ({len(pts)} points above the plane, '
                                  f'none forming a cluster of {cfg.min_object_size * 1000:.0f}'
                                  f' mm or more)')
    cut = _check_in_view([pts[c] for c in clusters], views, depths, frame, cfg)
    if cut:
        where = ', '.join(f'near ({frame.to_world(pts[clusters[k]].mean(0)[None])[0][0]:.3f}, '
                          f'{frame.to_world(pts[clusters[k]].mean(0)[None])[0][1]:.3f})'
                          for k in cut)
        raise ReconstructionError(ErrorCode.OBJECT_OUT_OF_VIEW,
                                  f'{len(cut)} object(s) cut by the image border in every view '
                                  f'that sees them: {where}; add a view that sees them whole')
    fits, offsets = [], [offset for _, offset in on_table]
    for k, (idx, offset) in enumerate(on_table):
        fit = fit_object(pts[idx] - [0.0, 0.0, offset],
                         None if normals is None else normals[idx])
        fit.center[2] += offset
        fit.points = fit.points + [0.0, 0.0, offset]
        if fit.residual > cfg.fit_tolerance:
            several = fit.solidity < cfg.solidity_min or fit.top_levels > 1
            if several and not cfg.allow_irregular:
                xy = frame.to_world(fit.center[None])[0]
                raise ReconstructionError(
                    ErrorCode.OBJECTS_TOUCHING,
                    f'the cluster at ({xy[0]:.3f}, {xy[1]:.3f}) fits no box or cylinder '
                    f'(residual {fit.residual * 1000:.1f} mm) and looks like several objects '
                    f'(footprint solidity {fit.solidity:.2f}, {fit.top_levels} top levels): '
                    'separate the objects by at least 1 cm')
            fit.shape = 'mesh'
        fits.append(fit)
        step('objects', (k + 1) / len(clusters))
    # The table the objects stand on: the global plane moved to the fused surface around
    # them (the raw-view plane carries noise and calibration error).
    if offsets:
        shift = float(np.median(offsets))
        table.plane[3] -= shift * np.linalg.norm(table.plane[:3])
        frame = TableFrame(frame.rotation, frame.origin + shift * frame.rotation[:, 2])
        for fit in fits:
            fit.center[2] -= shift
            fit.points = fit.points - [0.0, 0.0, shift]
    for fit in fits:
        _settle(fit)
    # Stable ids: ordered by position (x then y) so a re-run names objects the same.
    order = sorted(range(len(fits)), key=lambda k: (round(fits[k].center[0], 2),
                                                    fits[k].center[1]))
    objects = []
    counters: dict[str, int] = {}
    for k in order:
        fit = fits[k]
        pos, quat, _ = _world_pose(fit, frame)
        n = counters.get(fit.shape, 0)
        counters[fit.shape] = n + 1
        volume = (meshes.primitive_volume(fit.shape, fit.extents) if fit.shape != 'mesh'
                  else float(meshes.surface_from_points(fit.points, normals=fit.normals).volume))
        objects.append(ReconstructedObject(
            id=f'{fit.shape}_{n}', shape=fit.shape, position=pos, quat_wxyz=quat, yaw=fit.yaw,
            extents=fit.extents, mass=cfg.density * volume, mass_is_prior=True, volume=volume,
            fit_residual=fit.residual, residuals=fit.residuals, num_points=len(fit.points),
            points=frame.to_world(fit.points)))
    result = ReconstructionResult(table.plane.copy(),
                                  table.table_height_at(*centre), table.outline.copy(), objects,
                                  num_fused_points=len(cloud.points), poses=poses)
    if run_dir is not None:
        _write_outputs(result, [fits[k] for k in order], frame, cfg, Path(run_dir), step)
    result.timings = dict(step.timings)
    return result


def footprint_thickness(xy: np.ndarray) -> float:
    """The extent (m) of points ``xy`` (N, 2) along their footprint's narrow principal axis.

    A TSDF fusion of noisy views can leave a ghost of a face beside the object: a sheet
    about one voxel thick (measured in a live loop: 52 points, 21 x 1.1 mm across, 20 mm
    tall, 6 mm off the box's face), which the size and height rules let through as a box."""
    xy = np.asarray(xy, float)
    if len(xy) < 3:
        return 0.0
    centred = xy - xy.mean(axis=0)
    _, vecs = np.linalg.eigh(centred.T @ centred)
    return float(np.ptp(centred @ vecs[:, 0]))


def _write_outputs(result, fits, frame, cfg, run_dir: Path, step):
    try:
        mesh_dir = run_dir / 'meshes'
        for k, (obj, fit) in enumerate(zip(result.objects, fits)):
            out = meshes.object_meshes(obj.id, fit, mesh_dir, cfg.max_hull_vertices,
                                       cfg.coacd_threshold)
            obj.mesh_path = str(out.mesh_path)
            obj.collision_paths = [str(p) for p in out.collision_paths]
            step('meshes', (k + 1) / len(fits))
        result.mjcf_path = str(scene_mjcf.write_scene(run_dir / 'scene.xml', result, frame))
        step('scene', 1.0)
    except OSError as exc:
        raise ReconstructionError(ErrorCode.WRITE_FAILED,
                                  f'cannot write the scene into {run_dir}: {exc}') from None
