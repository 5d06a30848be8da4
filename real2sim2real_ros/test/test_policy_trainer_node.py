"""policy_trainer over DDS: twin.launch.xml through the runner with a small training budget,
the robot from a latched robot_description published here; train -> checkpoint -> evaluate,
feedback, cancel, bad input, and a reconstructed scene from the latched scene topic."""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import yaml
from conftest import package_share, start_graph

pytestmark = pytest.mark.integration

import real2sim2real_msgs.action as actions  # noqa: E402

TR, ER = actions.Train.Result, actions.Evaluate.Result
STAGES = {'setup', 'demos', 'imitation', 'self_imitation', 'evaluate', 'ppo', 'done'}
# Small enough for < 60 s on a loaded 2-core machine: 10 demos, one self-imitation round of
# 6, one PPO iteration of 8 episodes, 6 evaluation trials.
SMALL = {'demos': 10, 'bc_epochs': 120, 'self_imitation_rounds': 1,
         'self_imitation_episodes': 6, 'ppo_iterations': 1, 'ppo_batch_size': 8,
         'eval_trials': 6, 'feedback_period': 0.1}
SCENE_XML = """<mujoco model="reconstructed_scene">
  <compiler angle="radian" autolimits="true"/>
  <option cone="elliptic"/>
  <worldbody>
    <geom name="table" type="box" pos="0.6 0 -0.02" size="0.4 0.5 0.02"/>
    <body name="object/box_7" pos="0.55 0.12 0.025" quat="0.985 0 0 0.174">
      <freejoint name="object/box_7"/>
      <inertial pos="0 0 0" mass="0.15" diaginertia="0.0001 0.0001 0.0001"/>
      <geom name="object/box_7" type="box" size="0.035 0.03 0.025" condim="4"/>
    </body>
    <body name="object/cylinder_0" pos="0.62 -0.14 0.04">
      <freejoint name="object/cylinder_0"/>
      <inertial pos="0 0 0" mass="0.16" diaginertia="0.0001 0.0001 0.0001"/>
      <geom name="object/cylinder_0" type="cylinder" size="0.03 0.04" condim="4"/>
    </body>
  </worldbody>
</mujoco>
"""


class _Latched:
    """Publishes the cell arm's URDF on robot_description (what a cell does) and, on demand,
    a reconstructed Scene (what scene_reconstruction does)."""

    def __init__(self):
        import rclpy
        from std_msgs.msg import String

        from real2sim2real_msgs.msg import Scene
        from real2sim2real_ros.core.robot_description import default_cell_urdf
        from real2sim2real_ros.ros import qos
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node('test_latched', context=self.ctx)
        self.pub = self.node.create_publisher(String, 'robot_description', qos.LATCHED)
        self.pub.publish(String(data=default_cell_urdf().read_text()))
        self.scene_pub = self.node.create_publisher(Scene, 'scene', qos.LATCHED)

    def publish_scene(self, mjcf_path: Path):
        from geometry_msgs.msg import Vector3

        from real2sim2real_msgs.msg import ObjectEstimate, Scene
        self.scene_pub.publish(Scene(table_height=0.0, mjcf_path=str(mjcf_path), objects=[
            ObjectEstimate(id='cylinder_0', shape='cylinder',
                           extents=Vector3(x=0.06, y=0.06, z=0.08), mass=0.16),
            ObjectEstimate(id='box_7', shape='box', extents=Vector3(x=0.07, y=0.06, z=0.05),
                           mass=0.15, mass_is_prior=True)]))

    def close(self):
        import rclpy
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)


@pytest.fixture(scope='module')
def trainer(share_dir, tmp_path_factory):
    from real2sim2real_ros.ros.commander import GRAPH, Commander
    tmp = tmp_path_factory.mktemp('trainer')
    params = yaml.safe_load((package_share() / 'config' / 'params.yaml').read_text())
    params['/**/policy_trainer']['ros__parameters'].update(SMALL)
    (tmp / 'params.yaml').write_text(yaml.safe_dump(params))
    latched = _Latched()
    graph = start_graph('twin.launch.xml', {'run_dir': str(tmp / 'runs'),
                                            'params_file': str(tmp / 'params.yaml')}, tmp)
    cmd = Commander(node_name='test_trainer_commander',
                    expected={'policy_trainer': GRAPH['policy_trainer']})
    try:
        cmd.wait_until_up(timeout=60)
        yield cmd, tmp, latched
    finally:
        cmd.close()
        latched.close()
        assert graph.stop(timeout=30) is not None


