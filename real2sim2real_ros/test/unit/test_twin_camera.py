"""core/twin_camera.py: the twin rendered through pinhole intrinsics matches the pinhole model."""
from __future__ import annotations

import numpy as np
import pytest

from real2sim2real_ros.core import camera_model
from real2sim2real_ros.core.twin import Twin

# A yawed box on nothing; the robot is parked far away so only the box is in view.
CENTRE = np.array([0.6, 0.1, 0.05])
HALF = np.array([0.06, 0.04, 0.05])
YAW = 0.4
SCENE = f"""<mujoco><compiler angle="radian"/><worldbody>
  <geom name="box" type="box" size="{HALF[0]} {HALF[1]} {HALF[2]}"
        pos="{CENTRE[0]} {CENTRE[1]} {CENTRE[2]}" euler="0 0 {YAW}" rgba="0.8 0.3 0.1 1"/>
</worldbody></mujoco>"""
# Off-centre principal point and unequal focal lengths, so any mix-up shows.
INTR = camera_model.Intrinsics(640, 480, fx=615.0, fy=605.0, cx=339.5, cy=224.5)


def _look_at(eye, target, world_up=(0.0, 0.0, 1.0)) -> np.ndarray:
    z = np.asarray(target, float) - eye
    z /= np.linalg.norm(z)
    x = np.cross(z, world_up)
    x /= np.linalg.norm(x)
    return np.column_stack([x, np.cross(z, x), z])   # world <- optical (x right, y down)


def _box_corners() -> np.ndarray:
    c, s = np.cos(YAW), np.sin(YAW)
    rz = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])
    signs = np.array([[i, j, k] for i in (-1, 1) for j in (-1, 1) for k in (-1, 1)], float)
    return (signs * HALF) @ rz.T + CENTRE


def _convex_mask(points: np.ndarray, shape) -> tuple[np.ndarray, np.ndarray]:
    """Pixel centres inside the convex hull of 2-D points; and each pixel's distance (px)
    to the hull's boundary."""
    from scipy.spatial import ConvexHull
    hull = points[ConvexHull(points).vertices]      # counter-clockwise
    v, u = np.mgrid[0:shape[0], 0:shape[1]]
    pix = np.column_stack([u.ravel(), v.ravel()]).astype(float)
    inside = np.ones(len(pix), bool)
    dist = np.full(len(pix), np.inf)
    for a, b in zip(hull, np.roll(hull, -1, axis=0)):
        e = b - a
        cross = e[0] * (pix[:, 1] - a[1]) - e[1] * (pix[:, 0] - a[0])
        inside &= cross >= 0
        t = np.clip(((pix - a) @ e) / (e @ e), 0.0, 1.0)
        dist = np.minimum(dist, np.linalg.norm(pix - (a + t[:, None] * e), axis=1))
    return inside.reshape(shape), dist.reshape(shape)


@pytest.fixture(scope='module')
def view(robot):
    from real2sim2real_ros.core.twin_camera import TwinCamera
    twin = Twin(robot, scene=SCENE, robot_pos=(-5.0, 0.0, 0.0))
    eye = np.array([0.25, -0.55, 0.75])
    rot = _look_at(eye, CENTRE + [0.02, -0.03, 0.0])
    cam = TwinCamera(twin.model, INTR)     # EGL offscreen rendering is a requirement
    try:
        rgb, depth = cam.render(twin.data, rot, eye)
    finally:
        cam.close()
        twin.close()
    return rgb, depth, rot, eye


def test_shapes_and_background(view):
    rgb, depth, _, _ = view
    assert rgb.shape == (480, 640, 3) and rgb.dtype == np.uint8
    assert depth.shape == (480, 640) and depth.dtype == np.float32
    hit = np.isfinite(depth)
    assert 2000 < hit.sum() < 0.5 * hit.size        # the box, and NaN around it
    assert rgb[hit].mean(axis=0)[0] > rgb[hit].mean(axis=0)[2]   # the orange box


def test_depth_of_the_top_face_lies_on_its_plane(view):
    _, depth, rot, eye = view
    pts = camera_model.transform_points(camera_model.depth_to_points(depth, INTR), rot, eye)
    c, s = np.cos(YAW), np.sin(YAW)
    local = (pts - CENTRE) @ np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])
    top = (np.abs(local[:, 0]) < HALF[0] - 0.005) & (np.abs(local[:, 1]) < HALF[1] - 0.005) \
        & (np.abs(local[:, 2] - HALF[2]) < 0.01)
    assert top.sum() > 1000
    err = np.abs(local[top, 2] - HALF[2])
    assert err.max() < 1e-3, err.max()
    # Every hit is on the box's surface (no scaled / shifted geometry).
    assert np.all(np.abs(local) < HALF + 1e-3)


def test_silhouette_matches_the_pinhole_projection(view):
    _, depth, rot, eye = view
    corners = camera_model.transform_points(_box_corners() - eye, rot.T, np.zeros(3))
    uv = INTR.project(corners)
    expected, dist = _convex_mask(uv, depth.shape)
    got = np.isfinite(depth)
    wrong = got != expected
    assert dist[wrong].max(initial=0.0) <= 1.0     # only at the edges, < 1 px
    assert wrong.sum() < 0.02 * expected.sum()
    # No sub-pixel bias: the centroids agree to a tenth of a pixel.
    v, u = np.nonzero(got)
    ve, ue = np.nonzero(expected)
    assert abs(u.mean() - ue.mean()) < 0.1 and abs(v.mean() - ve.mean()) < 0.1
