"""Render the twin through a real camera: its pinhole intrinsics at its calibrated pose.

The twin's compiled model has no cameras (and a compiled model cannot gain any), so the view
is set on the renderer's OpenGL camera instead: after ``mjv_updateScene`` both eyes of the
scene camera (``mjSTEREO_NONE`` renders their average) get the pose and an asymmetric
frustum that reproduces the OpenCV pinhole model exactly, principal point included:

* pose: MuJoCo cameras look along their -z with y up; ``forward`` = the optical z axis,
  ``up`` = minus the optical y axis (REP 103 optical frame: x right, y down, z forward);
* frustum at the near plane ``n``: the image spans pixel edges u = -0.5 .. W - 0.5 (OpenCV
  pixel centres on integers), so ``left/right = n (-0.5 - cx) / fx, n (W - 0.5 - cx) / fx``
  and ``top/bottom = n (cy + 0.5) / fy, -n (H - 0.5 - cy) / fy`` (``frustum_width`` is the
  half width, ``frustum_center`` the horizontal shift). No crop or shift of the image.

Near/far stay the model's (``vis.map.znear/zfar * stat.extent``): mujoco.Renderer converts
the depth buffer to metres with exactly those. Depth is the z distance along the optical
axis (what a RealSense publishes), NaN where nothing was hit (the far plane).

Accuracy (test_twin_camera.py: 640x480, fx 615 / fy 605, principal point 20 / -15 px off
centre, a yawed box seen obliquely from ~0.9 m): box-top points back-projected from the depth
lie on the top plane within 0.0002 mm; the silhouette is pixel-exact (every pixel centre inside
the pinhole projection of the box is set, none outside: 0 of 5980 pixels differ).

GL contexts are thread-bound: create, use and close a TwinCamera on one thread.
"""
from __future__ import annotations

import mujoco
import numpy as np

from .camera_model import Intrinsics
from .offscreen import mujoco_renderer

__all__ = ['TwinCamera', 'render_view']


class TwinCamera:
    """An offscreen renderer of ``model`` with the given pinhole intrinsics."""

    def __init__(self, model: mujoco.MjModel, intrinsics: Intrinsics):
        self.intrinsics = intrinsics
        self.model = model
        w, h = int(intrinsics.width), int(intrinsics.height)
        # The offscreen buffer is sized from the model when the context is made.
        model.vis.global_.offwidth = max(int(model.vis.global_.offwidth), w)
        model.vis.global_.offheight = max(int(model.vis.global_.offheight), h)
        self._renderer = mujoco_renderer(model, h, w)

    def _set_view(self, rotation: np.ndarray, translation) -> None:
        k = self.intrinsics
        r = np.asarray(rotation, float)
        forward, up = r[:, 2], -r[:, 1]
        for cam in self._renderer.scene.camera:
            n = float(cam.frustum_near)
            left = n * (-0.5 - k.cx) / k.fx
            right = n * (k.width - 0.5 - k.cx) / k.fx
            cam.pos[:] = np.asarray(translation, float)
            cam.forward[:] = forward
            cam.up[:] = up
            cam.frustum_center = 0.5 * (left + right)
            cam.frustum_width = 0.5 * (right - left)
            cam.frustum_top = n * (k.cy + 0.5) / k.fy
            cam.frustum_bottom = -n * (k.height - 0.5 - k.cy) / k.fy
            cam.orthographic = 0

    def update(self, data: mujoco.MjData, rotation: np.ndarray, translation) -> None:
        """Snapshot ``data`` into the scene, seen from the optical frame ``rotation`` (3x3,
        world <- optical) at ``translation`` (world). Cheap: hold the data's lock only here."""
        self._renderer.update_scene(data, camera=-1)
        self._set_view(rotation, translation)

    def render_pixels(self, depth: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """(rgb uint8 HxWx3, depth float32 m HxW, NaN = nothing) of the last :meth:`update`."""
        r = self._renderer
        r.disable_depth_rendering()
        rgb = r.render().copy()
        if not depth:
            return rgb, None
        r.enable_depth_rendering()
        z = r.render().astype(np.float32)
        r.disable_depth_rendering()
        m = self.model
        far = float(m.vis.map.zfar * m.stat.extent)
        z[~(z < far * 0.999)] = np.nan
        return rgb, z

    def render(self, data: mujoco.MjData, rotation: np.ndarray, translation,
               depth: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`update` then :meth:`render_pixels`."""
        self.update(data, rotation, translation)
        return self.render_pixels(depth)

    def close(self) -> None:
        """Release the renderer."""
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None


def render_view(model: mujoco.MjModel, data: mujoco.MjData, intrinsics: Intrinsics,
                rotation: np.ndarray, translation) -> tuple[np.ndarray, np.ndarray]:
    """One-shot :meth:`TwinCamera.render` (makes and frees a GL context)."""
    cam = TwinCamera(model, intrinsics)
    try:
        return cam.render(data, rotation, translation)
    finally:
        cam.close()
