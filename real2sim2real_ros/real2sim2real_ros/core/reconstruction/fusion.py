"""Fuse RGB-D views into one surface: Open3D TSDF integration, point cloud extraction.

Pixels outside the workspace (or on the robot) are set to holes before integration, so the
volume only spends voxels where objects can be; a masked pixel never carves free space.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import open3d as o3d
import open3d.core as o3c

from .views import CaptureView

# world points (N, 3) -> bool (N,): True where a point must be dropped (robot, outside the cell)
PointMask = Callable[[np.ndarray], np.ndarray]


def masked_depth(view: CaptureView, drop: PointMask | None) -> np.ndarray:
    """float32 depth in metres with holes as 0 and every dropped pixel made a hole."""
    depth = np.asarray(view.depth, np.float32).copy()
    depth[~np.isfinite(depth) | (depth < 0)] = 0.0
    if drop is not None:
        pts, uv = view.world_points()
        bad = np.asarray(drop(pts), bool)
        depth[uv[bad, 1], uv[bad, 0]] = 0.0
    return depth


def tsdf_fuse(views: list[CaptureView], depths: list[np.ndarray], voxel: float = 0.0025,
              trunc_voxels: float = 4.0, depth_trunc: float = 2.0,
              poses: list[np.ndarray] | None = None, min_weight: float = 0.5,
              block_count: int = 40000) -> o3d.geometry.PointCloud:
    """Integrate (already masked) depths into a TSDF voxel block grid; the fused surface as a
    cloud with normals (vertices of the marching-cubes mesh).

    Open3D's tensor VoxelBlockGrid is used: the legacy ScalableTSDFVolume of the pinned
    open3d-cpu 0.20 wheel integrates but extracts nothing (measured: 0 points).
    """
    device = o3c.Device('CPU:0')
    grid = o3d.t.geometry.VoxelBlockGrid(
        attr_names=('tsdf', 'weight'), attr_dtypes=(o3c.float32, o3c.float32),
        attr_channels=((1), (1)), voxel_size=voxel, block_resolution=8,
        block_count=block_count, device=device)
    for k, (view, depth) in enumerate(zip(views, depths)):
        i = view.intrinsics
        intr = o3c.Tensor(np.array([[i.fx, 0, i.cx], [0, i.fy, i.cy], [0, 0, 1.0]]),
                          o3c.float64)
        pose = poses[k] if poses is not None else np.asarray(view.T_world_camera, float)
        extrinsic = o3c.Tensor(np.linalg.inv(pose), o3c.float64)
        image = o3d.t.geometry.Image(o3c.Tensor(np.ascontiguousarray(depth, np.float32)))
        blocks = grid.compute_unique_block_coordinates(image, intr, extrinsic, 1.0,
                                                       depth_trunc, float(trunc_voxels))
        grid.integrate(blocks, image, intr, extrinsic, 1.0, depth_trunc, float(trunc_voxels))
    try:
        mesh = grid.extract_triangle_mesh(weight_threshold=min_weight).to_legacy()
    except RuntimeError:     # no surface at all (every pixel masked)
        return o3d.geometry.PointCloud()
    mesh.compute_vertex_normals()
    cloud = o3d.geometry.PointCloud(mesh.vertices)
    cloud.normals = mesh.vertex_normals
    return cloud


def view_cloud(view: CaptureView, depth: np.ndarray, stride: int = 2) -> o3d.geometry.PointCloud:
    """World-frame cloud of one (masked) depth image, for plane finding and ICP."""
    masked = CaptureView(None, np.where(depth > 0, depth, np.nan), view.intrinsics,
                         view.T_world_camera, view.name)
    pts, _ = masked.world_points(stride)
    return o3d.geometry.PointCloud(o3d.utility.Vector3dVector(pts))


def refine_poses_icp(views: list[CaptureView], depths: list[np.ndarray], voxel: float,
                     max_distance: float = 0.01) -> list[np.ndarray]:
    """Register every view's cloud to the fusion of the others (point-to-plane ICP).

    Corrects small extrinsic calibration errors (mm, mrad); a correction larger than
    ``max_distance`` is not trusted and the calibrated pose is kept.
    """
    poses = [np.asarray(v.T_world_camera, float) for v in views]
    if len(views) < 2:
        return poses
    clouds = [view_cloud(v, d).voxel_down_sample(voxel) for v, d in zip(views, depths)]
    for c in clouds:
        c.estimate_normals(o3d.geometry.KDTreeSearchParamHybrid(radius=4 * voxel, max_nn=30))
    refined = []
    for k, cloud in enumerate(clouds):
        target = o3d.geometry.PointCloud()
        for j, other in enumerate(clouds):
            if j != k:
                target += other
        result = o3d.pipelines.registration.registration_icp(
            cloud, target, max_distance, np.eye(4),
            o3d.pipelines.registration.TransformationEstimationPointToPlane())
        delta = result.transformation
        angle = np.arccos(np.clip((np.trace(delta[:3, :3]) - 1) / 2, -1, 1))
        if result.fitness > 0.5 and np.linalg.norm(delta[:3, 3]) < max_distance and angle < 0.02:
            refined.append(delta @ poses[k])
        else:
            refined.append(poses[k])
    return refined
