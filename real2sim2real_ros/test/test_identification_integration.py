"""System identification on the emulated bringup over DDS: live probes through the armed
executor, estimates against the cell spec's hidden truth (the test is the evaluator), the
same estimates offline from the recorded bags, and bad input."""
from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

from real2sim2real_msgs.action import Identify  # noqa: E402

IR = Identify.Result


@pytest.fixture(scope='module')
def live(emulated_bringup):
    from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
    graph, cmd, tmp = emulated_bringup
    cmd.disarm()
    refused = cmd.identify(num_probes=2, run_dir=str(tmp / 'refused'), timeout=60)
    resp = cmd.arm()
    assert resp.success, resp.message
    feedback = []
    result = cmd.identify(num_probes=3, run_dir=str(tmp / 'live'), feedback=feedback.append,
                          timeout=240)
    spec = load_cell_spec(default_cell_spec_path())
    names = [p.name.split('/')[1] for p in result.parameters.parameters
             if p.name.endswith('/damping')]
    return cmd, tmp, refused, result, feedback, spec.hidden_truth(names)


def test_disarmed_executor_is_execution_failed(live):
    _, _, refused, _, _, _ = live
    assert refused.error_code == IR.EXECUTION_FAILED
    assert 'DISARMED' in refused.error_msg


def test_live_estimates_match_the_hidden_truth(live):
    """Honest estimates: every parameter the probes pin down is within 10% of the truth,
    latency within 1 ms, and the intervals cover the truth.

    "Pinned down" here: a 95% interval within +-6.5% of the estimate, so that 10% is three
    standard errors; a parameter whose interval is just inside +-10% misses 10% in 5% of
    runs by the interval's own definition (seen: wrist_3 armature 10.7% off, interval
    +-9.9%), which would make this test fail at random. Two 4 s probes at the executor's
    100 Hz do not pin all 20 parameters; the rest must still have intervals that hold the
    truth. The held-out probe at the noise level shows the bags' time axis is exact."""
    _, _, _, result, feedback, truth = live
    assert result.error_code == IR.NONE, result.error_msg
    est = {p.name: p for p in result.parameters.parameters}
    assert len(est) == 20
    checked, covered = [], 0
    for name, p in est.items():
        t = truth[name]
        assert p.lower_95 <= p.value <= p.upper_95 and p.identified, name
        covered += p.lower_95 <= t <= p.upper_95
        if (p.upper_95 - p.lower_95) / 2 <= 0.065 * abs(p.value):
            checked.append(name)
            assert abs(p.value - t) <= 0.10 * t, (name, p.value, t)
    errors = {n: abs(est[n].value - truth[n]) / truth[n] for n in est}
    print(f'\nlive identification: {len(checked)}/20 pinned to +-6.5%, '
          f'{sum(e <= 0.10 for e in errors.values())}/20 within 10% of the truth, '
          f'{covered}/20 intervals cover it; worst {max(errors, key=errors.get)} '
          f'{max(errors.values()):.1%}')
    assert {'global/command_latency', 'global/gravity_compensation'} <= set(checked), checked
    assert abs(est['global/command_latency'].value - truth['global/command_latency']) <= 0.001
    # One run, 20 intervals whose damping/friction-loss pairs are correlated: a nominal 95%
    # coverage still leaves 4 misses in a few percent of runs (seen once in CI-like runs);
    # the >= 90% coverage claim is made over many cells in test_sysid.py, not per run.
    assert covered >= 0.75 * len(est), [(n, p.value, p.lower_95, p.upper_95, truth[n])
                                        for n, p in est.items()]
    noise = truth['global/joint_state_noise_std']
    assert result.heldout_error_after <= 0.3 * result.heldout_error_before
    assert result.heldout_error_after < 1.5 * noise
    assert result.residual_after < 1.5 * noise < result.residual_before
    stages = [f.stage for f in feedback]
    assert any(s.startswith('excite') for s in stages) and 'fit' in stages


def test_artifacts_topic_and_twin_get_the_parameters(live):
    from conftest import TopicListener

    from real2sim2real_msgs.msg import PhysicalParameterSet
    from real2sim2real_ros.ros import qos
    cmd, _, _, result, _, _ = live
    folder = Path(result.parameters.artifact_dir)
    assert folder.name.startswith('identify_')
    assert (folder / 'parameters.yaml').is_file() and (folder / 'manifest.json').is_file()
    assert Path(result.report_path).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    listener = TopicListener(PhysicalParameterSet, 'physical_parameters', qos.LATCHED)
    try:
        assert listener.wait_for(1, 10)      # latched: a late subscriber still gets it
        msg = listener.snapshot()[-1][1]
        assert msg.artifact_dir == result.parameters.artifact_dir
    finally:
        listener.close()
    name = 'joint/elbow_joint/damping'
    (twin,) = cmd.get_physical_parameters([name]).parameters
    fitted = next(p for p in result.parameters.parameters if p.name == name)
    assert twin.value == pytest.approx(fitted.value)
    assert twin.identified == fitted.identified


def test_offline_from_the_same_bags_gives_the_same_estimates(live):
    import json
    cmd, tmp, _, result, _, _ = live
    manifest = json.loads((Path(result.parameters.artifact_dir) / 'manifest.json').read_text())
    bags = manifest['inputs']['bag_paths']
    assert len(bags) == 3 and all(Path(b).is_dir() for b in bags)
    offline = cmd.identify(bag_paths=bags, run_dir=str(tmp / 'offline'), timeout=240)
    assert offline.error_code == IR.NONE, offline.error_msg
    live_values = {p.name: p.value for p in result.parameters.parameters}
    for p in offline.parameters.parameters:
        assert p.value == pytest.approx(live_values[p.name], rel=1e-6)
    assert offline.heldout_error_after == pytest.approx(result.heldout_error_after, rel=1e-6)


def test_bag_without_the_topics_is_missing_topics(live, tmp_path):
    from real2sim2real_ros.core.bag_io import BagWriter
    cmd, _, _, _, _, _ = live
    with BagWriter(tmp_path / 'chatter') as bag:
        bag.add_topic('/chatter', 'std_msgs/msg/String')
        bag.write('/chatter', 1, {'data': 'hello'})
    res = cmd.identify(bag_paths=[str(tmp_path / 'chatter')], timeout=60)
    assert res.error_code == IR.MISSING_TOPICS and 'joint_states' in res.error_msg
    res = cmd.identify(bag_paths=[str(tmp_path / 'no_such_bag')], timeout=60)
    assert res.error_code == IR.MISSING_TOPICS and 'no_such_bag' in res.error_msg
    res = cmd.identify(parameter_names=['joint/elbow_joint/stiction'], timeout=60)
    assert res.error_code == IR.UNKNOWN_PARAMETER and 'stiction' in res.error_msg


def test_error_codes_map_from_the_core_exceptions():
    from real2sim2real_ros.core.parameters import InvalidBoundsError, UnknownParameterError
    from real2sim2real_ros.core.sysid.bags import MissingTopicsError
    from real2sim2real_ros.core.sysid.fit import NotConvergedError
    from real2sim2real_ros.core.twin import UnstableTwinError
    from real2sim2real_ros.nodes.system_identification_node import error_code_for
    assert [error_code_for(e('x')) for e in (
        MissingTopicsError, UnknownParameterError, InvalidBoundsError, NotConvergedError,
        UnstableTwinError)] == [IR.MISSING_TOPICS, IR.UNKNOWN_PARAMETER, IR.INVALID_BOUNDS,
                                IR.NOT_CONVERGED, IR.UNSTABLE_TWIN]
