"""Policies: MLP + checkpoints, demos into the twin, behaviour cloning, PPO (horizon 1) with
domain randomisation, evaluation on a twin and on an emulated cell."""
import copy
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml

from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
from real2sim2real_ros.core.emulated_world import EmulatedWorld
from real2sim2real_ros.core.parameters import ParameterEstimate, ParameterSet
from real2sim2real_ros.core.policies import (
    CheckpointError,
    MLPPolicy,
    load_checkpoint,
    save_checkpoint,
)
from real2sim2real_ros.core.policies.evaluate import evaluate
from real2sim2real_ros.core.policies.imitation import (
    DemoSet,
    behaviour_cloning,
    collect_scripted_demos,
    replay_demos,
)
from real2sim2real_ros.core.policies.ppo import PPOConfig, train_bandit_ppo
from real2sim2real_ros.core.policies.randomization import DomainRandomization
from real2sim2real_ros.core.tasks import get_task
from real2sim2real_ros.core.tasks.worlds import CellWorld, TaskObject, TwinWorld, task_scene_xml
from real2sim2real_ros.core.twin import Twin

torch.set_num_threads(1)
BOX = (0.08, 0.06, 0.05)


@pytest.fixture(scope='module')
def slide(robot):
    return get_task('slide_to_target', robot)


def make_twin(robot, friction=0.5, mass=0.2):
    return Twin(robot, task_scene_xml(TaskObject('box_0', BOX, mass=mass, friction=friction)))


# ------------------------------------------------------------------------ policy, checkpoint
def test_policy_actions_stay_inside_the_action_box():
    pol = MLPPolicy(3, [0.2, -0.1], [1.8, 0.1], (16,))
    with torch.no_grad():
        pol.net[-1].bias.fill_(50.0)                     # push the mean far past the bound
    a = pol.act([1e3, -1e3, 5.0])
    assert np.all(a <= np.array([1.8, 0.1]) + 1e-6) and np.all(a >= [0.2, -0.1])
    samples = np.array([pol.act([0, 0, 0], np.random.default_rng(i)) for i in range(20)])
    assert np.all(samples >= np.array([0.2, -0.1]) - 1e-6)
    assert np.all(samples <= np.array([1.8, 0.1]) + 1e-6)
    with pytest.raises(ValueError, match='low < high'):
        MLPPolicy(3, [1.0], [0.5])


def test_checkpoint_round_trip_loads_without_the_trainer(tmp_path):
    pol = MLPPolicy(3, [0.2, -0.1], [1.8, 0.1], (16, 16))
    pol.fit_normalisation(np.random.default_rng(0).normal(size=(50, 3)) * 4 + 1)
    obs = np.array([0.12, 0.3, -0.05])
    expected = pol.act(obs)
    save_checkpoint(pol, tmp_path / 'ckpt', {'task': 'slide_to_target', 'success_radius': 0.05},
                    {'twin_success_rate': 0.9})
    loaded, config = load_checkpoint(tmp_path / 'ckpt')
    np.testing.assert_allclose(loaded.act(obs), expected, atol=1e-6)
    assert config['task']['success_radius'] == 0.05
    assert config['metadata']['twin_success_rate'] == 0.9
    # A fresh interpreter: the policy module alone restores it (no tasks, trainer, ROS).
    code = ('import sys, json; from real2sim2real_ros.core.policies.policy import '
            'load_checkpoint; p, c = load_checkpoint(sys.argv[1]); '
            'print(json.dumps([p.act([0.12, 0.3, -0.05]).tolist(), '
            "[m for m in sys.modules if m.startswith('real2sim2real_ros.core.') and "
            "m.endswith(('.ppo', '.imitation', '.tasks')) or m == 'rclpy']]))")
    out = subprocess.run([sys.executable, '-c', code, str(tmp_path / 'ckpt')],
                         capture_output=True, text=True, timeout=60, check=True)
    action, heavy = json.loads(out.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(action, expected, atol=1e-6)
    assert heavy == []


def test_bad_checkpoints_raise_checkpoint_error_naming_the_file(tmp_path):
    with pytest.raises(CheckpointError, match='policy.json is missing'):
        load_checkpoint(tmp_path)
    save_checkpoint(MLPPolicy(2, [0], [1], (4,)), tmp_path)
    cfg = json.loads((tmp_path / 'policy.json').read_text())
    (tmp_path / 'policy.json').write_text(json.dumps({**cfg, 'format': 'other/9'}))
    with pytest.raises(CheckpointError, match="format 'other/9'"):
        load_checkpoint(tmp_path)
    cfg['architecture']['hidden'] = [8]
    (tmp_path / 'policy.json').write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match='cannot restore'):
        load_checkpoint(tmp_path)


