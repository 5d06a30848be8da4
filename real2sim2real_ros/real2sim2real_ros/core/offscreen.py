"""Offscreen MuJoCo renderers that survive another library's EGL teardown.

Contract: :func:`mujoco_renderer` returns ``mujoco.Renderer(model, height, width)``. With
``MUJOCO_GL=egl`` MuJoCo initialises one EGL device display per process and keeps it. Drake's
``RenderEngineVtk`` renders through the same device display and calls ``eglTerminate`` on it
when its render engine is destroyed; MuJoCo's next context then fails with
``EGL_NOT_INITIALIZED``. Re-initialising the display first (``eglInitialize`` on an
initialised display changes nothing) makes a MuJoCo renderer work in any process that also
ran a Drake cell: the evaluation harness and the test suite.
"""
from __future__ import annotations

import os

import mujoco


def mujoco_renderer(model: mujoco.MjModel, height: int, width: int) -> mujoco.Renderer:
    """A MuJoCo offscreen renderer; see the module docstring for why not the plain class."""
    if os.environ.get('MUJOCO_GL') == 'egl':
        from mujoco import egl
        if egl.EGL_DISPLAY is not None:
            from OpenGL import EGL
            EGL.eglInitialize(egl.EGL_DISPLAY, None, None)
    return mujoco.Renderer(model, height, width)
