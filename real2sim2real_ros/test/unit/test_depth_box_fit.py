"""One rendered noisy depth image of a known box -> back-projection -> RANSAC planes.

Checks the whole camera chain (MuJoCo intrinsics, optical-frame extrinsics, depth units,
noise model): the table plane (normal within 1 deg, height within 3 sigma of the noise
model), the box's top face height and its visible side faces, all within the noise model.
"""
import copy
from pathlib import Path

import numpy as np
import open3d as o3d  # noqa: E402
import pytest
import yaml

from real2sim2real_ros.core import camera_model
from real2sim2real_ros.core.cell_spec import load_cell_spec
from real2sim2real_ros.core.depth_noise import depth_sigma
from real2sim2real_ros.core.emulated_world import EmulatedWorld

CELLS = Path(__file__).resolve().parents[2] / 'config' / 'cells'
BOX = dict(size=(0.10, 0.08, 0.06), xy=(0.60, 0.0), yaw=0.4)


@pytest.fixture(scope='module')
def scene():
    data = copy.deepcopy(yaml.safe_load((CELLS / 'default.yaml').read_text()))
    data['robot']['initial_positions'] = [3.0, -1.5708, 1.5708, 1.5708, 0.0, 0.0]  # arm away
    data['objects'] = [{'id': 'box', 'shape': 'box', 'size': list(BOX['size']),
                        'pose': {'xyz': list(BOX['xy']), 'yaw': BOX['yaw']}, 'mass': 0.3}]
    data['cameras'][0]['pose'] = {'xyz': [0.60, -0.45, 0.70], 'look_at': [0.60, 0.0, 0.0]}
    spec = load_cell_spec(data)
    world = EmulatedWorld(spec)
    world.step_for(0.05)
    _, depth = world.render('camera')
    world.close()
    cam = spec.cameras[0]
    intr = camera_model.Intrinsics(cam.width, cam.height, cam.fx, cam.fy, cam.cx, cam.cy)
    pts_cam = camera_model.depth_to_points(depth, intr)
    pts = camera_model.transform_points(pts_cam, cam.rotation_matrix, cam.position)
    return spec, cam, pts, pts_cam


def _cloud(points):
    pc = o3d.geometry.PointCloud()
    pc.points = o3d.utility.Vector3dVector(points)
    return pc


def _fit_plane(points, threshold, seed=0):
    o3d.utility.random.seed(seed)
    model, inliers = _cloud(points).segment_plane(threshold, 3, 1000)
    n = np.asarray(model[:3])
    n = n / np.linalg.norm(n)
    # Least-squares refinement on the inliers: the RANSAC sample itself is noisy.
    sel = points[inliers]
    centre = sel.mean(axis=0)
    _, _, vt = np.linalg.svd(sel - centre, full_matrices=False)
    n_ls = vt[2] * np.sign(vt[2] @ n)
    return n_ls, -n_ls @ centre, np.asarray(inliers)


def test_table_plane(scene):
    spec, cam, pts, pts_cam = scene
    sigma = depth_sigma(np.median(pts_cam[:, 2]), cam.depth_noise)
    normal, d, inliers = _fit_plane(pts, 3 * sigma)
    normal = normal * np.sign(normal[2])
    d = -normal @ pts[inliers].mean(axis=0)
    angle = np.degrees(np.arccos(min(1.0, normal[2])))
    height = -d / normal[2]
    assert inliers.size > 0.5 * pts.shape[0]
    assert angle < 1.0, angle
    assert abs(height - spec.table.height) < 3 * sigma, (height, sigma)


def test_box_top_and_side_faces(scene):
    spec, cam, pts, pts_cam = scene
    sx, sy, sz = BOX['size']
    sigma_box = depth_sigma(np.linalg.norm(np.array([*BOX['xy'], sz]) - cam.position),
                            cam.depth_noise)
    above = pts[pts[:, 2] > spec.table.height + 4 * sigma_box]
    # Keep the box's neighbourhood (the floor beyond the table is far below and excluded).
    near = above[np.linalg.norm(above[:, :2] - np.array(BOX['xy']), axis=1) < 0.15]
    assert near.shape[0] > 1500

    normal, d, inl = _fit_plane(near, 3 * sigma_box)
    top = near[inl]
    n_up = normal * np.sign(normal[2])
    assert np.degrees(np.arccos(min(1.0, abs(n_up[2])))) < 2.0
    assert abs(np.median(top[:, 2]) - sz) < 3 * sigma_box
    assert abs(top[:, 2].mean() - sz) < 3 * sigma_box / np.sqrt(len(top)) + 1e-3

    # Side faces: their outward normals are the box's yawed x / y axes.
    c, s = np.cos(BOX['yaw']), np.sin(BOX['yaw'])
    axes = {'x': (np.array([c, s, 0]), sx / 2), 'y': (np.array([-s, c, 0]), sy / 2)}
    centre = np.array([*BOX['xy'], sz / 2])
    rest = near[np.setdiff1d(np.arange(len(near)), inl)]
    found = {}
    for _ in range(3):
        if rest.shape[0] < 150:
            break
        normal, _, inl = _fit_plane(rest, 3 * sigma_box)
        if len(inl) < 150:
            break
        face_pts = rest[inl]
        for name, (n_true, half) in axes.items():
            if np.degrees(np.arccos(np.clip(abs(normal @ n_true), -1, 1))) < 3.0:
                offset = np.median((face_pts - centre) @ n_true)   # signed distance from centre
                found[('+' if offset > 0 else '-') + name] = abs(offset) - half
        rest = rest[np.setdiff1d(np.arange(len(rest)), inl)]
    # From (0.6, -0.45, 0.7) the camera sees the faces whose normals have a -y part: with
    # yaw 0.4 those are -y (normal (0.39, -0.92)) and -x (normal (-0.92, -0.39)).
    assert set(found) == {'-y', '-x'}, found
    for name, err in found.items():
        assert abs(err) < 3 * sigma_box, (name, err, sigma_box)
