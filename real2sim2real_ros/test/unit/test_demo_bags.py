"""Demonstrations recorded as MCAP bags (no ROS): the repo's bag writer writes PolicyStep
episodes, core/policies/demo_bags.py reads them back into task resets + actions, the twin
replays them (inverse distillation: only what succeeds there is kept) and train_policy
learns from them; scripted checkpoints (the demonstrator run by the executor) and the
per-step records the executor writes into its bags."""
import json

import numpy as np
import pytest
import torch

from real2sim2real_ros.core import execution_safety as es
from real2sim2real_ros.core import policy_execution as pe
from real2sim2real_ros.core.bag_io import BagWriter
from real2sim2real_ros.core.geometry import yaw_quat
from real2sim2real_ros.core.policies.demo_bags import (
    DemoBagError,
    read_demo_bag,
    read_demo_bags,
    write_demo_bag,
)
from real2sim2real_ros.core.policies.pipeline import (
    NoDemonstrationsError,
    TrainConfig,
    replay_recorded_demos,
    train_policy,
)
from real2sim2real_ros.core.policies.ppo import PPOConfig
from real2sim2real_ros.core.tasks import get_task
from real2sim2real_ros.core.tasks.worlds import TaskObject, TwinWorld, task_scene_xml
from real2sim2real_ros.core.twin import Twin

torch.set_num_threads(1)
BOX = (0.08, 0.06, 0.05)


@pytest.fixture(scope='module')
def push(robot):
    return get_task('push_to_pose', robot, {'kick_probability': 0.0})


def make_twin(robot, friction=0.5):
    return Twin(robot, task_scene_xml(TaskObject('box_0', BOX, mass=0.2, friction=friction)))


def _hit_and_miss(slide, world, reset):
    """A strike that lands in the target circle in this twin (found by search) and its
    error, and the hardest strike (overshoots)."""
    for v in np.linspace(0.3, 1.5, 25):
        r = slide.run_episode(world, reset, lambda o, v=v: np.array([v, 0.0]))
        if r.success:
            return np.array([v, 0.0]), r.final_error
    raise AssertionError('no speed hits the target')


@pytest.fixture(scope='module')
def slide_bags(robot, slide, tmp_path_factory):
    """Three one-episode slide bags: two hits (for the twin with friction 0.5), one miss."""
    tmp = tmp_path_factory.mktemp('demo_bags')
    twin = make_twin(robot)
    world = TwinWorld(twin, 'box_0')
    rng = np.random.default_rng(3)
    resets = [slide.sample_reset(rng) for _ in range(2)]
    hits = [_hit_and_miss(slide, world, r) for r in resets]
    episodes = [(resets[0], hits[0][0]), (resets[0], np.array([1.8, 0.0])),
                (resets[1], hits[1][0])]
    bags = []
    for k, (reset, action) in enumerate(episodes):
        obs = slide.observation(slide.initial_state(reset))
        bags.append(write_demo_bag(tmp / f'demo_{k}', slide, [(reset, obs[None], action[None])]))
    twin.close()
    return bags, episodes, [h[1] for h in hits]


def test_a_demo_bag_reads_back_into_the_recorded_start_and_actions(slide, slide_bags):
    bags, episodes, _ = slide_bags
    demos = read_demo_bags(bags, slide)
    assert len(demos) == 3 and all(d.task == 'slide_to_target' and d.steps == 1 for d in demos)
    for d, (reset, action) in zip(demos, episodes):
        np.testing.assert_allclose(d.reset.object_xy, reset.object_xy, atol=1e-12)
        np.testing.assert_allclose(d.reset.goal_xy, reset.goal_xy, atol=1e-12)
        assert d.reset.object_yaw == pytest.approx(reset.object_yaw, abs=1e-9)
        np.testing.assert_allclose(d.actions, [action])
        np.testing.assert_allclose(
            d.observations[0], slide.observation(slide.initial_state(reset)), atol=1e-12)
        assert d.task_config['success_radius'] == slide.cfg.success_radius
    assert [d.bag for d in demos] == [str(b) for b in bags]