@pytest.fixture(scope='module')
def trained(trainer):
    cmd, tmp, _ = trainer
    feedback = []
    t0 = time.monotonic()
    result = cmd.train('slide_to_target', run_dir=str(tmp / 'runs'), feedback=feedback.append,
                       timeout=120)
    wall = time.monotonic() - t0
    print(f'\ntraining (test budget) through the node: {wall:.1f} s, twin success '
          f'{result.twin_result.success_rate:.0%} of {result.twin_result.trials}')
    return result, feedback, wall


def test_train_returns_a_checkpoint_that_loads(trained):
    from real2sim2real_ros.core.artifacts import sha256_file
    from real2sim2real_ros.core.policies import load_checkpoint
    result, _, wall = trained
    assert result.error_code == TR.NONE, result.error_msg
    assert wall < 60
    ckpt = Path(result.checkpoint_path)
    assert ckpt.name == 'checkpoint' and ckpt.parent.name.startswith('train_')
    policy, config = load_checkpoint(ckpt)
    assert config['task']['task'] == 'slide_to_target'
    assert config['task']['object_id'] == 'box_0'          # the task's own scene
    tw = result.twin_result
    assert tw.system == 'twin' and tw.trials == SMALL['eval_trials']
    assert tw.success_rate == pytest.approx(tw.successes / tw.trials)
    assert config['metadata']['twin_success_rate'] == pytest.approx(tw.success_rate)
    manifest = json.loads((ckpt.parent / 'manifest.json').read_text())
    assert manifest['stage'] == 'train' and manifest['inputs']['scene']['source'] == \
        'task_default'
    for out in manifest['outputs'].values():
        assert sha256_file(out['path']) == out['sha256']
    assert manifest['parameters']['training_steps'] == 10 + 6 + 8
    # Known controller gains from config/identification.yaml, not the URDF's.
    assert manifest['parameters']['start_values']['actuator/elbow_joint/kp'] == 2000.0
    assert set(manifest['results']['stage_seconds']) >= {'demos', 'imitation', 'ppo'}


def test_feedback_is_monotonic_and_names_the_stages(trained):
    result, feedback, _ = trained
    assert len(feedback) >= 5
    stages = [f.stage for f in feedback]
    assert set(stages) <= STAGES
    assert {'demos', 'imitation', 'self_imitation', 'evaluate', 'ppo'} <= set(stages)
    progress = [f.progress for f in feedback]
    assert all(b >= a for a, b in zip(progress, progress[1:])), progress
    assert 0.0 <= progress[0] < 0.2 and progress[-1] == 1.0
    assert math.isnan(feedback[0].twin_success_rate)     # nothing evaluated yet
    assert feedback[-1].stage == 'done'
    assert feedback[-1].twin_success_rate == pytest.approx(result.twin_result.success_rate)


def test_evaluate_gives_the_same_twin_result(trainer, trained):
    cmd, _, _ = trainer
    result, _, _ = trained
    fb = []
    ev = cmd.evaluate_policy(result.checkpoint_path, trials=SMALL['eval_trials'],
                             feedback=fb.append, timeout=60)
    assert ev.error_code == ER.NONE, ev.error_msg
    assert ev.result.system == 'twin' and ev.result.trials == SMALL['eval_trials']
    # The same twin (rebuilt from the train manifest), policy and episodes: the same score.
    assert ev.result.successes == result.twin_result.successes
    assert [f.trials_done for f in fb][-1] == SMALL['eval_trials']
    assert all(b.trials_done > a.trials_done for a, b in zip(fb, fb[1:]))
    assert fb[-1].success_rate == pytest.approx(ev.result.success_rate)


