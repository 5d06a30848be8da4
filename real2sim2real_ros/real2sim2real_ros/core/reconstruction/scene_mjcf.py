"""The reconstructed scene as MJCF: the table as a box, every object a free body.

Masses come from volume x density prior (``mass_is_prior`` in the result); inertias are those
of the fitted solid. Mesh files are referenced relative to the MJCF (meshdir), so the scene
folder can be moved as a whole. Bodies are named ``object/<id>`` like the emulated cell's.

Object contacts (``OBJECT_CONTACT``): priority 1, so an object's own friction rules its
contacts with the table and the tool (MuJoCo takes the larger friction of two equal-priority
geoms: the table's would mask a slippery object, and ``geom/<id>/friction`` would identify
nothing), and solref 0.008 s: stiffer than MuJoCo's default 0.02 s, with which a pushed
object sinks ~3 mm into the tool and springs off it on release; strikes on emulated cells
with known truth gave friction errors of 8% RMS with 0.008 s against 13% with the default
(core/sysid/object_fit.py, README identification section).
"""
from __future__ import annotations

import os
from pathlib import Path
from xml.sax.saxutils import quoteattr

import numpy as np

from ..artifacts import atomic_write_text
from ..geometry import matrix_to_quat_wxyz

OBJECT_PREFIX = 'object/'
TABLE_THICKNESS = 0.04
OBJECT_CONTACT = 'priority="1" solref="0.008 1"'


def _f(values) -> str:
    return ' '.join(f'{float(v):.6g}' for v in np.atleast_1d(values))


def solid_inertia(shape: str, extents, mass: float) -> np.ndarray:
    """Principal inertia of the fitted solid (meshes: their bounding box), kg m^2."""
    x, y, z = np.asarray(extents, float)
    if shape == 'cylinder':
        r = x / 2
        i = mass * (3 * r * r + z * z) / 12
        return np.array([i, i, mass * r * r / 2])
    return mass * np.array([y * y + z * z, x * x + z * z, x * x + y * y]) / 12


def scene_xml(result, frame, meshdir: str = 'meshes', model_name: str = 'reconstructed_scene',
              mjcf_dir: Path | None = None) -> str:
    """MJCF text of the reconstructed table and objects in table ``frame`` (meshes under
    ``meshdir``)."""
    outline = np.asarray(result.table_outline)
    local = frame.to_table(np.column_stack([outline, np.zeros(len(outline))]))[:, :2]
    lo, hi = local.min(axis=0), local.max(axis=0)
    centre = frame.to_world(np.array([[*(lo + hi) / 2, -TABLE_THICKNESS / 2]]))[0]
    table_quat = matrix_to_quat_wxyz(frame.rotation)
    half = [*(hi - lo) / 2, TABLE_THICKNESS / 2]
    assets, bodies = [], []
    for obj in result.objects:
        name = OBJECT_PREFIX + obj.id
        inertia = solid_inertia(obj.shape, obj.extents, obj.mass)
        geoms = []
        if obj.shape == 'box':
            geoms.append(f'<geom name={quoteattr(name)} type="box" size="{_f(obj.extents / 2)}"'
                         f' condim="4" {OBJECT_CONTACT} rgba="0.8 0.4 0.2 1"/>')
        elif obj.shape == 'cylinder':
            size = [obj.extents[0] / 2, obj.extents[2] / 2]
            geoms.append(f'<geom name={quoteattr(name)} type="cylinder" size="{_f(size)}"'
                         f' condim="4" {OBJECT_CONTACT} rgba="0.2 0.4 0.8 1"/>')
        else:
            vis = f'{obj.id}_visual'
            assets.append(f'<mesh name="{vis}" file="{_rel(obj.mesh_path, mjcf_dir, meshdir)}"/>')
            geoms.append(f'<geom name={quoteattr(name + "/visual")} type="mesh" mesh="{vis}" '
                         'contype="0" conaffinity="0" group="1" rgba="0.5 0.6 0.5 1"/>')
            for k, path in enumerate(obj.collision_paths):
                mesh_name = f'{obj.id}_hull{k}'
                assets.append(f'<mesh name="{mesh_name}" '
                              f'file="{_rel(path, mjcf_dir, meshdir)}"/>')
                geoms.append(f'<geom name={quoteattr(f"{name}/hull{k}")} type="mesh" '
                             f'mesh="{mesh_name}" condim="4" {OBJECT_CONTACT} group="3"/>')
        pos = np.asarray(obj.position, float)
        if obj.shape in ('box', 'cylinder'):
            # Stand the primitive exactly on the table top: the estimate's last fraction of a
            # millimetre would otherwise start it sunk in (or dropping onto) the table.
            local = frame.to_table(pos[None])[0]
            local[2] = obj.extents[2] / 2
            pos = frame.to_world(local[None])[0]
        body = [f'<body name={quoteattr(name)} pos="{_f(pos)}" '
                f'quat="{_f(obj.quat_wxyz)}">',
                f'  <freejoint name={quoteattr(name)}/>',
                f'  <inertial pos="0 0 0" mass="{obj.mass:.6g}" diaginertia="{_f(inertia)}"/>',
                *(f'  {g}' for g in geoms), '</body>']
        bodies.append('\n'.join('    ' + line for line in body))
    asset_xml = ''.join(f'\n    {a}' for a in assets)
    comment = ('masses are priors (volume x density), not identified'
               if any(o.mass_is_prior for o in result.objects) else 'masses identified')
    return f'''<mujoco model="{model_name}">
  <!-- Reconstructed from RGB-D views; {comment}. -->
  <compiler angle="radian" meshdir="{meshdir}" autolimits="true"/>
  <option cone="elliptic"/>
  <asset>{asset_xml}
  </asset>
  <worldbody>
    <geom name="table" type="box" pos="{_f(centre)}" quat="{_f(table_quat)}" size="{_f(half)}"
          rgba="0.62 0.52 0.40 1"/>
{chr(10).join(bodies)}
  </worldbody>
</mujoco>
'''


def _rel(path: str, mjcf_dir: Path | None, meshdir: str) -> str:
    base = (mjcf_dir / meshdir) if mjcf_dir is not None else Path(meshdir)
    return os.path.relpath(path, base)


def write_scene(path: str | Path, result, frame, meshdir: str = 'meshes') -> Path:
    """Write the MJCF atomically; the mesh files must already be in ``<dir>/<meshdir>``."""
    path = Path(path)
    return atomic_write_text(path, scene_xml(result, frame, meshdir, mjcf_dir=path.parent))
