"""The reconstruction stage of a run directory: capture set -> ``reconstruct_NNN/`` folder.

``run_stage`` is what the scene_reconstruction node (and the bench) call, without ROS:

    reconstruct_NNN/
      scene.xml         MJCF: table + every object as a free body (meshes beside it)
      meshes/           watertight mesh per object, CoACD hulls for non-primitives
      points.npz        fused object points (world), their object index, table outline
      manifest.json     inputs (capture set, robot mask source), parameters, results, timings

The arm is masked out of the views with the robot's URDF at the joint positions the capture
set recorded (``capture_set.load_capture_meta``). A failed stage leaves no folder behind.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..artifacts import MANIFEST, RunDirectory, atomic_output_path
from .config import STAGES, ProgressCallback, ReconstructionConfig
from .errors import ErrorCode, ReconstructionError

if TYPE_CHECKING:
    from .pipeline import ReconstructionResult

STAGE = 'reconstruct'
POINTS_FILE = 'points.npz'


@dataclass
class StageOutput:
    """The reconstruction stage's outputs: the result, stage folder, manifest, fused points and
    capture manifest."""
    result: ReconstructionResult
    folder: Path
    manifest_path: Path
    points_path: Path
    capture_manifest: Path
    robot_mask: str               # where the robot mask came from ('' = none)
    duration_s: float


def newest_capture(run_dir: str | Path) -> Path:
    """Manifest of the newest completed ``capture_NNN`` in ``run_dir``."""
    root = Path(run_dir).expanduser()
    done = sorted(p / MANIFEST for p in root.glob('capture_*') if (p / MANIFEST).is_file())
    if not done:
        raise ReconstructionError(ErrorCode.INVALID_CAPTURE,
                                  f'no completed capture_* folder in {root} (capture first, '
                                  'or give capture_manifest)')
    return done[-1]


def load_views(capture: str | Path):
    """(views, CaptureMeta) of a capture set; capture-set errors as ReconstructionErrors."""
    from ..capture_set import CaptureErrorCode, CaptureSetError, load_capture_meta, load_capture_set
    try:
        views = load_capture_set(capture)
        meta = load_capture_meta(capture)
    except CaptureSetError as exc:
        code = (ErrorCode.MISSING_INTRINSICS if exc.code == CaptureErrorCode.MISSING_INTRINSICS
                else ErrorCode.INVALID_CAPTURE)
        raise ReconstructionError(code, exc.message) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:   # unreadable/garbled manifest
        raise ReconstructionError(ErrorCode.INVALID_CAPTURE,
                                  f'{capture}: not a readable capture set: {exc}') from None
    return views, meta


@lru_cache(maxsize=4)
def _robot_from(urdf: str, _digest: str):
    from ..robot_description import load_robot
    return load_robot(urdf)


def load_robot_cached(urdf: str):
    """core.robot_description.load_robot, cached by the URDF (file path or XML text)."""
    return _robot_from(urdf, hashlib.sha256(urdf.encode()).hexdigest())


def robot_mask_for(meta, candidates: list[tuple[str, str]], margin: float = 0.01):
    """(mask or None, note): the first usable URDF of ``candidates`` [(label, path or XML)]
    posed at the capture set's joint states. No joint states -> no mask (the arm may then be
    reconstructed as an object: the note says why)."""
    configs = meta.configurations()
    if not configs:
        return None, 'none: the capture set recorded no joint_states'
    from .robot_mask import description_robot_mask
    problems = []
    for label, urdf in candidates:
        if not urdf:
            continue
        try:
            robot = load_robot_cached(urdf)
            return description_robot_mask(robot, configs, margin), label
        except Exception as exc:  # noqa: BLE001 - an unusable URDF: try the next source
            problems.append(f'{label}: {exc}')
    return None, 'none: ' + ('; '.join(problems) or 'no robot description')


def run_stage(capture: str | Path, run_dir: str | Path, config: ReconstructionConfig, *,
              robot_file: str = '', fallback_urdf: str = '', mask_margin: float = 0.01,
              progress: ProgressCallback | None = None, parameters: dict | None = None
              ) -> StageOutput:
    """Reconstruct the capture set ``capture`` (manifest, capture folder or bag; '' = the
    newest capture in ``run_dir``) into a new ``run_dir/reconstruct_NNN``.

    Robot mask URDF: ``robot_file``, else the one stored with the capture, else
    ``fallback_urdf`` (e.g. the latched /robot_description). ``config.robot_mask`` is replaced.
    Raises ReconstructionError (INVALID_CAPTURE, MISSING_INTRINSICS, ..., WRITE_FAILED).
    """
    t0 = time.perf_counter()
    capture_path = Path(capture).expanduser() if str(capture) else newest_capture(run_dir)
    views, meta = load_views(capture_path)
    if progress is not None and progress('load', 1.0) is False:
        raise ReconstructionError(ErrorCode.CANCELED, 'canceled after loading the capture set')
    mask, mask_source = robot_mask_for(
        meta, [('robot_description_file', robot_file),
               ('capture set robot_description', meta.robot_description),
               ('robot_description topic', fallback_urdf)], mask_margin)
    config.robot_mask = mask
    try:
        record = RunDirectory(run_dir).new_stage(STAGE)
    except OSError as exc:
        raise ReconstructionError(ErrorCode.WRITE_FAILED,
                                  f'cannot create a stage folder in {run_dir}: {exc}') from None
    try:
        from .pipeline import reconstruct as reconstruct_views  # open3d: loaded here
        result = reconstruct_views(views, config, record.folder, progress)
        points_path = _write_points(record.folder / POINTS_FILE, result)
        record.inputs = {
            'capture_manifest': str(capture_path.resolve()), 'num_views': len(views),
            'views': [v.name for v in views],
            'robot_mask': mask_source, 'joint_configurations': meta.configurations()}
        record.parameters = {**config.parameters(), **(parameters or {})}
        record.results = result.summary()
        record.results['total_s'] = round(time.perf_counter() - t0, 4)
        record.add_output('scene', result.mjcf_path)
        record.add_output('points', points_path)
        for obj in result.objects:
            record.add_output(f'mesh/{obj.id}', obj.mesh_path)
        manifest = record.finish()
    except ReconstructionError:
        shutil.rmtree(record.folder, ignore_errors=True)
        raise
    except OSError as exc:
        shutil.rmtree(record.folder, ignore_errors=True)
        raise ReconstructionError(ErrorCode.WRITE_FAILED,
                                  f'cannot write {record.folder}: {exc}') from None
    except BaseException:
        shutil.rmtree(record.folder, ignore_errors=True)
        raise
    return StageOutput(result, record.folder, manifest, points_path, capture_path.resolve(),
                       mask_source, time.perf_counter() - t0)


def _write_points(path: Path, result: ReconstructionResult) -> Path:
    pts = [np.asarray(o.points, np.float32).reshape(-1, 3) for o in result.objects
           if o.points is not None]
    labels = [np.full(len(p), k, np.int32) for k, p in enumerate(pts)]
    with atomic_output_path(path) as tmp:
        with open(tmp, 'wb') as f:
            np.savez_compressed(
                f, points=np.vstack(pts) if pts else np.zeros((0, 3), np.float32),
                labels=np.concatenate(labels) if labels else np.zeros(0, np.int32),
                ids=np.array([o.id for o in result.objects]),
                table_outline=np.asarray(result.table_outline, float),
                table_plane=np.asarray(result.table_plane, float))
    return path


def load_points(folder: str | Path) -> dict:
    """points.npz of a stage folder as a dict of arrays (points, labels, ids, table_outline)."""
    with np.load(Path(folder) / POINTS_FILE) as data:
        return {k: data[k] for k in data.files}


def load_summary(folder: str | Path) -> dict:
    """The stage manifest's results (table, objects, timings)."""
    return json.loads((Path(folder) / MANIFEST).read_text())['results']


def overall_fraction(stage: str, fraction: float) -> float:
    """Progress of the whole stage, 0..1: loading then the pipeline's stages, equal shares."""
    order = ('load', *STAGES)
    k = order.index(stage) if stage in order else 0
    return min(1.0, (k + max(0.0, min(1.0, fraction))) / len(order))