def test_bad_input_gets_error_codes_and_the_node_keeps_serving(trainer, trained, tmp_path):
    from real2sim2real_ros.core.parameters import ParameterEstimate, ParameterSet
    cmd, _, _ = trainer
    res = cmd.train('stack_blocks', timeout=30)
    assert res.error_code == TR.UNKNOWN_TASK and 'slide_to_target' in res.error_msg
    res = cmd.train('slide_to_target', parameters_path=str(tmp_path / 'nope.yaml'), timeout=30)
    assert res.error_code == TR.INVALID_PARAMETERS and 'nope.yaml' in res.error_msg
    (tmp_path / 'garbage.yaml').write_text('parameters: [{name: joint/x/damping, prior: 1}]')
    res = cmd.train('slide_to_target', parameters_path=str(tmp_path / 'garbage.yaml'),
                    timeout=30)
    assert res.error_code == TR.INVALID_PARAMETERS and 'garbage.yaml' in res.error_msg
    ps = ParameterSet()
    ps.add(ParameterEstimate('joint/no_such_joint/damping', 0.5, 0.4, 0.6, 0.5, '', True))
    ps.save(tmp_path / 'unknown.yaml')
    res = cmd.train('slide_to_target', parameters_path=str(tmp_path / 'unknown.yaml'),
                    timeout=30)
    assert res.error_code == TR.INVALID_PARAMETERS and 'no_such_joint' in res.error_msg
    res = cmd.train('slide_to_target', demo_bags=[str(tmp_path / 'bag')], timeout=30)
    assert res.error_code == TR.INVALID_DEMOS and 'does not exist' in res.error_msg
    (tmp_path / 'not_a_bag').mkdir()
    (tmp_path / 'not_a_bag' / 'metadata.yaml').write_text('garbage: [')
    res = cmd.train('slide_to_target', demo_bags=[str(tmp_path / 'not_a_bag')], timeout=30)
    assert res.error_code == TR.INVALID_DEMOS and 'not_a_bag' in res.error_msg
    ev = cmd.evaluate_policy(str(tmp_path), trials=2, timeout=30)
    assert ev.error_code == ER.INVALID_CHECKPOINT and 'policy.json' in ev.error_msg
    ev = cmd.evaluate_policy(trained[0].checkpoint_path, trials=2, task='push_to_pose',
                             timeout=30)
    assert ev.error_code == ER.INVALID_CHECKPOINT and 'slide_to_target' in ev.error_msg
    ev = cmd.evaluate_policy(trained[0].checkpoint_path, trials=2, task='juggle', timeout=30)
    assert ev.error_code == ER.UNKNOWN_TASK
    # Counts: the commander refuses a negative one; the node bounds what arrives (-1 as uint32).
    with pytest.raises(ValueError, match='trials'):
        cmd.evaluate_policy(trained[0].checkpoint_path, trials=-1, timeout=30)
    ev = cmd.run_action(actions.Evaluate, 'policy_trainer/evaluate', actions.Evaluate.Goal(
        checkpoint_path=trained[0].checkpoint_path, trials=2**32 - 1), timeout=30)
    assert ev.error_code == ER.INVALID_GOAL and '4294967295' in ev.error_msg
    ev = cmd.evaluate_policy(trained[0].checkpoint_path, trials=2, timeout=30)
    assert ev.error_code == ER.NONE and ev.result.trials == 2


def _node_twin_demo_bags(robot, folder):
    """Slide demo bags for the node's own twin (the task's scene, the package's starting
    values): two strikes that hit there (found by search) and one that overshoots."""
    import numpy as np

    from real2sim2real_ros.core.policies.demo_bags import write_demo_bag
    from real2sim2real_ros.core.sysid.config import load_parameter_values
    from real2sim2real_ros.core.tasks.worlds import TwinWorld
    from real2sim2real_ros.core.training_setup import build_task_and_twin
    values = load_parameter_values(str(package_share() / 'config' / 'identification.yaml'))
    task, twin, _ = build_task_and_twin(robot, 'slide_to_target', scene=None,
                                        start_values=values)
    world = TwinWorld(twin, task.object_id)
    rng = np.random.default_rng(11)
    bags = []
    try:
        for k in range(2):
            reset = task.sample_reset(rng)
            obs = task.observation(task.initial_state(reset))
            hit = next(np.array([v, 0.0]) for v in np.linspace(0.3, 1.5, 25)
                       if task.run_episode(world, reset, lambda o, v=v: np.array([v, 0.0]))
                       .success)
            bags.append(write_demo_bag(folder / f'hit_{k}', task, [(reset, obs[None],
                                                                   hit[None])]))
        bags.append(write_demo_bag(folder / 'overshoot', task, [(reset, obs[None],
                                                                 np.array([[1.8, 0.0]]))]))
    finally:
        twin.close()
    return [str(b) for b in bags]


