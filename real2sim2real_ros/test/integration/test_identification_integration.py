"""System identification on the emulated bringup over DDS: live probes through the armed
executor, estimates against the cell spec's hidden truth (the test is the evaluator), the
same estimates offline from the recorded bags, and bad input."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.integration

from real2sim2real_msgs.action import Identify  # noqa: E402

IdentifyResult = Identify.Result


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
    assert refused.error_code == IdentifyResult.EXECUTION_FAILED
    assert 'DISARMED' in refused.error_msg


def test_live_estimates_match_the_hidden_truth(live):
    """Honest estimates: every parameter the probes pin down is within 10% of the truth,
    latency within 1 ms, and the truth lies in the estimates' joint confidence region.

    "Pinned down" here: a 95% interval within +-6.5% of the estimate, so that 10% is three
    standard errors; a parameter whose interval is just inside +-10% misses 10% in 5% of
    runs by the interval's own definition (seen: wrist_3 armature 10.7% off, interval
    +-9.9%), which would make this test fail at random. Two 4 s probes at the executor's
    100 Hz do not pin all 20 parameters; the rest must still have intervals that hold the
    truth. The held-out probe at the noise level shows the bags' time axis is exact."""
    _, _, _, result, feedback, truth = live
    assert result.error_code == IdentifyResult.NONE, result.error_msg
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
    # Honest as a whole: the truth inside the estimates' joint 99.99% confidence region (the
    # manifest's covariance; squared Mahalanobis distance <= the chi2(20) quantile, 52.4).
    # The per-run count of covering intervals is not the claim: the damping, armature and
    # latency estimates share one weak direction (docs/arm_identification.md, "Intervals"),
    # so a 2-3 sigma draw along it takes 6-14 intervals out at once. Measured on the live
    # setting (bench arm_id, noise seeds 100-159): 6 of 60 runs had < 15/20 covered (6-14),
    # 91% of all intervals covered; the distance had mean 22.1 (chi2(20): 20), max 42.6.
    # The CI run of e5c7d1a had 12/20. Intervals half as wide put 55 of 60 runs above 52.4.
    manifest = json.loads((Path(result.parameters.artifact_dir) / 'manifest.json').read_text())
    joint = manifest['results']['covariance']
    d = np.array([est[n].value - truth[n] for n in joint['names']])
    distance = float(d @ np.linalg.solve(np.array(joint['matrix']), d))
    print(f'squared Mahalanobis distance of the truth {distance:.1f} (99.99%: 52.4)')
    assert len(d) == 20 and distance <= 52.4, [(n, p.value, p.lower_95, p.upper_95, truth[n])
                                               for n, p in est.items()]
    noise = truth['global/joint_state_noise_std']
    assert result.heldout_error_after <= 0.3 * result.heldout_error_before
    assert result.heldout_error_after < 1.5 * noise
    assert result.residual_after < 1.5 * noise < result.residual_before
    stages = [f.stage for f in feedback]
    assert any(s.startswith('excite') for s in stages) and 'fit' in stages


def test_artifacts_topic_and_twin_get_the_parameters(live):
    from helpers.graph import TopicListener

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
    assert offline.error_code == IdentifyResult.NONE, offline.error_msg
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
    assert res.error_code == IdentifyResult.MISSING_TOPICS and 'joint_states' in res.error_msg
    res = cmd.identify(bag_paths=[str(tmp_path / 'no_such_bag')], timeout=60)
    assert res.error_code == IdentifyResult.MISSING_TOPICS and 'no_such_bag' in res.error_msg
    res = cmd.identify(parameter_names=['joint/elbow_joint/stiction'], timeout=60)
    assert res.error_code == IdentifyResult.UNKNOWN_PARAMETER and 'stiction' in res.error_msg
    # An object's parameter with no scene yet: the error says the scene is what is missing.
    res = cmd.identify(parameter_names=['geom/box_0/friction'], timeout=60)
    assert res.error_code == IdentifyResult.UNKNOWN_PARAMETER
    assert 'geom/box_0/friction' in res.error_msg and 'no scene' in res.error_msg


def test_error_codes_map_from_the_core_exceptions():
    from real2sim2real_ros.core.parameters import InvalidBoundsError, UnknownParameterError
    from real2sim2real_ros.core.sysid.bags import MissingTopicsError
    from real2sim2real_ros.core.sysid.fit import NotConvergedError
    from real2sim2real_ros.core.twin import UnstableTwinError
    from real2sim2real_ros.nodes.system_identification.node import error_code_for
    assert [error_code_for(e('x')) for e in (
        MissingTopicsError, UnknownParameterError, InvalidBoundsError, NotConvergedError,
        UnstableTwinError)] == [
            IdentifyResult.MISSING_TOPICS, IdentifyResult.UNKNOWN_PARAMETER,
            IdentifyResult.INVALID_BOUNDS, IdentifyResult.NOT_CONVERGED,
            IdentifyResult.UNSTABLE_TWIN]
