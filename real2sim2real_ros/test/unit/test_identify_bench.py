"""bench identify's live rows: a run directory's identify stage scored against a cell's truth
(the bench is the evaluator), its wall time as the loop coordinator timed it."""
import json

import pytest

from real2sim2real_ros.bench.identify_bench import _arm_truth, live
from real2sim2real_ros.core.parameters import ParameterEstimate, ParameterSet


def _run_dir(tmp_path, values: dict, stretch: dict):
    stage = tmp_path / 'identify_000'
    stage.mkdir()
    ps = ParameterSet()
    for name, v in values.items():
        k = stretch.get(name, 1.0)
        ps.add(ParameterEstimate(name, v * k, v * k * 0.95, v * k * 1.05, v, '', True))
    ps.save(stage / 'parameters.yaml')
    (stage / 'manifest.json').write_text(json.dumps({
        'started': 10.0, 'finished': 11.0, 'parameters': {'nthread': 2},
        'results': {'profile': {'seconds': {'arm_fit': 3.0}, 'counts': {'arm_fit': 1}},
                    'objects': {'heldout_error_before_m': 0.005,
                                'heldout_error_after_m': 0.002}}}))
    (tmp_path / 'loop_000').mkdir()
    (tmp_path / 'loop_000' / 'summary.json').write_text(json.dumps({'stages': [
        {'stage': 'identify', 'seconds': 64.3, 'artifact': str(stage / 'parameters.yaml')}]}))
    return tmp_path


def test_a_live_run_is_scored_against_the_cells_truth(tmp_path):
    truth = {k: v for k, v in _arm_truth().items() if k.startswith(('joint/', 'global/')) and v}
    assert len(truth) >= 20
    damping = next(k for k in truth if k.endswith('/damping'))
    row = live(_run_dir(tmp_path, truth, {damping: 1.2}))
    n = len(truth)
    assert (row['arm_n'], row['arm_within_10'], row['arm_covered']) == (n, n - 1, n - 1)
    assert row['wall_s'] == pytest.approx(64.3)
    assert row['object_heldout_after_m'] == pytest.approx(0.002)
    assert live(tmp_path / 'nothing') is None