def test_train_from_demo_bags(trainer, trained, robot, tmp_path):
    """demo_bags: each demo replayed in the twin, the two hits kept, the overshoot dropped;
    training goes on from them. All three overshooting -> NO_DEMOS saying why."""
    cmd, tmp, _ = trainer
    bags = _node_twin_demo_bags(robot, tmp_path)
    t0 = time.monotonic()
    res = cmd.train('slide_to_target', demo_bags=bags, run_dir=str(tmp / 'runs'), timeout=120)
    wall = time.monotonic() - t0
    assert res.error_code == TR.NONE, res.error_msg
    manifest = json.loads((Path(res.checkpoint_path).parent / 'manifest.json').read_text())
    demos = manifest['results']['demos']
    print(f'\ntrain from 3 demo bags through the node: {wall:.1f} s, kept '
          f'{demos["kept"]}/{demos["tried"]}, twin success {res.twin_result.success_rate:.0%} '
          f'of {res.twin_result.trials}')
    assert (demos['source'], demos['tried'], demos['kept']) == ('recorded', 3, 2)
    assert [d['success'] for d in demos['per_demo']] == [True, True, False]
    assert manifest['results']['demos_kept'] == 2
    assert manifest['inputs']['demo_bags'] == bags
    assert res.twin_result.trials == SMALL['eval_trials']
    res = cmd.train('slide_to_target', demo_bags=bags[2:] * 2, timeout=60)
    assert res.error_code == TR.NO_DEMOS, res.error_msg
    assert '2 demo bag(s) read' in res.error_msg and 'missed in the twin' in res.error_msg
    # Another task's bag.
    res = cmd.train('push_to_pose', demo_bags=bags[:1], timeout=60)
    assert res.error_code == TR.INVALID_DEMOS and 'slide_to_target' in res.error_msg


def test_cli_verbs(trainer, trained):
    import os
    import subprocess
    import sys

    def r2s2r(*args):
        return subprocess.run([sys.executable, '-m', 'real2sim2real_ros.cli.main', *args],
                              capture_output=True, text=True, timeout=60, env=dict(os.environ))
    out = r2s2r('evaluate-policy', trained[0].checkpoint_path, '--trials', '3')
    assert out.returncode == 0, out.stderr
    assert 'evaluate-policy: twin success' in out.stdout and '/3 trials' in out.stdout
    out = r2s2r('train', '--task', 'juggle')
    assert out.returncode == 1 and 'FAILED (1)' in out.stdout and 'slide_to_target' in out.stdout


def test_cancel_stops_training_within_seconds(trainer):
    cmd, tmp, _ = trainer
    feedback = []
    t0 = time.monotonic()
    res = cmd.train('slide_to_target', total_steps=5000, run_dir=str(tmp / 'cancel'),
                    feedback=feedback.append, cancel_after=2.0, timeout=30)
    assert res.error_code == TR.CANCELED, res.error_msg
    assert time.monotonic() - t0 < 2.0 + 5.0
    assert feedback and feedback[-1].progress < 0.5
    assert not list((tmp / 'cancel').glob('train_*'))      # no half-written stage left
    res = cmd.train('no_task', timeout=30)                   # serving again at once
    assert res.error_code == TR.UNKNOWN_TASK


def test_reconstructed_scene_and_identified_parameters(trainer, tmp_path):
    """The latched scene's object (id, size) goes into the task; the identified friction is
    set and randomised within its 95% interval; evaluate rebuilds that twin."""
    from real2sim2real_ros.core.parameters import ParameterEstimate, ParameterSet
    from real2sim2real_ros.core.policies import load_checkpoint
    cmd, tmp, latched = trainer
    (tmp_path / 'scene.xml').write_text(SCENE_XML)
    latched.publish_scene(tmp_path / 'scene.xml')
    ps = ParameterSet()
    ps.add(ParameterEstimate('geom/box_7/friction', 0.45, 0.40, 0.50, 0.5, '1', True))
    (tmp_path / 'identify_000').mkdir()
    ps.save(tmp_path / 'identify_000' / 'parameters.yaml')
    time.sleep(0.5)            # the latched scene reaches the node
    res = cmd.train('slide_to_target', parameters_path=str(tmp_path / 'identify_000'),
                    randomize=True, total_steps=20, run_dir=str(tmp / 'scene'), timeout=120)
    assert res.error_code == TR.NONE, res.error_msg
    _, config = load_checkpoint(res.checkpoint_path)
    assert config['task']['object_id'] == 'box_7'
    assert config['task']['object_size'] == pytest.approx([0.07, 0.06, 0.05])
    manifest = json.loads((Path(res.checkpoint_path).parent / 'manifest.json').read_text())
    assert manifest['inputs']['scene']['source'] == 'scene topic'
    assert manifest['parameters']['parameter_values'] == {'geom/box_7/friction': 0.45}
    assert manifest['results']['randomization'] == {
        'geom/box_7/friction': pytest.approx([0.40, 0.50])}
    ev = cmd.evaluate_policy(res.checkpoint_path, trials=SMALL['eval_trials'], timeout=60)
    assert ev.error_code == ER.NONE, ev.error_msg
    assert ev.result.successes == res.twin_result.successes


