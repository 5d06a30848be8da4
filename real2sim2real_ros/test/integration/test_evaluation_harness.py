"""The evaluation harness (r2s2r evaluate): cells drawn from the prior, the summary's figures,
bad input, and one whole cell end to end with tiny budgets (the reported figures come from
full runs: README results)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.harness_budgets import TINY

from real2sim2real_ros.core.cell_spec import load_cell_spec
from real2sim2real_ros.core.evaluation.cells import PRIOR, draw_cell_data, draw_cells
from real2sim2real_ros.core.evaluation.harness import (
    POLICIES,
    SCHEMA,
    HarnessConfig,
    _twin_name,
    heldout_criterion,
    heldout_folds_verdict,
    run,
    summarize,
    tracker_resolution,
)


def test_drawn_cells_cover_the_prior_and_are_reproducible(tmp_path):
    rng = np.random.default_rng(3)
    draws = [draw_cell_data(rng, i) for i in range(200)]
    mu = np.array([d['objects'][0]['friction'][0] for d in draws])
    mass = np.array([d['objects'][0]['mass'] for d in draws])
    lat = np.array([d['robot']['command_latency'] for d in draws])
    assert PRIOR['friction'][0] <= mu.min() < 0.25 and 0.95 < mu.max() <= PRIOR['friction'][1]
    assert 0.05 <= mass.min() < 0.07 and 0.8 < mass.max() <= 1.0
    assert np.median(mass) == pytest.approx(np.sqrt(0.05 * 1.0), rel=0.25)   # log-uniform
    assert lat.min() == 0.0 and lat.max() == 0.040 and np.allclose(lat * 1000 % 1, 0)
    a = draw_cells(3, seed=5, out_dir=tmp_path)
    b = draw_cells(3, seed=5)
    assert [s.name for s in a] == ['drawn_0', 'drawn_1', 'drawn_2']
    assert [s.object('box_0').friction for s in a] == [s.object('box_0').friction for s in b]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f'drawn_{i}.yaml' for i in range(3)]


def test_truth_names_map_onto_the_twin_names():
    m = {'box_0': 'box_7'}
    assert _twin_name('geom/box_0/friction', m) == 'geom/box_7/friction'
    assert _twin_name('body/box_0/mass', m) == 'body/box_7/mass'
    assert _twin_name('joint/elbow_joint/damping', m) == 'joint/elbow_joint/damping'
    assert _twin_name('global/command_latency', m) == 'global/command_latency'


def _cell(name, twin, cell, rows=(), heldout=None):
    held = {} if heldout is None else dict(zip(
        ('object_heldout_error_before', 'object_heldout_error_after',
         'object_heldout_error_true_parameters'), heldout))
    return {'name': name, 'policies': {
        p: {'cell': {'success_rate': c}, 'twin_identified': {'success_rate': t},
            'twin_own': {'success_rate': 1.0}} for p, t, c in zip(POLICIES, twin, cell)},
        'identification': {'parameters': list(rows), **held}}


def test_summary_gain_correlation_and_parameter_scores():
    row = {'truth': 0.5, 'identified': True}
    cells = [_cell('a', [0.2, 0.9, 0.95], [0.1, 0.85, 0.9],
                   [{**row, 'relative_error': 0.05, 'covered': True, 'pinned': True,
                     'prior': 0.52},
                    {**row, 'relative_error': 0.2, 'covered': False, 'pinned': False,
                     'prior': 0.7}],
                   heldout=(0.040, 0.008, 0.006)),
             _cell('b', [0.5, 1.0, 1.0], [0.4, 0.95, 1.0],
                   [{**row, 'relative_error': 0.01, 'covered': True, 'pinned': True,
                     'prior': 0.3},
                    {'truth': 1.0, 'identified': False, 'relative_error': 0.5,
                     'covered': True, 'pinned': False, 'prior': 1.05},
                    # Centre of mass offsets: judged in metres, apart from the relative scores.
                    {'truth': 0.004, 'identified': True, 'offset': True, 'abs_error': 0.0012,
                     'covered': True, 'pinned': False},
                    {'truth': -0.002, 'identified': False, 'offset': True, 'abs_error': 0.002,
                     'covered': False, 'pinned': False}],
                   heldout=(0.010, 0.006, 0.005)),
             {'name': 'c', 'error': 'RuntimeError: boom'}]
    s = summarize(cells)
    assert s['cells'] == 3 and s['cells_failed'] == 1
    assert s['cell_success_nominal'] == pytest.approx(0.25)
    assert s['gain_points_identified_dr_vs_nominal'] == pytest.approx(70.0)
    twin = [0.2, 0.9, 0.95, 0.5, 1.0, 1.0]
    cell = [0.1, 0.85, 0.9, 0.4, 0.95, 1.0]
    assert s['pearson_r_identified_twin_vs_cell'] == pytest.approx(np.corrcoef(twin, cell)[0, 1])
    assert s['pearson_r_training_twin_vs_cell'] is None      # no variance: undefined, not 1
    assert s['identified_parameters'] == 3
    assert s['identified_within_10pct'] == pytest.approx(2 / 3)
    assert s['interval_coverage'] == pytest.approx(3 / 4)
    assert s['within_10pct_all'] == pytest.approx(2 / 4)
    assert s['pinned_parameters'] == 2 and s['pinned_within_10pct'] == pytest.approx(1.0)
    assert s['com_offsets_identified'] == '1/2' and s['com_offset_abs_error_mm'] == [1.2]
    assert s['com_offset_coverage'] == pytest.approx(0.5)
    # Held-out strike: per cell, pooled (RMS over cells), and what the true values give.
    assert s['object_heldout_ratio'] == pytest.approx([0.2, 0.6])
    assert s['object_heldout_pooled_ratio'] == pytest.approx(
        np.sqrt((0.008 ** 2 + 0.006 ** 2) / (0.040 ** 2 + 0.010 ** 2)))
    assert s['object_heldout_ratio_true_parameters'] == pytest.approx([0.15, 0.5])
    # The held-out criterion: a by its ratio (0.2 <= 0.3), b by the floor (0.006 <= 2 x 0.005).
    crit = {r['cell']: r for r in s['object_heldout_criterion']}
    assert (crit['a']['by'], crit['b']['by']) == ('ratio', 'floor')
    assert s['object_heldout_criterion_passed'] == 2 and s['object_heldout_criterion_cells'] == 2
    assert s['object_heldout_criterion_passed_true_floor'] == 2
    # The same "within 10%" shares at the prior: identified rows 0.52/0.7/0.3 vs 0.5 -> 1 of 3;
    # all rows (+ 1.05 vs 1.0) -> 2 of 4; pinned (0.52, 0.3) -> 1 of 2.
    assert s['identified_within_10pct_at_prior'] == pytest.approx(1 / 3)
    assert s['within_10pct_all_at_prior'] == pytest.approx(2 / 4)
    assert s['pinned_within_10pct_at_prior'] == pytest.approx(1 / 2)
    # Twin prediction error per policy-cell pair (points) and its mean; r over the nominal
    # policy's pairs only (n = 2: undefined), all pairs n = 6.
    errs = [p['error_points'] for p in s['twin_prediction_error_points']]
    assert errs == pytest.approx(100 * np.abs(np.subtract(twin, cell)))
    assert s['twin_prediction_error_mean_points'] == pytest.approx(100 * np.mean(
        np.abs(np.subtract(twin, cell))))
    assert s['twin_prediction_error_mean_points_nominal'] == pytest.approx(10.0)
    assert s['pearson_n_nominal_pairs'] == 2 and s['pearson_r_nominal_pairs'] is None
    assert s['pearson_n_all_pairs'] == 6
    assert s['observation_sources'] == {'a': 'truth', 'b': 'truth'}


def test_deployment_heldout_flags_a_twin_worse_than_the_prior_beyond_its_deployments():
    """Paired over ten held-out deployments: a twin missing each by 10 mm more than the prior
    is significantly worse (one-sided Wilcoxon p = 1/1024); one missing half by 2 mm more
    and half by 2 mm less is not, nor is one equal to it (p 1). Rounds recorded before the
    per-deployment misses keep the RMS figures and get no test."""
    from real2sim2real_ros.core.evaluation.harness import HELDOUT_ALPHA, _deployment_heldout
    base = np.linspace(0.01, 0.05, 10)
    mixed = base + np.where(np.arange(10) % 2 == 0, 0.002, -0.002)

    def rnd(identified, refitted):
        miss = {'nominal': base, 'identified': identified, 'refitted': refitted}
        return {'heldout_rms_m': {'deployments': 10, **{
            k: float(np.sqrt(np.mean(np.square(v)))) for k, v in miss.items()}},
            'heldout_miss_m': {k: [float(x) for x in v] for k, v in miss.items()}}
    out = _deployment_heldout([rnd(base, base + 0.01), rnd(mixed, base)])
    p = out['p_refitted_worse_than_nominal']
    assert p[0] == pytest.approx(1 / 1024) and p[1] == 1.0
    assert out['p_identified_worse_than_nominal'][0] == 1.0
    assert out['p_identified_worse_than_nominal'][1] > 0.3
    assert out['refitted_significantly_worse'] == 1 and out['identified_significantly_worse'] == 0
    assert out['refitted_below_nominal'] == 0 and HELDOUT_ALPHA == 0.05
    old = rnd(base, base + 0.01)
    del old['heldout_miss_m']
    assert 'p_refitted_worse_than_nominal' not in _deployment_heldout([old])


def test_refined_summary_picks_the_best_predicted_policy_and_scores_each_round():
    """The loop's choice is the policy the refitted twin with residuals predicts best (a tie
    goes to refined_dr), scored by its cell success; each round's figure is the last
    refined_dr trained by then (a failed round keeps the one before)."""
    from real2sim2real_ros.core.evaluation.harness import _refined_summary

    def pol(cell, predicted):
        return {'cell': {'success_rate': cell}, 'twin_refined': {
            'success_rate': 1.0, 'with_residuals': predicted},
            'twin_identified': {'success_rate': 1.0, 'with_residuals': predicted}}

    def cell(name, cells, predicted, rounds):
        return {'name': name, 'policies': {n: pol(c, p) for n, c, p in zip(
            (*POLICIES, 'refined_dr'), cells, predicted)},
            'refit': {'rms_before_m': 0.05, 'rms_after_m': 0.02, 'rounds': [
                {'refined_dr': {'cell': None if r is None else {'success_rate': r}}}
                for r in rounds]}}
    ok = [cell('a', [0.1, 0.7, 0.4, 0.2], [0.3, 0.8, 0.6, 0.5], [0.5, 0.2]),
          cell('b', [0.0, 0.3, 0.3, 0.9], [0.1, 0.4, 0.7, 0.7], [0.9, None])]
    ok[0]['refit']['rounds'][1]['heldout_rms_m'] = {'deployments': 9, 'nominal': 0.04,
                                                    'identified': 0.03, 'refitted': 0.01}
    ok[1]['refit']['rounds'][1]['heldout_rms_m'] = {'deployments': 1, 'nominal': 0.01,
                                                    'identified': 0.02, 'refitted': 0.02}
    out = _refined_summary(ok)
    held = out['deployment_heldout']      # pooled over 10 deployments, weighted by count
    assert held['pooled_rms_m']['refitted'] == pytest.approx(np.sqrt((9e-4 + 4e-4) / 10))
    assert held['refitted_below_nominal'] == 1 and held['identified_below_nominal'] == 1
    assert held['ratio_refitted_vs_nominal'] == pytest.approx(
        np.sqrt(1.3e-4) / np.sqrt((9 * 16e-4 + 1e-4) / 10))
    assert out['loop_choice']['a'] == {'policy': 'identified', 'predicted': 0.8,
                                       'cell_success': 0.7}
    assert out['loop_choice']['b']['policy'] == 'refined_dr'      # the tie
    assert out['cell_success_loop_choice'] == pytest.approx(0.8)
    assert out['cell_success_refined_dr_by_round'] == pytest.approx([0.7, 0.55])
    # |0.3-0.1| .. : the residual predictions' errors, per policy over both cells
    assert out['twin_prediction_error_points_refined_twin_residuals_by_policy'] == \
        pytest.approx({'nominal': 15.0, 'identified': 10.0, 'identified_dr': 30.0,
                       'refined_dr': 25.0})


def test_heldout_criterion_numbers():
    # after <= 0.3 x before passes by the ratio, whatever the floor.
    assert heldout_criterion(0.040, 0.012, None)['by'] == 'ratio'
    # 0.6 x before, but within 2 x the true-value floor (0.006 <= 0.008): passes by the floor.
    r = heldout_criterion(0.010, 0.006, 0.004)
    assert r['pass'] and r['by'] == 'floor' and r['ratio'] == pytest.approx(0.6)
    assert r['floor_ratio'] == pytest.approx(1.5)
    # Neither: 0.9 x before and 2.25 x the floor; a missing / NaN floor cannot rescue it.
    for floor in (0.004, None, float('nan')):
        assert not heldout_criterion(0.010, 0.009, floor)['pass']
    assert heldout_criterion(0.010, 0.0031, None)['pass'] is False
    # wide_3's cylinder (stop 37): 0.47 x before and 2.5 x the floor of every true value, but
    # its centre of mass offset needs the yaw no view shows; with the offsets at the prior the
    # true values give 22.8 mm, and 21.3 mm is within 2 x that: passes by the observable
    # floor, and says it fails against every true value.
    r = heldout_criterion(0.0457, 0.0213, 0.0084, 0.0228)
    assert r['pass'] and r['by'] == 'observable_floor' and not r['pass_true_floor']
    # An observable floor never rescues a cell 2 x above it, nor replaces a pass by the
    # floor (the verdict against every true value comes first); NaN / missing: no effect.
    assert not heldout_criterion(0.0457, 0.0213, 0.0084, 0.0100)['pass']
    r = heldout_criterion(0.010, 0.006, 0.004, 0.010)
    assert r['by'] == 'floor' and r['pass_true_floor']
    for obs in (None, float('nan'), 0.0):
        r = heldout_criterion(0.0457, 0.0213, 0.0084, obs)
        assert not r['pass'] and r['by'] is None
    # wide_5 (stop 37): the prior right already (friction 0.5 for 0.502), 1.5 -> 2.4 mm on a
    # 0.8 mm floor fails as written; within a 2.5 mm tracker resolution it passes by that.
    r = heldout_criterion(0.0015, 0.0024, 0.0008, 0.0008, 0.0025)
    assert r['pass'] and r['by'] == 'resolution' and not r['pass_true_floor']
    assert not heldout_criterion(0.0015, 0.0024, 0.0008, 0.0008, 0.0020)['pass']
    assert not heldout_criterion(0.0015, 0.0024, 0.0008, 0.0008, None)['pass']


def test_heldout_folds_verdict_is_the_criterion_on_rms_over_the_strikes():
    folds = [{'strike': 0, 'before': 0.030, 'after': 0.004, 'floor': 0.003,
              'observable_floor': 0.003},
             {'strike': 1, 'before': 0.010, 'after': 0.008, 'floor': 0.002,
              'observable_floor': 0.002},
             {'strike': 2, 'before': 0.0015, 'after': 0.0024, 'floor': 0.0008,
              'observable_floor': None}]
    r = heldout_folds_verdict(folds)
    rms = lambda *v: np.sqrt(np.mean(np.square(v)))  # noqa: E731
    assert r['strikes'] == 3
    assert r['before'] == pytest.approx(rms(0.030, 0.010, 0.0015))
    assert r['after'] == pytest.approx(rms(0.004, 0.008, 0.0024))
    assert r['floor'] == pytest.approx(rms(0.003, 0.002, 0.0008))
    assert r['observable_floor'] == pytest.approx(rms(0.003, 0.002))   # the None left out
    # 5.4 mm after against 18.3 mm before: 0.29 x, passes by the ratio; the last strike
    # alone (1.5 -> 2.4 mm) fails.
    assert r['pass'] and r['by'] == 'ratio'
    assert not heldout_criterion(0.0015, 0.0024, 0.0008)['pass']
    # A strike without a before or after is not scored; none at all: no verdict.
    assert heldout_folds_verdict(folds + [{'strike': 3, 'before': None,
                                           'after': 0.1}])['strikes'] == 3
    assert heldout_folds_verdict([{'strike': 0, 'before': float('nan'), 'after': 0.1}]) is None


def test_tracker_resolution_is_the_95th_percentile_of_the_strikes_errors():
    # 20 strikes over two cells (a cell's two seeds repeat one identification: once).
    a = {'stage_folder': 'a', 'tracker_displacement_error': list(np.arange(1, 11) * 1e-4)}
    b = {'stage_folder': 'b', 'tracker_displacement_error': list(np.arange(11, 20) * 1e-4)
         + [float('nan'), 5e-3]}
    res, n = tracker_resolution([a, {**a, 'stage_folder': 'a2'}, b, {'stage_folder': 'c'}])
    assert n == 20
    assert res == pytest.approx(np.quantile(np.r_[np.arange(1, 20) * 1e-4, 5e-3], 0.95))
    assert tracker_resolution([{'stage_folder': 'c'}]) == (None, 0)


def test_cli_bad_input_exits_2_with_one_line(tmp_path):
    def cli(*args):
        return subprocess.run([sys.executable, '-m', 'real2sim2real_ros.cli.evaluate_cli', *args],
                              capture_output=True, text=True, timeout=120)
    bad = cli('--task', 'juggle', '--draw-cells', '1', '--json', str(tmp_path / 'x.json'))
    assert bad.returncode == 2 and "unknown task 'juggle'" in bad.stderr
    none = cli('--json', str(tmp_path / 'x.json'))
    assert none.returncode == 2 and '--cell-spec' in none.stderr
    bad_options = cli('--draw-cells', '1', '--refine-trials', '2', '--refit-options',
                      '{"no_such": 1}', '--json', str(tmp_path / 'x.json'))
    assert bad_options.returncode == 2 and bad_options.stderr.count('\n') == 1
    assert '--refit-options' in bad_options.stderr and 'no_such' in bad_options.stderr
    for refine, says in ((['--refine-trials', '-1'], 'tracker'),
                         (['--refine-trials', '3', '--observation', 'truth'], 'tracker'),
                         (['--refine-trials', '3', '--refine-rounds', '0'], 'rounds 0')):
        bad_refine = cli('--draw-cells', '1', *refine, '--json', str(tmp_path / 'x.json'))
        assert bad_refine.returncode == 2 and bad_refine.stderr.count('\n') == 1, refine
        assert '--refine-trials' in bad_refine.stderr and says in bad_refine.stderr
    spec = tmp_path / 'broken.yaml'
    spec.write_text('name: broken\nobjects: 3\n')
    broken = cli('--cell-spec', str(spec), '--json', str(tmp_path / 'x.json'))
    assert broken.returncode == 2 and broken.stderr.count('\n') == 1
    conf = tmp_path / 'identification.yaml'
    conf.write_text("objects: {parameters: [{name: 'geom/x/friction', prior: 0.5}]}\n")
    bad_conf = cli('--draw-cells', '1', '--identification-config', str(conf),
                   '--json', str(tmp_path / 'x.json'))
    assert bad_conf.returncode == 2 and bad_conf.stderr.count('\n') == 1
    assert "--identification-config" in bad_conf.stderr and '{id}' in bad_conf.stderr
    assert not (tmp_path / 'x.json').exists()


# A whole cell (reconstruct, 5 probe executions, identify, 3 policies): 120-200 s on 2 cores.
@pytest.mark.timeout(600)
def test_one_cell_end_to_end_scores_every_stage(tmp_path):
    """Tiny budgets: this checks the plumbing and the scores' consistency, not the figures."""
    spec = draw_cells(1, seed=11)[0]
    cfg = HarnessConfig(trials=3, train=TINY, arm_probe_duration=3.0, refine_trials=2,
                        refine_rounds=2)
    report = run([spec], cfg, tmp_path / 'out', jobs=1, json_path=tmp_path / 'r.json')
    saved = json.loads((tmp_path / 'r.json').read_text())
    assert saved['schema'] == SCHEMA and saved['summary']['cells_failed'] == 0, \
        saved['cells'][0].get('traceback')
    c = report['cells'][0]
    truth_mu = spec.object('box_0').friction[0]
    assert c['hidden']['object_friction'] == truth_mu
    # Reconstruction found both objects, the box within 5 mm.
    rec = {o['id']: o for o in c['reconstruction']['objects']}
    assert set(rec) == {'box_0', 'cylinder_0'} and rec['box_0']['position_error_m'] < 0.005
    # Identification: 5 probe executions; the object's friction is scored against the truth.
    ident = c['identification']
    assert ident['probes'] == 5 and ident['strikes'] == 3
    # One planned strike of the box per strike probe; the fitted ones with their free slides.
    plan = ident['strike_plan']
    assert [p['probe'] for p in plan] == ['strike_0', 'strike_1', 'strike_2']
    assert all(0.1 < p['speed'] < 2.0 and p['push_length'] > 0 for p in plan)
    fitted = ident['object_fit_slides']
    assert len(fitted['speeds_m_s']) == len(fitted['slides_m']) == 3
    assert sorted(fitted['speeds_m_s']) == pytest.approx(sorted(p['speed'] for p in plan),
                                                         abs=1e-4)
    fr = next(r for r in ident['parameters'] if r['name'].endswith('box_0/friction'))
    assert fr['truth'] == truth_mu
    assert fr['relative_error'] == pytest.approx(abs(fr['estimate'] - truth_mu) / truth_mu)
    assert fr['covered'] == (fr['lower_95'] <= truth_mu <= fr['upper_95'])
    # The box's lateral centre of mass offset, truth turned into the reconstructed frame.
    com = [r for r in ident['parameters'] if '/com_offset_' in r['name']]
    assert len(com) == 2 and all(r['offset'] and 'relative_error' not in r for r in com)
    cx, cy = spec.object('box_0').com_offset[:2]
    assert np.hypot(com[0]['truth'], com[1]['truth']) == pytest.approx(np.hypot(cx, cy))
    assert all(r['abs_error'] == pytest.approx(abs(r['estimate'] - r['truth'])) for r in com)
    assert ident['arm_residual_after'] < ident['arm_residual_before']
    # The held-out strike's floor: the twin with the box's true values, on the same strike.
    assert 0 < ident['object_heldout_error_true_parameters'] < 0.05
    # Every strike held out in turn (scoring): the last is the stage's own validation.
    folds = ident['object_heldout_folds']
    assert [f['strike'] for f in folds] == [0, 1, 2]
    assert folds[-1]['before'] == ident['object_heldout_error_before']
    assert folds[-1]['after'] == ident['object_heldout_error_after']
    assert all(0 < f['before'] < 0.3 and 0 < f['after'] < 0.3 and 0 < f['floor'] < 0.05
               for f in folds)
    assert len({round(f['before'], 9) for f in folds}) == 3     # three different strikes
    # Scoring, timed apart from the identification's own wall time.
    assert c['stage_seconds']['identify_heldout_folds'] == ident['object_heldout_folds_s'] > 0
    assert c['stage_seconds']['identify'] >= ident['wall_s'] > 0
    row = next(r for r in saved['summary']['per_cell'] if r['cell'] == spec.name)
    assert row['heldout_folds']['strikes'] == 3
    assert saved['summary']['object_heldout_folds_criterion_passed'] in (0, 1)
    assert saved['summary']['object_heldout_ratio_true_parameters'] == pytest.approx(
        [ident['object_heldout_error_true_parameters'] / ident['object_heldout_error_before']])
    # Three policies, each scored on the cell and in twins over the same trials.
    for name in POLICIES:
        p = c['policies'][name]
        for where in ('cell', 'twin_own', 'twin_identified'):
            assert p[where]['trials'] == 3
            assert p[where]['success_rate'] == p[where]['successes'] / 3
        # The training stage's folder (core/policies/stage.py, the policy_trainer node's).
        ckpt = tmp_path / 'out' / spec.name / 'checkpoints' / name
        assert p['checkpoint'] == str(next(ckpt.glob('train_*/checkpoint')))
        assert (Path(p['checkpoint']) / 'policy.json').is_file()
    assert c['policies']['identified']['twin_own'] == {     # its own twin, the identified
        k: v for k, v in c['policies']['identified']['twin_identified'].items()
        if k != 'with_residuals'}                        # (that: the refit's, below)
    assert set(c['stage_seconds']) >= {'reconstruct', 'identify', 'train_nominal'}
    # The policies on the cell saw the tracker (start frames only: a one-shot task), and no
    # stage read the cell's truth outside scoring / emulation (the door is strict: a leak
    # would have failed the cell); no declared reader (the servo gains: the controller file).
    obs = c['observation']
    assert obs['source'] == 'tracker' and saved['summary']['observation_sources'] == {
        spec.name: 'tracker'}
    # 3 start frames per episode: 3 policies x 3 trials, each round's refined_dr's 3 trials,
    # and each round's 2 deployments' starts and rests.
    assert obs['frames'] == 3 * 3 * (len(POLICIES) + 2) + 2 * 2 * 2 * 3
    assert obs['rate_hz'] == 5.0
    # Scoring read the object poses once per episode (15 evaluated, 4 deployed: a task's
    # episode scores itself; the deployment keeps no score) and twice per strike (3) for the
    # tracker's displacement error.
    reads = c['truth_reads']
    assert reads['leaks'] == [] and \
        reads['allowed']['scoring']['object_poses'] == 15 + 4 + 2 * 3
    # The deployment refit: identified_dr's 2 deployments as the tracker saw them, the twin
    # refitted (its RMS over them no worse than before), refined_dr scored everywhere, and
    # every policy scored in the refitted twin on the same 3 episodes.
    refit = c['refit']
    assert refit['trials'] == 2 and 2 <= len(refit['deployments']) <= 4
    assert refit['rms_after_m'] <= refit['rms_before_m']
    # Two rounds: identified_dr deployed, then round 1's refined_dr; round 2 refits on both.
    rounds = refit['rounds']
    assert [r['policy'] for r in rounds] == ['identified_dr', 'refined_dr']
    assert [r['seed'] for r in rounds] == [7000, 7001]
    assert rounds[0]['deployments_so_far'] < rounds[1]['deployments_so_far'] == \
        len(refit['deployments'])
    assert rounds[1]['values'] == refit['values']
    assert rounds[0]['refined_dr']['checkpoint'] != rounds[1]['refined_dr']['checkpoint']
    assert c['policies']['refined_dr']['rounds'][-1]['cell'] == \
        c['policies']['refined_dr']['cell']
    # Round 2's deployments, held out from the twins before it, scored in each.
    held = rounds[1]['heldout_rms_m']
    assert 'heldout_rms_m' not in rounds[0] and held['deployments'] >= 1
    assert all(0.0 <= held[k] <= 0.1 for k in ('nominal', 'identified', 'refitted'))
    miss = rounds[1]['heldout_miss_m']      # per deployment, the RMS's terms
    for k in ('nominal', 'identified', 'refitted'):
        assert len(miss[k]) == held['deployments']
        assert held[k] == pytest.approx(np.sqrt(np.mean(np.square(miss[k]))))
    assert set(refit['values']) == {f'geom/{fr["name"].split("/")[1]}/friction',
                                    *(f'body/{fr["name"].split("/")[1]}/{k}_damping'
                                      for k in ('linear', 'angular'))}
    assert all(len(d['start_xy']) == 2 and len(d['action']) == 2
               for d in refit['deployments'])
    assert c['policies']['refined_dr']['cell']['trials'] == 3
    assert all(c['policies'][n]['twin_refined']['trials'] == 3
               for n in (*POLICIES, 'refined_dr'))
    assert c['policies']['refined_dr']['twin_own'] == c['policies']['refined_dr']['twin_refined']
    # Each twin's prediction with the deployments' residuals as its model error: a share.
    for twin in ('identified', 'refined'):
        res = refit['residuals'][twin]
        assert res['deployments'] == len(refit['deployments'])
        assert res['upright_both'] + res['lost_on_cell'] + res['down_in_twin'] == \
            res['deployments']
        assert all(0.0 <= c['policies'][n][f'twin_{twin}']['with_residuals'] <= 1.0
                   for n in (*POLICIES, 'refined_dr'))
    summary = saved['summary']
    assert set(summary['twin_prediction_error_points_refined_twin_residuals_by_policy']) == \
        {*POLICIES, 'refined_dr'}
    assert summary['cell_success_refined_dr_by_round'] == [
        r['refined_dr']['cell']['success_rate'] for r in rounds]
    assert summary['deployment_heldout']['pooled_rms_m']['refitted'] == \
        pytest.approx(held['refitted'])
    assert len(summary['deployment_heldout']['p_refitted_worse_than_nominal']) == 1
    assert summary['loop_choice'][spec.name]['policy'] in (*POLICIES, 'refined_dr')
    assert summary['cell_success_refined_dr'] == \
        c['policies']['refined_dr']['cell']['success_rate']
    assert set(summary['twin_prediction_error_points_refined_twin_by_policy']) == \
        {*POLICIES, 'refined_dr'}
    assert len(ident['tracker_displacement_error']) == 3
    assert all(0 <= e < 0.01 for e in ident['tracker_displacement_error'])
    assert reads['declared'] == []
    # Identification ran the node's stage (core/sysid/stage.py): its folder and profile.
    assert (Path(ident['stage_folder']) / 'parameters.yaml').is_file()
    assert ident['controller_config'].endswith('controllers/default_arm.yaml')
    assert ident['identification_config'].endswith('config/identification.yaml')
    prof = ident['profile']['seconds']
    assert {'arm_probes', 'arm_fit', 'strike_probes', 'object_fit', 'twin_builds'} <= set(prof)
    # arm, strikes, the objects' validation (once) and final fits
    assert ident['profile']['counts']['twin_builds'] == 4
    assert ident['profile']['counts']['object_fit_validation'] == 1
    assert len(saved['summary']['object_heldout_criterion']) == 1