# ------------------------------------------------------------------------ imitation
def test_behaviour_cloning_fits_a_known_mapping():
    rng = np.random.default_rng(0)
    obs = rng.uniform([0.1, -0.3, -0.2], [0.2, 0.3, 0.2], size=(200, 3))
    act = np.column_stack([0.3 + 6.0 * obs[:, 0], 0.2 * obs[:, 2]])
    pol = MLPPolicy(3, [0.2, -0.1], [1.8, 0.1], (32, 32))
    stats = behaviour_cloning(pol, DemoSet(obs, act, 200, 200), epochs=400)
    pred = np.array([pol.act(o) for o in obs[:20]])
    assert stats['bc_loss'] < 1e-3
    assert np.abs(pred[:, 0] - act[:20, 0]).max() < 0.05
    with pytest.raises(ValueError, match='0 of 7 episodes'):
        behaviour_cloning(pol, DemoSet(np.zeros((0, 3)), np.zeros((0, 2)), 7, 0))


def test_demos_are_replayed_in_the_twin_and_only_successes_kept(robot, slide):
    twin = make_twin(robot)
    world = TwinWorld(twin, 'box_0')
    demos = collect_scripted_demos(slide, world, 12, seed=4)
    assert 0 < demos.episodes_kept < 12              # the demonstrator misses some
    # Recorded episodes: a strike known to be right for the twin and one far too hard.
    rng = np.random.default_rng(5)
    reset = slide.sample_reset(rng)
    good = [slide.cfg.speed_range[0], 0.0]
    for v in np.linspace(*slide.cfg.speed_range, 17):   # find a hit by search
        if slide.run_episode(world, reset, lambda o, v=v: np.array([v, 0.0])).success:
            good = [v, 0.0]
            break
    kept = replay_demos(slide, world, [(reset, [good]), (reset, [[1.8, 0.0]])])
    assert (kept.episodes_tried, kept.episodes_kept) == (2, 1)
    np.testing.assert_allclose(kept.actions, [good])
    hind = collect_scripted_demos(slide, world, 12, seed=4, hindsight=True)
    assert hind.episodes_kept > demos.episodes_kept  # misses relabelled, not thrown away


# ------------------------------------------------------------------------ randomisation
def test_domain_randomisation_spans_the_identified_intervals():
    ps = ParameterSet()
    ps.add(ParameterEstimate('geom/box_0/friction', 0.3, 0.25, 0.35, 0.5, '', True))
    ps.add(ParameterEstimate('body/box_0/mass', 0.2, 0.19, 0.21, 0.2, 'kg', True))
    ps.add(ParameterEstimate('joint/elbow_joint/damping', 0.5, 0.1, 0.9, 0.5, '', False))
    rng = np.random.default_rng(0)
    draws = [DomainRandomization(ps).sample(rng) for _ in range(300)]
    mu = np.array([d['geom/box_0/friction'] for d in draws])
    assert mu.min() >= 0.25 and mu.max() <= 0.35 and mu.max() - mu.min() > 0.08
    assert all('joint/elbow_joint/damping' not in d for d in draws)   # not identified
    wide = DomainRandomization(ps, min_relative=0.2).ranges['body/box_0/mass']
    assert wide == pytest.approx((0.16, 0.24))
    with pytest.raises(ValueError, match='>= 0'):
        DomainRandomization(ps, widen=-1)


# ------------------------------------------------------------------------ PPO, evaluation
def test_ppo_fine_tuning_in_the_twin_fixes_a_policy_cloned_from_the_wrong_friction(robot,
                                                                                    slide):
    """BC in a twin with friction 0.5, then PPO in a twin whose friction is 0.25: the strike
    must get softer and hit far more often."""
    nominal, slippery = make_twin(robot, 0.5), make_twin(robot, 0.25)
    demos = collect_scripted_demos(slide, TwinWorld(nominal, 'box_0'), 40, seed=1,
                                   hindsight=True)
    pol = MLPPolicy(3, slide.action_low, slide.action_high, (32, 32), init_log_std=-2.0)
    behaviour_cloning(pol, demos, epochs=300)
    before = evaluate(slide, TwinWorld(slippery, 'box_0'), pol.as_function(), 12, seed=3)
    ps = ParameterSet()
    ps.add(ParameterEstimate('geom/box_0/friction', 0.25, 0.23, 0.27, 0.5, '', True))
    hist = train_bandit_ppo(pol, slide, slippery, DomainRandomization(ps),
                            PPOConfig(iterations=10, batch_size=24, lr=3e-3, seed=0))
    after = evaluate(slide, TwinWorld(slippery, 'box_0'), pol.as_function(), 12, seed=3)
    assert hist.episodes == 240 and len(hist.mean_reward) == 10
    assert hist.mean_reward[-1] > hist.mean_reward[0]
    assert after.mean_error < 0.6 * before.mean_error
    assert after.success_rate >= before.success_rate + 0.3