def _blow_up_values(names):
    """Values inside core.twin.PARAMETER_UPPER_BOUNDS that blow the default arm's twin up on
    its first move (measured: MuJoCo resets the simulation within 31 steps): every link
    1e-6 kg, no armature, the stiffest servo allowed."""
    return {n: 1e-6 for n in names if n.startswith('body/') and n.endswith('_link/mass')} | \
        {n: 0.0 for n in names if n.endswith('/armature')} | \
        {n: 1e6 for n in names if n.startswith('actuator/') and n.endswith('/kp')}


def test_a_parameter_set_that_blows_the_twin_up_is_unstable_twin_and_both_keep_serving(
        trainer, tmp_path):
    """Issue 17 fault: a parameter set that makes the twin diverge. sim_server refuses it
    as UNSTABLE_TWIN and changes nothing (set_physical_parameters), a rollout over it is
    UNSTABLE, an absurd twin state is UNSTABLE_TWIN on ~/step; the trainer answers
    UNSTABLE_TWIN naming the parameter set. A valid request to each succeeds afterwards."""
    from real2sim2real_ros.core.parameters import ParameterEstimate, ParameterSet
    from real2sim2real_ros.core.twin import MAX_QVEL
    RR = actions.Rollout.Result
    cmd, tmp, _ = trainer
    t0 = time.monotonic()
    deadline = time.monotonic() + 60      # sim_server builds its twin on robot_description
    while not (before := cmd.get_physical_parameters()).success:
        assert time.monotonic() < deadline, before.message
        time.sleep(0.2)
    values = {p.name: p.value for p in before.parameters}
    bad = _blow_up_values(values)
    assert len(bad) >= 12, sorted(values)
    resp = cmd.set_physical_parameters(bad)
    assert not resp.success and resp.message.startswith('UNSTABLE_TWIN:'), resp.message
    assert 'nothing changed' in resp.message and 'diverge' in resp.message
    after = {p.name: p.value for p in cmd.get_physical_parameters().parameters}
    assert after == values, 'a refused set changed the twin'
    q0 = [0.0, -1.5708, 1.5708, 1.5708, 0.0, 0.0]
    arm = ['shoulder_pan_joint', 'shoulder_lift_joint', 'elbow_joint', 'wrist_1_joint',
           'wrist_2_joint', 'wrist_3_joint']
    move = [(0.5, [q0[0] + 0.1] + q0[1:])]
    res = cmd.rollout(arm, move, initial_qpos=q0, parameter_samples=[bad], timeout=60)
    assert res.error_code == RR.UNSTABLE and 'rollout 0' in res.error_msg, res.error_msg
    res = cmd.rollout(arm, move, initial_qpos=q0, sample_period=0.1, timeout=60)
    assert res.error_code == RR.NONE, res.error_msg
    # An absurd state (faster than MAX_QVEL) diverges on the next step: UNSTABLE_TWIN.
    assert cmd.sim_pause(True).success
    try:
        assert cmd.sim_reset(q0, [2 * MAX_QVEL] + [0.0] * 5).success
        step = cmd.sim_step(10)
        assert not step.success and step.message.startswith('UNSTABLE_TWIN:'), step.message
        assert cmd.sim_reset(q0).success
        assert cmd.sim_step(10).success
    finally:
        assert cmd.sim_pause(False).success
    assert cmd.set_physical_parameters({'global/command_latency':
                                        values['global/command_latency']}).success
    # The trainer: the same values as an identified parameter set.
    ps = ParameterSet()
    for n, v in bad.items():
        ps.add(ParameterEstimate(n, v, v, v, values[n], '', True))
    ps.save(tmp_path / 'blow_up.yaml')
    res = cmd.train('slide_to_target', parameters_path=str(tmp_path / 'blow_up.yaml'),
                    total_steps=20, run_dir=str(tmp / 'unstable'), timeout=120)
    assert res.error_code == TR.UNSTABLE_TWIN, res.error_msg
    assert 'blow_up.yaml' in res.error_msg and 'diverge' in res.error_msg
    assert not list((tmp / 'unstable').glob('train_*/manifest.json'))
    res = cmd.train('slide_to_target', total_steps=20, run_dir=str(tmp / 'unstable'),
                    timeout=120)
    assert res.error_code == TR.NONE, res.error_msg
    print(f'unstable parameter set: sim_server and trainer refused it, both served the next '
          f'request; {time.monotonic() - t0:.1f} s')