PUSH_TINY = {'demos': 6, 'eval_trials': 2,
             'closed_loop': {'workers': 1, 'hidden': [32, 32],
                             'dagger': {'rounds': 1, 'episodes': 2, 'initial_updates': 50,
                                        'updates': 20},
                             'ppo': {'iterations': 0}}}


def test_push_to_pose_through_the_harness_writes_the_documented_fields(tmp_path, monkeypatch):
    """push_to_pose (closed loop) through the harness with tiny budgets and the identification
    stage stubbed (the probes take a minute; test_one_cell_end_to_end_scores_every_stage runs
    them): the closed-loop training path, the cell and twin evaluations over the same
    episodes, and the JSON fields the README documents."""
    from real2sim2real_ros.core.evaluation import identification
    from real2sim2real_ros.core.parameters import ParameterEstimate, ParameterSet
    from real2sim2real_ros.core.sysid.config import load_identification_config

    def stub_identify(world, robot, cfg, found, table_height, out_dir, *_a, **_k):
        conf = load_identification_config(identification.identification_config_path())
        ps = ParameterSet()
        for name, v in ((f'geom/{found.id}/friction', 0.6),
                        (f'body/{found.id}/mass', 0.3)):
            ps.add(ParameterEstimate(name, v, 0.9 * v, 1.1 * v, v, '', True))
        return {'parameters': ps, 'start_values': conf.start_values(), 'probes': 0}
    monkeypatch.setattr(identification, 'identify_cell', stub_identify)
    spec = draw_cells(1, seed=2)[0]
    cfg = HarnessConfig(task='push_to_pose', trials=2, train=PUSH_TINY)
    run([spec], cfg, tmp_path / 'out', jobs=1, json_path=tmp_path / 'r.json')
    saved = json.loads((tmp_path / 'r.json').read_text())
    assert saved['schema'] == SCHEMA and saved['task'] == 'push_to_pose'
    assert saved['summary']['cells_failed'] == 0, saved['cells'][0].get('traceback')
    assert set(saved) >= {'schema', 'task', 'trials', 'robot_urdf', 'config', 'cells',
                          'summary', 'wall_s', 'cpus'}
    c = saved['cells'][0]
    assert set(c) >= {'name', 'hidden', 'reconstruction', 'identification', 'policies',
                      'stage_seconds'}
    fr = next(r for r in c['identification']['parameters'] if r['name'].endswith('/friction'))
    assert fr['truth'] == spec.object('box_0').friction[0] and 'covered' in fr
    for name in POLICIES:
        p = c['policies'][name]
        assert set(p) >= {'cell', 'twin_own', 'twin_identified', 'checkpoint', 'train_s',
                          'evaluate_s'}
        for where in ('cell', 'twin_own', 'twin_identified'):
            assert p[where]['trials'] == 2
            assert p[where]['success_rate'] == p[where]['successes'] / 2
            assert p[where]['mean_error_m'] >= 0
        meta = json.loads((Path(p['checkpoint']) / 'policy.json').read_text())
        assert meta['task']['task'] == 'push_to_pose'
    assert set(c['stage_seconds']) == {'reconstruct', 'identify', 'identify_heldout_folds', 'goals',
                                       *(f'{s}_{n}' for n in POLICIES
                                         for s in ('train', 'evaluate'))}
    # Closed loop: the tracker streamed frames during every push (5 Hz of cell time).
    obs = c['observation']
    assert obs['source'] == 'tracker' and obs['stream'] is True
    assert obs['frames_per_trial'] > 5 and c['truth_reads']['leaks'] == []
    s = saved['summary']
    assert set(s) >= {f'cell_success_{n}' for n in POLICIES} | {
        'gain_points_identified_dr_vs_nominal', 'pearson_r_identified_twin_vs_cell'}


