"""The loop coordinator's ROS-free parts: plan / resume from artifacts, goal draws, summary
and plots (core/loop_plan.py, core/loop_report.py)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from real2sim2real_ros.core import loop_plan as lp
from real2sim2real_ros.core.artifacts import RunDirectory
from real2sim2real_ros.core.loop_report import write_summary


def _stage(root: Path, folder: str, files=(), inputs=None, results=None, outputs=None,
           finish=True) -> Path:
    rec = RunDirectory(root).new_stage(folder, inputs=inputs)
    for name in files:
        p = rec.folder / name
        if name.endswith('/'):
            p.mkdir(parents=True)
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text('x')
    for key, name in (outputs or {}).items():
        rec.add_output(key, rec.folder / name)
    rec.results = dict(results or {})
    if finish:
        rec.finish()
    return rec.folder


def _full_run(root: Path, task='slide_to_target'):
    _stage(root, 'capture', ['views/'])
    _stage(root, 'reconstruct', ['scene.xml'], outputs={'scene': 'scene.xml'})
    _stage(root, 'identify', ['parameters.yaml'])
    _stage(root, 'train', ['checkpoint/'], inputs={'task': task})
    _stage(root, 'execute_trials', inputs={'task': task})
    _stage(root, 'evaluate', inputs={'task': task})


def _actions(plan):
    return [(s.stage, 'skip' if s.skip else 'run') for s in plan]


def test_a_fresh_run_dir_runs_every_stage_in_order(tmp_path):
    plan = lp.plan_loop(tmp_path, 'slide_to_target')
    assert [s.stage for s in plan] == list(lp.STAGES) == [
        'capture', 'reconstruct', 'identify', 'train', 'execute', 'evaluate']
    assert not any(s.skip for s in plan)
    # resume on an empty (even missing) run dir is the same
    assert _actions(lp.plan_loop(tmp_path / 'nope', 'slide_to_target', resume=True)) == [
        (s, 'run') for s in lp.STAGES]


def test_resume_skips_every_stage_whose_artifact_exists(tmp_path):
    _full_run(tmp_path)
    plan = lp.plan_loop(tmp_path, 'slide_to_target', resume=True)
    assert all(s.skip for s in plan)
    assert plan[2].artifact.path == tmp_path / 'identify_000' / 'parameters.yaml'
    assert plan[3].artifact.path == tmp_path / 'train_000' / 'checkpoint'
    assert plan[1].artifact.path.name == 'scene.xml'
    assert plan[0].artifact.path.name == 'manifest.json'
    # without resume nothing is skipped
    assert not any(s.skip for s in lp.plan_loop(tmp_path, 'slide_to_target'))


def test_resume_reruns_from_the_first_missing_stage_on(tmp_path):
    _stage(tmp_path, 'capture')
    _stage(tmp_path, 'reconstruct', ['scene.xml'])
    # identify missing; train/evaluate of an older loop exist but are stale
    _stage(tmp_path, 'train', ['checkpoint/'], inputs={'task': 'slide_to_target'})
    _stage(tmp_path, 'evaluate', inputs={'task': 'slide_to_target'})
    plan = lp.plan_loop(tmp_path, 'slide_to_target', resume=True)
    assert _actions(plan) == [('capture', 'skip'), ('reconstruct', 'skip'),
                              ('identify', 'run'), ('train', 'run'), ('execute', 'run'),
                              ('evaluate', 'run')]
    assert 'earlier stage' in plan[3].reason
    # ... unless the operator names them explicitly
    plan = lp.plan_loop(tmp_path, 'slide_to_target', ['train'], resume=True)
    assert _actions(plan)[2:4] == [('identify', 'run'), ('train', 'skip')]


def test_newest_complete_folder_wins_and_incomplete_ones_are_ignored(tmp_path):
    _stage(tmp_path, 'identify', ['parameters.yaml'])
    _stage(tmp_path, 'identify', ['parameters.yaml'])
    _stage(tmp_path, 'identify', ['parameters.yaml'], finish=False)   # crashed: no manifest
    (tmp_path / 'identify_003').mkdir()
    (tmp_path / 'identify_003' / 'manifest.json').write_text('{garbled')
    art = lp.find_artifact(tmp_path, 'identify')
    assert art.folder.name == 'identify_001'
    # a manifest whose artifact file is gone does not count
    (tmp_path / 'identify_001' / 'parameters.yaml').unlink()
    assert lp.find_artifact(tmp_path, 'identify').folder.name == 'identify_000'


def test_task_specific_artifacts_belong_to_their_task(tmp_path):
    _stage(tmp_path, 'train', ['checkpoint/'], inputs={'task': 'slide_to_target'})
    _stage(tmp_path, 'train', ['checkpoint/'], inputs={'task': 'push_to_pose'})
    assert lp.find_artifact(tmp_path, 'train', 'slide_to_target').folder.name == 'train_000'
    assert lp.find_artifact(tmp_path, 'train', 'push_to_pose').folder.name == 'train_001'
    assert lp.find_artifact(tmp_path, 'execute', 'push_to_pose') is None


def test_executor_folders_are_not_the_execute_stages_artifact(tmp_path):
    # robot_executor writes execute_NNN (trajectories) and execute_policy_NNN (one policy
    # episode); the loop's execute stage is execute_trials_NNN.
    _stage(tmp_path, 'execute', inputs={'task': 'slide_to_target'})
    _stage(tmp_path, 'execute_policy', inputs={'task': 'slide_to_target'})
    assert lp.find_artifact(tmp_path, 'execute', 'slide_to_target') is None
    _stage(tmp_path, 'execute_trials', inputs={'task': 'slide_to_target'})
    assert lp.find_artifact(tmp_path, 'execute', 'slide_to_target').folder.name == \
        'execute_trials_000'


def test_an_unknown_stage_name_is_refused_by_name(tmp_path):
    with pytest.raises(lp.PlanError, match="'identfy'"):
        lp.plan_loop(tmp_path, 'slide_to_target', ['capture', 'identfy'])


def test_a_skipped_stage_without_an_artifact_is_refused_by_name(tmp_path):
    _stage(tmp_path, 'capture')
    with pytest.raises(lp.PlanError, match=r'train \(train_\*/checkpoint for task '
                       r'slide_to_target\)'):
        lp.plan_loop(tmp_path, 'slide_to_target', ['capture', 'train'])
    # a train artifact of another task does not count
    _stage(tmp_path, 'train', ['checkpoint/'], inputs={'task': 'push_to_pose'})
    with pytest.raises(lp.PlanError, match='train'):
        lp.plan_loop(tmp_path, 'slide_to_target', ['train'])
    plan = lp.plan_loop(tmp_path, 'slide_to_target', ['capture'])
    assert _actions(plan)[:2] == [('capture', 'skip'), ('reconstruct', 'run')]


def test_a_moved_or_copied_run_dir_uses_its_own_outputs(tmp_path):
    import shutil
    _stage(tmp_path / 'a', 'reconstruct', ['scene.xml'], outputs={'scene': 'scene.xml'})
    shutil.copytree(tmp_path / 'a', tmp_path / 'c')
    (tmp_path / 'a').rename(tmp_path / 'b')
    for d in ('b', 'c'):
        art = lp.find_artifact(tmp_path / d, 'reconstruct')
        assert art.path == tmp_path / d / 'reconstruct_000' / 'scene.xml'


def test_overall_progress_is_monotonic_over_the_loop():
    values, done = [], []
    for s in lp.STAGES:
        for f in (0.0, 0.5, 1.0):
            values.append(lp.overall_progress(s, f, done))
        done.append(s)
    assert values[0] == 0.0 and values[-1] == pytest.approx(1.0)
    assert all(b >= a for a, b in zip(values, values[1:]))


class _FakeTask:
    """A task whose reset distribution is known: object yaw uniform in +-0.5, goal 0.1-0.2 m
    ahead at a heading within +-0.3 of +x, goal yaw = object yaw + 0.1."""

    def sample_reset(self, rng):
        from real2sim2real_ros.core.tasks.base import ResetSample
        xy = np.array([0.48, 0.1]) + rng.uniform(-0.02, 0.02, 2)
        h = rng.uniform(-0.3, 0.3)
        d = rng.uniform(0.1, 0.2)
        yaw = rng.uniform(-0.5, 0.5)
        return ResetSample(xy, yaw, xy + d * np.array([np.cos(h), np.sin(h)]), yaw + 0.1)


def test_goals_follow_the_reset_distribution_relative_to_the_object():
    rng = np.random.default_rng(0)
    goals = [lp.sample_goal(_FakeTask(), rng, (0.55, 0.12), 0.35) for _ in range(200)]
    off = np.array([g[:2] for g in goals]) - [0.55, 0.12]
    dist, heading = np.hypot(*off.T), np.arctan2(off[:, 1], off[:, 0])
    assert dist.min() >= 0.1 - 1e-9 and dist.max() <= 0.2 + 1e-9
    assert np.abs(heading).max() <= 0.3 + 1e-9
    assert np.std(heading) > 0.1          # drawn, not one fixed goal
    # the goal yaw keeps its offset from the object's (observed) yaw
    assert np.allclose([g[2] for g in goals], 0.45, atol=0.051)
    # a box seen turned by pi is the same box: the goal yaw follows the observed branch
    g = lp.sample_goal(_FakeTask(), np.random.default_rng(1), (0.55, 0.12), 0.35 - math.pi)
    assert abs(((g[2] - (0.45 - math.pi)) + math.pi) % (2 * math.pi) - math.pi) < 0.051
    # reproducible from the seed
    a = lp.sample_goal(_FakeTask(), np.random.default_rng(5), (0.5, 0.0), 0.0)
    b = lp.sample_goal(_FakeTask(), np.random.default_rng(5), (0.5, 0.0), 0.0)
    assert a == b


def test_a_yaw_outside_the_distribution_takes_the_closest_draw():
    g = lp.sample_goal(_FakeTask(), np.random.default_rng(0), (0.5, 0.0), 1.2, max_draws=300)
    # the closest reset yaw is near the distribution's edge (0.5): goal yaw = 1.2 + 0.1
    assert abs(g[2] - 1.3) < 1e-9


def test_goals_from_the_real_slide_task(robot):
    from real2sim2real_ros.core.tasks import get_task
    task = get_task('slide_to_target', robot)
    rng = np.random.default_rng(3)
    for _ in range(20):
        x, y, _yaw = lp.sample_goal(task, rng, (0.55, 0.12), 0.35)
        d = math.hypot(x - 0.55, y - 0.12)
        assert task.cfg.distance_range[0] - 1e-9 <= d <= task.cfg.distance_range[1] + 1e-9


def test_given_goals_are_triples():
    assert lp.given_goals([0.6, 0.1, 0.0, 0.7, 0.2, 0.3]) == [(0.6, 0.1, 0.0),
                                                               (0.7, 0.2, 0.3)]
    with pytest.raises(lp.PlanError, match='triples'):
        lp.given_goals([0.6, 0.1])


def test_success_counts_and_wilson_intervals():
    c = lp.SuccessCount(10, 7)
    lo, hi = c.interval()
    assert c.rate == 0.7 and 0.39 < lo < 0.40 and 0.89 < hi < 0.90
    assert lp.SuccessCount(5, 0).interval()[0] == 0.0
    assert lp.SuccessCount(5, 5).interval()[1] == 1.0
    assert math.isnan(lp.SuccessCount(0, 0).rate)


def test_cell_success_leaves_unobserved_trials_out():
    trials = [{'task_success': True, 'observed': True},
              {'task_success': False, 'observed': True, 'error_code': 3},   # refused: failure
              {'task_success': False, 'observed': False},                   # outcome unseen
              {'task_success': True, 'observed': True}]
    cell = lp.cell_result(trials)
    assert (cell['trials'], cell['successes'], cell['unobserved'], cell['attempted']) == \
        (3, 2, 1, 4)
    assert cell['success_rate'] == pytest.approx(2 / 3) and len(cell['per_trial']) == 4


def test_identified_parameters_are_read_with_intervals(tmp_path):
    from real2sim2real_ros.core.parameters import ParameterEstimate, ParameterSet
    ps = ParameterSet()
    ps.add(ParameterEstimate('joint/shoulder_pan_joint/damping', 0.6, 0.55, 0.66, 0.5,
                             'N m s/rad', True))
    ps.add(ParameterEstimate('global/command_latency', 0.012, 0.011, 0.013, 0.0, 's', True))
    ps.save(tmp_path / 'parameters.yaml')
    got = lp.load_parameters(tmp_path / 'parameters.yaml')
    assert [p['name'] for p in got] == ['joint/shoulder_pan_joint/damping',
                                        'global/command_latency']
    assert got[0]['lower_95'] == 0.55 and got[0]['upper_95'] == 0.66


def test_summary_and_plots_are_written(tmp_path):
    stages = [{'stage': s, 'status': st, 'seconds': t, 'artifact': '', 'reason': '',
               'detail': {}} for s, st, t in zip(
        lp.STAGES, ('skipped', 'ran', 'ran', 'ran', 'failed', 'not_run'),
        (0, 3.2, 20.5, 80.1, 4.0, 0))]
    params = [{'name': 'joint/a/damping', 'value': 0.6, 'lower_95': 0.5, 'upper_95': 0.7,
               'prior': 0.5, 'unit': 'N m s/rad', 'identified': True},
              {'name': 'global/command_latency', 'value': 0.012, 'lower_95': 0.011,
               'upper_95': 0.013, 'prior': 0.0, 'unit': 's', 'identified': True},
              {'name': 'geom/box_0/friction', 'value': 0.5, 'lower_95': 0.5,
               'upper_95': 0.5, 'prior': 0.5, 'unit': '', 'identified': False}]
    path = write_summary(tmp_path, {
        'task': 'slide_to_target', 'status': 'failed', 'stages': stages,
        'identified_parameters': params, 'twin': lp.SuccessCount(20, 15).to_dict(),
        'cell': lp.SuccessCount(6, 3).to_dict(), 'train_twin': None})
    data = json.loads(path.read_text())
    assert data['schema'] == 'real2sim2real/loop_summary/1'
    assert set(data['plots']) == {'stage_times', 'parameters', 'success'}
    for png in data['plots'].values():
        assert Path(png).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert 'plot_errors' not in data
    # nothing to plot still gives readable (placeholder) plots
    data = json.loads(write_summary(tmp_path / 'empty', {'stages': []}).read_text())
    assert set(data['plots']) == {'stage_times', 'parameters', 'success'}
    assert not list(tmp_path.glob('**/.*partial'))


def test_skipped_stages_give_the_summary_their_counts():
    train = {'results': {'twin_eval': {'n_trials': 10, 'successes': 7}}}
    assert lp.skipped_stage_results('train', train)['train_twin']['successes'] == 7
    assert lp.skipped_stage_results('train', {'results': {}}) == {}
    cell = {'trials': 5, 'successes': 2}
    assert lp.skipped_stage_results('execute', {'results': {'cell': cell}}) == {'cell': cell}
    assert lp.skipped_stage_results('evaluate', {}) == {'twin': None}
    assert lp.skipped_stage_results('capture', {'results': {'cell': cell}}) == {}


def test_the_reconstructed_pose_of_an_object():
    manifest = {'results': {'objects': [{'id': 'a', 'position': [0.5, -0.1, 0.02], 'yaw': 0.3},
                                        {'id': 'b', 'position': [0.6, 0.2, 0.02]}]}}
    assert lp.reconstructed_pose(manifest, 'a') == (0.5, -0.1, 0.3)
    assert lp.reconstructed_pose(manifest, 'b') == (0.6, 0.2, 0.0)
    assert lp.reconstructed_pose(manifest, 'c') is None


def test_a_late_pose_is_judged_by_the_tasks_rule():
    class _Task:
        def success(self, state):
            self.state = state
            return float(np.hypot(*(state['object_xy'] - state['goal_xy']))) < 0.02

    task = _Task()
    yaw = 0.4
    quat = (math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2))
    assert lp.task_success_at(task, (0.50, 0.10, 0.02), quat, (0.51, 0.10))
    assert task.state['goal_yaw'] == pytest.approx(yaw)     # no goal yaw: the object's own
    assert not lp.task_success_at(task, (0.50, 0.10, 0.02), quat, (0.60, 0.10, 1.0))
    assert task.state['goal_yaw'] == 1.0


def test_a_stack_trial_goal_is_its_tracked_base():
    """stack: the coordinator sends no goal (the executor takes the base's tracked centre);
    pick_and_place's goal is drawn."""
    from real2sim2real_ros.core.robot_description import gripper_cell_urdf, load_robot
    from real2sim2real_ros.core.tasks import get_task
    robot = load_robot(gripper_cell_urdf())
    assert lp.tracked_goal(get_task('stack', robot, {'base_id': 'box_7'})) == 'box_7'
    assert lp.tracked_goal(get_task('pick_and_place', robot)) == ''
