"""The reconstruction stage without ROS: the capture set records the arm, the stage masks it
out with the URDF at those joints, writes reconstruct_NNN/, and leaves nothing on failure."""
from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.reconstruction_views import CELLS, capture

from real2sim2real_ros.core import capture_set as cs
from real2sim2real_ros.core.cell_spec import load_cell_spec
from real2sim2real_ros.core.emulated_world import load_robot_model
from real2sim2real_ros.core.evaluation.cells import ring_cameras
from real2sim2real_ros.core.reconstruction import (
    ErrorCode,
    ReconstructionConfig,
    ReconstructionError,
    metrics,
    stage,
)
from real2sim2real_ros.core.reconstruction.robot_mask import description_robot_mask


@pytest.fixture(scope='module')
def capture_dir(tmp_path_factory):
    spec = ring_cameras(load_cell_spec(CELLS / 'multiview.yaml'), 4)
    views, world_mask, _ = capture(spec)
    robot = load_robot_model(spec.urdf_path())
    snap = cs.JointSnapshot(7, tuple(robot.joint_names), tuple(spec.robot.initial_positions))
    run = tmp_path_factory.mktemp('run')
    records = [cs.ViewRecord(v.name, 1000 + i) for i, v in enumerate(views)]
    _, manifest = cs.write_capture_set(cs.new_capture_folder(run), views, records,
                                       joint_states=[snap] * len(views),
                                       robot_description=robot.urdf_text)
    return spec, run, manifest, world_mask, robot


def test_capture_set_records_the_arm(capture_dir):
    spec, _run, manifest, world_mask, robot = capture_dir
    meta = cs.load_capture_meta(manifest)
    assert len(meta.joint_states) == 4 and meta.robot_description == robot.urdf_text
    (config,) = meta.configurations()            # a fixed arm: one configuration
    assert list(config) == list(robot.joint_names)
    assert np.allclose(list(config.values()), spec.robot.initial_positions)
    summary = json.loads(manifest.read_text())['results']['robot']
    assert summary['robot_description'] == cs.ROBOT_DESCRIPTION_FILE
    assert (manifest.parent / cs.ROBOT_DESCRIPTION_FILE).read_text() == robot.urdf_text
    # The URDF at those joints masks exactly what the emulated world's own arm geoms mask.
    pts = np.random.default_rng(0).uniform([-0.2, -0.5, -0.05], [0.8, 0.5, 0.9], (100000, 3))
    mask = description_robot_mask(stage.load_robot_cached(robot.urdf_text), [config])
    assert mask(pts).sum() > 500
    np.testing.assert_array_equal(mask(pts), world_mask(pts))


def test_stage_writes_folder_and_matches_truth(capture_dir):
    spec, run, manifest, _mask, _robot = capture_dir
    seen = []
    out = stage.run_stage('', run, ReconstructionConfig(),
                          progress=lambda s, f: seen.append(stage.overall_fraction(s, f)))
    assert out.capture_manifest == manifest.resolve()     # '' = the newest capture
    assert out.robot_mask == 'capture set robot_description'
    assert out.folder.name == 'reconstruct_000' and out.manifest_path.is_file()
    record = json.loads(out.manifest_path.read_text())
    assert record['inputs']['num_views'] == 4 and record['parameters']['robot_mask'] is True
    assert {'scene', 'points'} <= set(record['outputs'])
    pts = stage.load_points(out.folder)
    assert len(pts['points']) == len(pts['labels']) > 1000
    assert list(pts['ids']) == [o.id for o in out.result.objects]
    errors = metrics.evaluate(out.result.objects, spec.objects)
    assert errors.counts_match
    assert all(e.position_error < 0.005 and e.extents_error < 0.005 for e in errors.matched)
    assert seen[-1] == pytest.approx(1.0) and np.all(np.diff(seen) >= 0)


def test_stage_failures(capture_dir, tmp_path):
    _spec, run, manifest, _mask, _robot = capture_dir
    with pytest.raises(ReconstructionError) as exc:
        stage.run_stage('', tmp_path, ReconstructionConfig())
    assert exc.value.code == ErrorCode.INVALID_CAPTURE
    with pytest.raises(ReconstructionError) as exc:
        stage.run_stage(tmp_path / 'nope.json', run, ReconstructionConfig())
    assert exc.value.code == ErrorCode.INVALID_CAPTURE and 'nope.json' in exc.value.message
    # Cancel during fusion: no stage folder is left behind.
    before = sorted(run.glob('reconstruct_*'))
    with pytest.raises(ReconstructionError) as exc:
        stage.run_stage(manifest, run, ReconstructionConfig(),
                        progress=lambda s, f: s != 'fusion')
    assert exc.value.code == ErrorCode.CANCELED
    assert sorted(run.glob('reconstruct_*')) == before