def test_wide_prior_cells_build_settle_and_span_the_prior():
    """Cells drawn from the wide prior: each builds, every object rests where the spec puts it
    (no overlap, none off the table), and the draws span the stated ranges."""
    from real2sim2real_ros.core.emulated_world import EmulatedWorld
    from real2sim2real_ros.core.evaluation.cells import WIDE_PRIOR, draw_wide_cell_data
    rng = np.random.default_rng(4)
    draws = [draw_wide_cell_data(rng, i) for i in range(24)]
    heights = [d['table']['height'] for d in draws]
    assert WIDE_PRIOR['table_height'][0] <= min(heights) < -0.2
    assert 0.1 < max(heights) <= WIDE_PRIOR['table_height'][1]
    task = [d['objects'][0] for d in draws]
    assert {o['shape'] for o in task} == {'box', 'cylinder'}
    assert {len(d['objects']) - 1 for d in draws} == {0, 1, 2, 3}
    sizes = [v for o in task if o['shape'] == 'box' for v in o['size'][:2]]
    assert 0.04 <= min(sizes) < 0.06 and 0.13 < max(sizes) <= 0.15
    every = [o for d in draws for o in d['objects']]     # clutter: the same prior
    mass = [o['mass'] for o in every]
    assert 0.03 <= min(mass) < 0.06 and 0.8 < max(mass) <= 1.5
    mu = [o['friction'][0] for o in every]
    assert 0.15 <= min(mu) < 0.25 and 0.9 < max(mu) <= 1.0
    for d in draws[:8]:
        spec = load_cell_spec(d)
        world = EmulatedWorld(spec)
        try:
            world.step_for(0.5)
            with world.truth.scoring():
                poses = world.object_poses()
            for o in spec.objects:
                xyz, quat = poses[o.id]
                assert np.linalg.norm(xyz[:2] - np.asarray(o.xyz[:2])) < 0.005, (spec.name, o.id)
                assert abs(xyz[2] - o.xyz[2]) < 0.005 and abs(quat[0]) ** 2 + quat[3] ** 2 > 0.99
        finally:
            world.close()


