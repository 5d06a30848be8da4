"""Live object identification through the emulated bringup: the scene (the default cell's
geometry, as reconstruction gives it) is published on the latched ``scene`` topic; the
bringup's object_tracker follows the objects in the cell's depth stream; system_identification
runs 2 arm probes and 3 strike probes through the armed executor (5 in total), fits the arm,
then the objects' friction and mass, and the same bags offline reproduce the estimates.

The test is the evaluator: it reads the cell spec's hidden truth to score the estimates."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

from helpers.latched_scene import publish_scene  # noqa: E402

from real2sim2real_msgs.action import Identify  # noqa: E402

IdentifyResult = Identify.Result


@pytest.fixture(scope='module')
def live(emulated_bringup):
    from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
    graph, cmd, tmp = emulated_bringup
    spec = load_cell_spec(default_cell_spec_path())
    publisher = publish_scene(spec, tmp)
    try:
        resp = cmd.arm()
        assert resp.success, resp.message
        feedback = []
        t0 = time.monotonic()
        result = cmd.identify(num_probes=2, run_dir=str(tmp / 'live'),
                              feedback=feedback.append, timeout=500)
        live_s = time.monotonic() - t0
        yield cmd, tmp, spec, result, feedback, live_s
    finally:
        publisher.close()


def test_live_strikes_identify_the_box_friction(live):
    cmd, tmp, spec, result, feedback, live_s = live
    assert result.error_code == IdentifyResult.NONE, result.error_msg
    est = {p.name: p for p in result.parameters.parameters}
    truth = spec.hidden_truth()
    f = est['geom/box_0/friction']
    print(f'live identification {live_s:.0f} s; box friction {f.value:.3f} '
          f'[{f.lower_95:.3f}, {f.upper_95:.3f}] (truth {truth["geom/box_0/friction"]}), mass '
          f'{est["body/box_0/mass"].value:.3f} [{est["body/box_0/mass"].lower_95:.3f}, '
          f'{est["body/box_0/mass"].upper_95:.3f}] (truth {truth["body/box_0/mass"]})')
    mu = truth['geom/box_0/friction']
    assert f.lower_95 <= mu <= f.upper_95
    # Three strikes seen by the bringup's 5 Hz tracker (8-12 residuals) pin the friction to
    # +-16-25%, next to the 25% above which it is flagged not identified: the flag has gone
    # both ways between CI-like runs (0.592, half width 25.1%), so it is not asserted. The
    # 10% bound holds where the interval pins the value (half width <= 6.5%, 3 standard
    # errors), as in test_identification_integration.py; the estimate has been 0.556, 0.592
    # and 0.613 for 0.55, so a fixed 10% bound would fail at random. 25% catches a broken fit.
    # An interval spanning the whole search range [0.2, 1.0] is the stage saying the strikes
    # did not inform the friction (identified false): its value is no claim. Seen once in a
    # fresh-clone run (stop 47, idle): 0.708 [0.200, 1.000], strike probes 11.2 s, mass 0.196
    # [0.169, 0.224]; there only the coverage above and the flag hold.
    unknown = not f.identified and f.lower_95 <= 0.2 + 1e-9 and f.upper_95 >= 1.0 - 1e-9
    pinned = f.identified and (f.upper_95 - f.lower_95) / 2 <= 0.065 * f.value
    assert unknown or abs(f.value - mu) <= (0.10 if pinned else 0.25) * mu, (f.value, pinned)
    # The default cylinder (8 cm tall on a 6 cm base) could topple at the prior's friction
    # bound: only a gentle strike is safe, and it slides ~9 mm at the prior, under
    # gentle_informative_slide, so it waits: struck only in a first probe that cannot strike
    # the box (docs/identification.md, "Tall objects"). Its interval covers the truth; a
    # claimed value within 10%.
    c, mu_c = est['geom/cylinder_0/friction'], truth['geom/cylinder_0/friction']
    print(f'cylinder friction {c.value:.3f} [{c.lower_95:.3f}, {c.upper_95:.3f}] (truth '
          f'{mu_c}), identified {c.identified}')
    # What the fit saw of each object (slides, residual counts, chi2): a miss is diagnosable
    # from CI's log alone (a fresh-clone run under load once claimed 0.98 [0.74, 1.00]).
    per_object = json.loads((Path(result.parameters.artifact_dir) / 'manifest.json')
                            .read_text())['results']['objects']['per_object']
    print('per object: ' + json.dumps(per_object, sort_keys=True))
    assert c.lower_95 <= mu_c <= c.upper_95
    assert not c.identified or abs(c.value - mu_c) <= 0.10 * mu_c
    # 20 arm parameters + friction, mass and the 2 lateral centre of mass offsets of two
    # objects. The box's offsets: within 7.5 mm where identified (3 sigma of the 2.5 mm error
    # a box's strikes share; a 2 sigma bound fails 1 run in 20 of a correct fit, and a fresh-
    # clone run missed 5 mm by 0.33 mm; live runs gave 7.9 and 9.5 mm for 6.0), covered
    # either way; the cylinder's stay at the prior (its yaw is not tracked).
    assert len(est) == 28
    for a in 'xy':
        b, t = est[f'body/box_0/com_offset_{a}'], truth[f'body/box_0/com_offset_{a}']
        print(f'box com_offset_{a} {1e3 * b.value:.1f} mm [{1e3 * b.lower_95:.1f}, '
              f'{1e3 * b.upper_95:.1f}] (truth {1e3 * t:.1f}), identified {b.identified}')
        assert b.lower_95 <= t <= b.upper_95 and (not b.identified or abs(b.value - t) <= 0.0075)
        cyl = est[f'body/cylinder_0/com_offset_{a}']
        assert not cyl.identified and cyl.value == 0.0
    stages = [fb.stage for fb in feedback]
    assert any(s.startswith('strike') for s in stages) and 'fit objects' in stages
    manifest = json.loads((Path(result.parameters.artifact_dir) / 'manifest.json').read_text())
    inputs = manifest['inputs']
    # At most 5 probes: 2 arm + up to 3 strikes. The planner stops early when the box has
    # come to rest where no strike is safe (seen in CI: 0.13 m from the table edge, the
    # way back out of reach), and says so; two strikes still fit one, score the other.
    assert len(inputs['arm_bags']) == 2 and 2 <= len(inputs['strike_bags']) <= 3
    # One object a probe: the box (the cylinder only in a first probe without a safe box
    # strike; a strike the fit could not use is among 'dropped', with why).
    struck = {oid: per_object.get(oid, {}).get('strikes', 0) for oid in ('box_0', 'cylinder_0')}
    dropped = manifest['results']['objects']['dropped']
    assert struck['box_0'] >= 1, (struck, dropped)
    assert sum(struck.values()) + len(dropped) == len(inputs['strike_bags']), (struck, dropped)
    objects = manifest['results']['objects']
    assert objects['heldout_joint_after'] < objects['heldout_joint_before']
    # The stage's profile (core/sysid/stage.py): the probes' motion, the fits, twin builds
    # (one arm twin, one for the strikes, a fresh one each for the objects' validation fit,
    # beside the last strike, and their final fit: none per strike; strikes that stop
    # after two cancel the validation begun for a third, and the final fit's is made on
    # the first: one more). No fit made twice.
    prof = manifest['results']['profile']
    print('identify profile (s): ' + ', '.join(f'{k} {v:.1f}'
                                                for k, v in prof['seconds'].items()))
    assert {'arm_probes', 'strike_probes', 'arm_fit', 'object_fit', 'twin_builds',
            'report'} <= set(prof['seconds'])
    assert prof['counts']['twin_builds'] == (4 if len(inputs['strike_bags']) == 3 else 5)
    if len(inputs['strike_bags']) == 3:     # as planned (a third strike may find no room)
        # two planning fits (friction only) between the strikes, the validation beside the
        # last strike (the stage waits for it only where it outlasts that strike)
        assert prof['counts']['object_fit_validation'] == 1
        assert prof['counts']['object_fit_validation_wait'] == 1
        assert prof['counts']['object_fit_intermediate'] == 2
    assert prof['counts']['strike_probes'] == len(inputs['strike_bags'])
    assert (Path(result.parameters.artifact_dir) / 'objects.png').read_bytes()[:4] == \
        b'\x89PNG'
    # The arm, scored on the held-out strike probe's joints.
    assert result.heldout_error_after < result.heldout_error_before


def test_offline_from_the_recorded_bags_reproduces_the_live_estimates(live):
    cmd, tmp, _, result, _, _ = live
    manifest = json.loads((Path(result.parameters.artifact_dir) / 'manifest.json').read_text())
    bags = manifest['inputs']['bag_paths']
    offline = cmd.identify(bag_paths=bags, run_dir=str(tmp / 'offline'), timeout=400)
    assert offline.error_code == IdentifyResult.NONE, offline.error_msg
    live_values = {p.name: p.value for p in result.parameters.parameters}
    off = {p.name: p for p in offline.parameters.parameters}
    assert set(off) == set(live_values)
    for name, v in live_values.items():
        assert off[name].value == pytest.approx(v, rel=1e-6), name
    # The held-out validation too: made between the strikes live, from the bags offline.
    live_objects = manifest['results']['objects']
    off_objects = json.loads((Path(offline.parameters.artifact_dir) /
                              'manifest.json').read_text())['results']['objects']
    for k in ('heldout_error_before_m', 'heldout_error_after_m', 'heldout_joint_after'):
        assert off_objects[k] == pytest.approx(live_objects[k], rel=1e-6), k


def test_strike_bag_without_tracked_poses_is_missing_topics(live, robot, tmp_path):
    from real2sim2real_ros.core.bag_io import BagReader
    from real2sim2real_ros.core.sysid.bags import STRIKE_INFO_TOPIC, write_strike_bag
    cmd, _, _, result, _, _ = live
    manifest = json.loads((Path(result.parameters.artifact_dir) / 'manifest.json').read_text())
    strike = Path(manifest['inputs']['strike_bags'][0])
    with BagReader(strike) as bag:
        info = next(json.loads(bag.deserialize(raw, t).data) for _, t, _, raw in
                    bag.messages([STRIKE_INFO_TOPIC]))
    blind = write_strike_bag(strike.parent / 'trajectory', tmp_path / 'blind', [], info)
    res = cmd.identify(bag_paths=manifest['inputs']['arm_bags'] + [str(blind)], timeout=300)
    assert res.error_code == IdentifyResult.MISSING_TOPICS and 'TrackedObjects' in res.error_msg
