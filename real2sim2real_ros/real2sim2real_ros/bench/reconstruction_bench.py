"""Scene reconstruction time, peak memory and accuracy vs the number of views.

Views are rendered by core EmulatedWorld (the multiview cell's objects and cameras'
intrinsics, RealSense-like depth noise, the spec's calibration error on the poses) from
``n`` cameras on an arc around the table, as in test_reconstruction. Each count runs in a
subprocess of its own, so its peak RSS is honest: the peak is reset (``/proc/self/clear_refs``)
after rendering, so it measures reconstruction (fusion, fitting, meshes, MJCF) only.

``run(counts) -> dict`` prints a rich table; ``python -m
real2sim2real_ros.bench.reconstruction_bench`` runs it and writes
bench_results/reconstruction.json.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

COUNTS = (1, 4, 8, 16)
SPEC = 'multiview'


def ring_spec(spec, n: int, radius: float = 0.55, height: float = 0.6):
    """``spec`` with ``n`` cameras on an arc around the table centre (the robot's side left
    out), each looking at the centre, with the spec's first camera's intrinsics and noise."""
    from real2sim2real_ros.core.cell_spec import look_at_rotation
    base, t = spec.cameras[0], spec.table
    centre = np.array([t.center[0], t.center[1], t.height])
    cams = []
    for i in range(n):
        a = np.radians(-135 + 270 * i / (n - 1)) if n > 1 else -np.pi / 2
        eye = centre + [radius * np.cos(a), radius * np.sin(a), height]
        cams.append(dataclasses.replace(base, name=f'ring{i}', position=tuple(eye),
                                        rotation=tuple(map(tuple, look_at_rotation(eye,
                                                                                   centre)))))
    return dataclasses.replace(spec, cameras=tuple(cams))


def _rss_kb(field: str) -> int:
    for line in Path('/proc/self/status').read_text().splitlines():
        if line.startswith(field + ':'):
            return int(line.split()[1])
    return 0


def worker(n: int) -> dict:
    """Render ``n`` views, reconstruct them, score against the spec (in this process)."""
    from real2sim2real_ros.core import camera_model
    from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
    from real2sim2real_ros.core.emulated_world import EmulatedWorld
    from real2sim2real_ros.core.reconstruction import (
        CameraIntrinsics,
        CaptureView,
        ReconstructionConfig,
        ReconstructionError,
        metrics,
        reconstruct,
    )
    from real2sim2real_ros.core.reconstruction.robot_mask import mujoco_robot_mask
    from real2sim2real_ros.core.reconstruction.views import pose_matrix
    spec_path = Path(default_cell_spec_path()).parent / f'{SPEC}.yaml'
    spec = ring_spec(load_cell_spec(spec_path), n)
    world = EmulatedWorld(spec)
    rng = np.random.default_rng(spec.seed)
    views = []
    t0 = time.perf_counter()
    for cam in spec.cameras:
        rgb, depth = world.render(cam.name)
        rot, pos = camera_model.perturb_pose(cam.rotation_matrix, np.asarray(cam.position),
                                             cam.calibration_error_translation,
                                             cam.calibration_error_rotation, rng)
        views.append(CaptureView(rgb, depth, CameraIntrinsics(
            cam.fx, cam.fy, cam.cx, cam.cy, cam.width, cam.height), pose_matrix(rot, pos),
            cam.name))
    render_s = time.perf_counter() - t0
    mask = mujoco_robot_mask(world.model, world.data)
    world.close()
    before_kb = _rss_kb('VmRSS')
    try:                                     # reset the high-water mark: measure from here
        Path('/proc/self/clear_refs').write_text('5')
        reset = True
    except OSError:
        reset = False
    out = {'views': n, 'render_s': render_s, 'rss_before_mb': before_kb / 1024,
           'peak_reset': reset}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            result = reconstruct(views, ReconstructionConfig(robot_mask=mask), tmp)
        except ReconstructionError as exc:
            out.update(status=exc.code.name, message=exc.message,
                       seconds=time.perf_counter() - t0)
            out['peak_rss_mb'] = _rss_kb('VmHWM') / 1024
            return out
        out['seconds'] = time.perf_counter() - t0
        out['peak_rss_mb'] = _rss_kb('VmHWM') / 1024
        out['timings_s'] = result.timings
        errors = metrics.evaluate(result.objects, spec.objects)   # reads the mesh files
    out['status'] = ('wrong count' if not errors.counts_match else 'ok'
                     if all(e.shape_ok for e in errors.matched) else 'wrong shape')
    out['shapes'] = {o.id: o.shape for o in result.objects}
    out['objects'] = {e.truth_id: {
        'position_mm': e.position_error * 1e3,
        'yaw_deg': None if np.isnan(e.yaw_error) else float(np.degrees(e.yaw_error)),
        'extents_mm': e.extents_error * 1e3, 'chamfer_mm': e.chamfer * 1e3}
        for e in errors.matched}
    out['missed'], out['spurious'] = errors.missed, errors.spurious
    return out


def run(counts=COUNTS, timeout: float = 120.0) -> dict:
    """One subprocess per view count; prints a table; returns {'spec', 'rows': [...]}."""
    from rich.console import Console
    from rich.table import Table
    rows = []
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get('OMP_NUM_THREADS', '2'))
    for n in counts:
        proc = subprocess.run([sys.executable, '-m', __name__, '--worker', str(n)],
                              capture_output=True, text=True, timeout=timeout, env=env)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('{')]
        if proc.returncode != 0 or not lines:
            rows.append({'views': n, 'status': f'crashed ({proc.returncode})',
                         'message': proc.stderr.strip().splitlines()[-1:] or ''})
            continue
        rows.append(json.loads(lines[-1]))
    table = Table(title=f'scene reconstruction vs views ({SPEC} cell objects, ring cameras, '
                  '640x480, calibration error on)')
    for col in ('views', 'status', 'time s', 'fusion s', 'peak RSS MB', '+MB', 'max pos mm',
                'max yaw deg', 'max extents mm', 'max Chamfer mm'):
        table.add_column(col, justify='right')
    for r in rows:
        objs = list(r.get('objects', {}).values())

        def worst(key, objs=objs):
            vals = [o[key] for o in objs if o[key] is not None]
            return f'{max(vals):.2f}' if vals else '-'
        table.add_row(str(r['views']), r['status'], f'{r.get("seconds", float("nan")):.2f}',
                      f'{r.get("timings_s", {}).get("fusion", float("nan")):.2f}',
                      f'{r.get("peak_rss_mb", float("nan")):.0f}',
                      f'{r.get("peak_rss_mb", np.nan) - r.get("rss_before_mb", np.nan):.0f}',
                      worst('position_mm'),
                      worst('yaw_deg'), worst('extents_mm'), worst('chamfer_mm'))
    Console(width=120).print(table)
    return {'spec': SPEC, 'rows': rows}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ['--worker']:
        print(json.dumps(worker(int(argv[1])), default=float))
        return 0
    results = run()
    out = Path('bench_results')
    out.mkdir(exist_ok=True)
    (out / 'reconstruction.json').write_text(json.dumps(results, indent=2, default=float))
    return 0


if __name__ == '__main__':
    sys.exit(main())