def test_replay_in_the_twin_keeps_the_hits_and_drops_the_miss(robot, slide, slide_bags):
    bags, _, hit_errors = slide_bags
    demos = read_demo_bags(bags, slide)
    twin = make_twin(robot)
    try:
        kept = replay_recorded_demos(slide, TwinWorld(twin, 'box_0'), demos)
    finally:
        twin.close()
    assert (kept.episodes_tried, kept.episodes_kept) == (3, 2)
    assert [r['success'] for r in kept.details] == [True, False, True]
    radius = slide.cfg.success_radius
    # The twin is deterministic: a replay lands where the strike landed when it was found.
    assert kept.details[0]['final_error'] == pytest.approx(hit_errors[0], abs=1e-6)
    assert kept.details[2]['final_error'] == pytest.approx(hit_errors[1], abs=1e-6)
    assert kept.details[0]['final_error'] <= radius and kept.details[1]['final_error'] > radius
    # The imitation data: the twin replay's pairs of the kept demos (not the miss).
    np.testing.assert_allclose(kept.actions, [demos[0].actions[0], demos[2].actions[0]])
    np.testing.assert_allclose(kept.observations, [demos[0].observations[0],
                                                   demos[2].observations[0]], atol=1e-12)
    # A grippier twin (friction 0.9): the same strikes stop short, nothing survives, and
    # the error says which bag did what.
    twin = make_twin(robot, friction=0.9)
    try:
        with pytest.raises(NoDemonstrationsError, match=r'0 of 3 recorded') as err:
            replay_recorded_demos(slide, TwinWorld(twin, 'box_0'), demos)
    finally:
        twin.close()
    assert str(bags[1]) in str(err.value) and 'missed in the twin' in str(err.value)


def test_train_policy_learns_from_the_recorded_demos(robot, slide, slide_bags, tmp_path):
    from real2sim2real_ros.core.policies import load_checkpoint
    bags, _, _ = slide_bags
    demos = read_demo_bags(bags, slide)
    cfg = TrainConfig(demos=50, self_imitation_rounds=2, self_imitation_episodes=12,
                      bc_epochs=200, ppo=PPOConfig(iterations=1, batch_size=8), eval_trials=10)
    stages = []
    twin = make_twin(robot)
    try:
        res = train_policy(slide, twin, None, cfg, tmp_path / 'ckpt', demos=demos,
                           progress=lambda s, f, r: stages.append((s, f)))
    finally:
        twin.close()
    print(f'\ntrained from 3 demo bags: kept {res.demos_kept}/{res.demos_tried}, twin success '
          f'{res.twin_eval.success_rate:.0%} (imitation alone {res.twin_eval_bc.success_rate:.0%})'
          f', mean error {res.twin_eval.mean_error * 1e3:.1f} mm')
    assert (res.demos_tried, res.demos_kept) == (3, 2)   # the bags, not cfg.demos
    assert res.details['demos']['source'] == 'recorded'
    assert [d['success'] for d in res.details['demos']['per_demo']] == [True, False, True]
    _, config = load_checkpoint(res.checkpoint)
    assert config['metadata']['demos_kept'] == 2
    assert config['metadata']['demos']['per_demo'][1]['bag'] == str(bags[1])
    assert [s for s, _ in stages][0] == 'demos'
    # Two demos + hindsight self-imitation: the policy hits the target in the twin far more
    # often than the one-demo-speed guess would (the miss radius is 3 cm on 10-18 cm slides).
    assert res.twin_eval.success_rate >= 0.5, res.twin_eval