def test_evaluation_uses_the_same_episodes_on_twin_and_cell(robot, slide):
    data = copy.deepcopy(yaml.safe_load(open(default_cell_spec_path())))
    data['objects'][0]['friction'] = [0.5, 0.005, 0.0001]
    cell = CellWorld(EmulatedWorld(load_cell_spec(data)), 'box_0')
    twin = TwinWorld(make_twin(robot, 0.5), 'box_0')
    seen = []

    def policy(obs):
        seen.append(obs.copy())
        return np.array([np.sqrt(2 * 0.5 * 9.81 * max(obs[0] - 0.02, 0.01)), 0.0])
    a = evaluate(slide, twin, policy, 4, seed=11)
    b = evaluate(slide, cell, policy, 4, seed=11)
    np.testing.assert_allclose(np.array(seen[:4]), np.array(seen[4:]))
    assert (a.backend, b.backend, a.n_trials) == ('twin', 'cell', 4)
    assert a.success_rate == a.successes / 4 and len(b.errors) == 4
    with pytest.raises(ValueError, match='n_trials'):
        evaluate(slide, twin, policy, 0)


@pytest.mark.parametrize('randomized', [False, True])
def test_hindsight_relabels_in_the_identified_twin_and_ppo_randomises(robot, slide, randomized,
                                                                     monkeypatch):
    """A strike relabelled with the goal it reached under a randomised draw teaches that
    draw's action: hindsight self-imitation runs in the identified twin unless
    ``hindsight_randomized`` (the UR5's randomised policy: 55% -> 90% in the twin); PPO,
    whose objective is the expectation over the draws, gets the randomisation."""
    from types import SimpleNamespace

    from real2sim2real_ros.core.policies import pipeline
    from real2sim2real_ros.core.policies.pipeline import TrainConfig, train_policy
    seen = {}

    def hsi(policy, task, twin, demos, rounds, episodes, randomization, *a, **kw):
        seen['hindsight'] = randomization
        return demos

    def ppo(policy, task, twin, randomization, cfg, progress=None):
        seen['ppo'] = randomization
        return SimpleNamespace(success_rate=[])
    monkeypatch.setattr(pipeline, 'hindsight_self_imitation', hsi)
    monkeypatch.setattr(pipeline, 'train_bandit_ppo', ppo)
    ps = ParameterSet()
    ps.add(ParameterEstimate('geom/box_0/friction', 0.5, 0.4, 0.6, 0.5, '', True))
    cfg = TrainConfig(demos=6, bc_epochs=20, eval_trials=2, hindsight_randomized=randomized,
                      ppo=PPOConfig(iterations=1, batch_size=2))
    train_policy(slide, make_twin(robot), ps, cfg, None)
    assert seen['ppo'].ranges == {'geom/box_0/friction': pytest.approx((0.4, 0.6))}
    assert (seen['hindsight'] is seen['ppo']) if randomized else seen['hindsight'] is None


def test_train_policy_pipeline_writes_a_self_contained_checkpoint(robot, slide, tmp_path):
    from real2sim2real_ros.core.policies.pipeline import TrainConfig, train_policy
    ps = ParameterSet()
    ps.add(ParameterEstimate('geom/box_0/friction', 0.5, 0.45, 0.55, 0.5, '', True))
    cfg = TrainConfig(demos=20, self_imitation_rounds=1, self_imitation_episodes=10,
                      bc_epochs=200, ppo=PPOConfig(iterations=2, batch_size=8), eval_trials=6)
    result = train_policy(slide, make_twin(robot), ps, cfg, tmp_path / 'ckpt')
    assert result.demos_tried == 30 and 0 < result.demos_kept <= 30
    assert len(result.ppo_success_per_iteration) == 2
    assert result.randomization == {'geom/box_0/friction': pytest.approx([0.45, 0.55])}
    # Model selection never returns something worse in the twin than imitation alone.
    assert result.twin_eval.mean_error <= result.twin_eval_bc.mean_error + 1e-12
    policy, config = load_checkpoint(result.checkpoint)
    assert config['task']['task'] == 'slide_to_target'
    assert config['metadata']['twin_success_rate'] == result.twin_eval.success_rate
    obs = np.array([0.14, 0.1, 0.0])
    np.testing.assert_allclose(policy.act(obs), result.policy.act(obs), atol=1e-6)