def test_a_stage_reading_the_cells_truth_fails_the_cell(tmp_path, monkeypatch):
    """The harness's truth door is strict: a (deliberately leaking, test-only) identification
    stage that reads the cell spec's servo gains -- what the old ``known_gains`` did -- fails
    the cell with TruthLeak naming it, before any policy is trained. The real stages pass the
    same door (test_one_cell_end_to_end_scores_every_stage: no leak, no declared reader)."""
    from real2sim2real_ros.core.evaluation import identification

    def leaking_identify(world, robot, cfg, found, *_a, **_k):
        gains = list(world.spec.robot.kp)          # the emulated cell's truth
        raise AssertionError(f'the door let a stage read the servo gains {gains}')
    monkeypatch.setattr(identification, 'identify_cell', leaking_identify)
    spec = draw_cells(1, seed=2)[0]
    report = run([spec], HarnessConfig(trials=2, train=TINY), tmp_path / 'out', jobs=1)
    c = report['cells'][0]
    assert c['error'].startswith('TruthLeak: ') and 'leaking_identify' in c['error'], c
    assert 'hidden truth (spec)' in c['error']
    assert not (tmp_path / 'out' / spec.name / 'checkpoints').exists()


class _Stop(Exception):
    pass


@pytest.mark.parametrize('reseed, expected', [(True, 7), (False, None)])
def test_reseed_noise_gives_the_cell_and_its_capture_sweep_the_runs_seed(tmp_path, monkeypatch,
                                                                       reseed, expected):
    """With reseed_noise (r2s2r evaluate --reseed-noise) the harness's seed draws the cell's
    sensor noise, and the capture sweep's world shares it; without, the spec's seed alone
    (every committed result before stop 52)."""
    from real2sim2real_ros.core import world as world_module
    from real2sim2real_ros.core.evaluation.harness import evaluate_cell
    real_make_world = world_module.make_world
    seen = []

    def recording_make_world(spec, robot_urdf=None, **kwargs):
        seen.append(kwargs.get('noise_seed', 'missing'))
        w = real_make_world(spec, robot_urdf, **kwargs)
        if len(seen) == 2:          # the cell, then its capture sweep: enough
            w.close()
            raise _Stop
        return w
    monkeypatch.setattr(world_module, 'make_world', recording_make_world)
    spec = draw_cells(1, seed=2)[0]
    with pytest.raises(_Stop):
        evaluate_cell(spec, HarnessConfig(seed=7, reseed_noise=reseed, trials=1, train=TINY),
                      tmp_path / 'out')
    assert seen == [expected, expected]