def test_push_demo_replays_its_action_sequence(robot, push, tmp_path):
    """push_to_pose: the expert's pushes recorded (tool start, goal with yaw, 10 Hz actions),
    replayed open loop in the same twin: it succeeds again; cut short it does not."""
    from real2sim2real_ros.core.policies.closed_loop import _recorded_episodes
    twin = make_twin(robot)
    world = TwinWorld(twin, 'box_0')
    rng = np.random.default_rng(1)
    found = None
    for _ in range(6):
        reset = push.sample_reset(rng)
        r = push.run_episode(world, reset, push.scripted_demo_policy(reset, rng))
        if r.success and r.info['steps'] > 10:
            found = (reset, r)
            break
    assert found is not None, 'the expert pushes successfully in the twin'
    reset, r = found
    full = write_demo_bag(tmp_path / 'push', push, [(reset, r.observations, r.actions)])
    half = write_demo_bag(tmp_path / 'push_half', push,
                          [(reset, r.observations[:len(r.actions) // 3],
                            r.actions[:len(r.actions) // 3])])
    demos = read_demo_bags([full, half], push)
    d = demos[0]
    assert d.steps == len(r.actions)
    np.testing.assert_allclose(d.reset.extra['tip_start_xy'], reset.extra['tip_start_xy'])
    assert d.reset.goal_yaw == pytest.approx(reset.goal_yaw) and d.reset.extra['kick_step'] == -1
    kept, details = _recorded_episodes(push, twin, demos, lambda f: None)
    twin.close()
    assert [x['success'] for x in details] == [True, False]
    assert details[0]['final_error'] == pytest.approx(r.final_error, abs=2e-3)
    assert details[1]['final_error'] > push.cfg.position_tolerance
    assert len(kept) == 1 and kept[0].steps == len(r.actions)
    np.testing.assert_allclose(kept[0].labels, r.actions)     # its own actions as labels


def test_unusable_bags_raise_demo_bag_errors_naming_the_bag(slide, push, slide_bags,
                                                            tmp_path):
    bags, _, _ = slide_bags
    with pytest.raises(DemoBagError, match='does not exist') as err:
        read_demo_bags([tmp_path / 'nope'], slide)
    assert err.value.kind == 'unreadable'
    junk = tmp_path / 'junk'
    junk.mkdir()
    (junk / 'metadata.yaml').write_text('this: is not a bag\n')
    with pytest.raises(DemoBagError, match='not a readable rosbag2 bag') as err:
        read_demo_bags([junk], slide)
    assert err.value.kind == 'unreadable' and str(junk) in str(err.value)
    with BagWriter(tmp_path / 'joints_only') as bag:   # an execute_trajectory recording
        bag.add_topic('/joint_states', 'sensor_msgs/msg/JointState')
        bag.write('/joint_states', 1, {'name': ['a'], 'position': [0.1]})
    with pytest.raises(DemoBagError, match='no real2sim2real_msgs/msg/PolicyStep') as err:
        read_demo_bags([tmp_path / 'joints_only'], slide)
    assert err.value.kind == 'no_steps'
    with pytest.raises(DemoBagError, match="records a 'slide_to_target' episode, not "
                       "'push_to_pose'") as err:
        read_demo_bags([bags[0]], push)
    assert err.value.kind == 'wrong_task'
    # An execute_policy_<n>/ folder stands for the bag inside it.
    stage = tmp_path / 'execute_policy_001'
    stage.mkdir()
    bags[0].rename(stage / 'episode')
    try:
        assert read_demo_bag(stage)[0].steps == 1
    finally:
        (stage / 'episode').rename(bags[0])


def test_scripted_checkpoint_runs_the_demonstrator_and_records_its_steps(robot, slide,
                                                                         tmp_path):
    """What `r2s2r record-demos` hands the executor: the task's demonstrator as a checkpoint
    (no network), a goal drawn from the task's distribution, and per-action records."""
    ckpt = pe.write_scripted_checkpoint(tmp_path / 'scripted', 'slide_to_target',
                                        {'demo_spread': 0.3}, seed=7)
    loaded = pe.load_policy(ckpt, robot, 'slide_to_target')
    assert loaded.scripted and loaded.task.cfg.demo_spread == 0.3
    # The same demonstrator (speed scale from the seed) as the task's own.
    obs = np.array([0.14, 0.1, 0.0])
    cfg = get_task('slide_to_target', robot, {'demo_spread': 0.3})
    own = cfg.scripted_demo_policy(None, np.random.default_rng(7))
    np.testing.assert_allclose(loaded.policy(obs), own(obs))
    with pytest.raises(pe.ExecutionError, match='task mismatch'):
        pe.load_policy(ckpt, robot, 'push_to_pose')
    gate = pe.SafetyGate(es.JointLimits.from_robot(robot), robot.fk,
                         es.Workspace(np.array([-0.3, -0.9, 0.0]), np.array([1.1, 0.9, 1.3])))
    box = pe.ObjectPose.from_xyz_quat([0.48, 0.1, 0.025], yaw_quat(0.05))
    from real2sim2real_ros.core.tasks.kinematics import READY_POSE
    ep = pe.make_episode(loaded, gate, ())
    ep.start(np.array(READY_POSE), box)
    c = slide.cfg
    d = ep.goal_xy - box.xy
    assert c.distance_range[0] <= np.linalg.norm(d) <= c.distance_range[1]
    assert c.heading_range[0] <= np.arctan2(d[1], d[0]) <= c.heading_range[1]
    [rec] = ep.records
    assert rec['step'] == 0 and rec['task_goal'] == pytest.approx(list(ep.goal_xy))
    assert rec['object_pose'] == pytest.approx([0.48, 0.1, 0.025, *yaw_quat(0.05)])
    assert rec['action'] == pytest.approx(ep.actions[0]) and rec['tool_start'] == []
    # Another seed draws another goal.
    other = pe.make_episode(pe.load_policy(pe.write_scripted_checkpoint(
        tmp_path / 's2', 'slide_to_target', seed=8), robot), gate, ())
    other.start(np.array(READY_POSE), box)
    assert np.linalg.norm(other.goal_xy - ep.goal_xy) > 1e-3
    assert json.loads((ckpt / 'policy.json').read_text())['seed'] == 7
