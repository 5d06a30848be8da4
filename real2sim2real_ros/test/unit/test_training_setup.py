"""What the policy_trainer assembles before training (core/training_setup.py): the twin from a
reconstructed scene or the task's own, starting and identified values, and the budget."""
import mujoco
import pytest

from real2sim2real_ros.core.parameters import ParameterError, ParameterEstimate, ParameterSet
from real2sim2real_ros.core.policies.pipeline import TrainConfig
from real2sim2real_ros.core.policies.ppo import PPOConfig
from real2sim2real_ros.core.tasks import TaskError
from real2sim2real_ros.core.training_setup import (
    SceneError,
    budget_config,
    build_task_and_twin,
    load_parameter_set,
    scene_info_from_mjcf,
    select_base,
    select_object,
    training_steps,
)

SCENE = """<mujoco>
  <worldbody>
    <geom name="table" type="box" pos="0.6 0 0.08" size="0.4 0.5 0.02"/>
    <body name="object/cyl" pos="0.62 -0.14 0.14">
      <freejoint name="object/cyl"/>
      <geom name="object/cyl" type="cylinder" size="0.03 0.04" mass="0.16"/>
    </body>
    <body name="object/box_3" pos="0.5 0.1 0.125">
      <freejoint name="object/box_3"/>
      <geom name="object/box_3" type="box" size="0.04 0.03 0.025" mass="0.2"/>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.fixture
def scene(tmp_path):
    (tmp_path / 'scene.xml').write_text(SCENE)
    return scene_info_from_mjcf(tmp_path / 'scene.xml')


def test_scene_geometry_from_a_reconstructed_mjcf(scene, tmp_path):
    assert scene.table_height == pytest.approx(0.1)
    shapes = {o.id: (o.shape, o.size) for o in scene.objects}
    assert shapes['box_3'][0] == 'box' and shapes['box_3'][1] == pytest.approx((0.08, 0.06, 0.05))
    assert shapes['cyl'][0] == 'cylinder'
    assert select_object(scene).id == 'box_3'               # the first box
    with pytest.raises(SceneError, match='cylinder'):
        select_object(scene, 'cyl')
    with pytest.raises(SceneError, match="'box_9' is not in the scene"):
        select_object(scene, 'box_9')
    with pytest.raises(SceneError, match='does not exist'):
        scene_info_from_mjcf(tmp_path / 'nope.xml')


def test_twin_from_the_scene_with_start_values_and_identified_parameters(robot, scene):
    ps = ParameterSet()
    ps.add(ParameterEstimate('geom/box_3/friction', 0.3, 0.25, 0.35, 0.5, '', True))
    task, twin, inputs = build_task_and_twin(
        robot, 'slide_to_target', scene=scene, parameters=ps,
        start_values={'actuator/elbow_joint/kp': 2000.0, 'geom/other_box/friction': 0.4},
        object_friction_prior=0.6)
    cfg = task.config()
    assert (cfg['object_id'], cfg['table_height']) == ('box_3', pytest.approx(0.1))
    assert cfg['object_size'] == pytest.approx((0.08, 0.06, 0.05))
    m = twin.model
    g = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, 'object/box_3')
    assert m.geom_priority[g] == 1                          # the object's friction rules
    assert twin.get_parameters(['geom/box_3/friction'])['geom/box_3/friction'] == 0.3
    cyl = twin.get_parameters(['geom/cyl/friction'])['geom/cyl/friction']
    assert cyl == pytest.approx(0.6)                        # prior for the unidentified
    assert twin.get_parameters(['actuator/elbow_joint/kp'])['actuator/elbow_joint/kp'] == 2000
    assert inputs.start_values == {'actuator/elbow_joint/kp': 2000.0}   # unknown one skipped
    assert inputs.scene['source'] and inputs.parameter_values == {'geom/box_3/friction': 0.3}
    bad = ParameterSet()
    bad.add(ParameterEstimate('geom/box_0/friction', 0.3, 0.25, 0.35, 0.5, '', True))
    with pytest.raises(ParameterError, match='box_0'):
        build_task_and_twin(robot, 'slide_to_target', scene=scene, parameters=bad)
    with pytest.raises(ParameterError, match='>= 0'):
        build_task_and_twin(robot, 'slide_to_target', scene=scene,
                            parameters={'geom/box_3/friction': -1.0})
    with pytest.raises(TaskError, match='known tasks'):
        build_task_and_twin(robot, 'open_drawer', scene=scene)


def test_default_scene_from_the_task_config(robot):
    task, twin, inputs = build_task_and_twin(robot, 'push_to_pose')
    assert twin.object_ids == ['box_0'] and inputs.scene['source'] == 'task_default'
    # A checkpoint's task config wins over scene geometry.
    task, twin, _ = build_task_and_twin(
        robot, 'slide_to_target', task_config={'task': 'slide_to_target', 'object_id': 'b',
                                               'object_size': [0.07, 0.05, 0.05]})
    assert twin.object_ids == ['b'] and task.cfg.object_size == [0.07, 0.05, 0.05]


def test_the_callers_overrides_reach_the_task_over_the_scene(robot, scene):
    # The harness's start, shape, goals and speed cap (evaluation/goals.py): before, the
    # argument was shadowed and dropped, so a cylinder cell failed at its goals stage.
    over = {'object_shape': 'cylinder', 'start_xy': (0.5, 0.05),
            'distance_range': (0.06, 0.09), 'speed_range': (0.2, 0.7)}
    task, twin, _ = build_task_and_twin(robot, 'slide_to_target', scene=scene,
                                        object_id='cyl', overrides=over)
    assert task.object_id == 'cyl' and task.cfg.object_shape == 'cylinder'
    assert tuple(task.cfg.start_xy) == (0.5, 0.05)
    assert tuple(task.cfg.distance_range) == (0.06, 0.09)
    assert tuple(task.cfg.speed_range) == (0.2, 0.7)
    # ... and over a checkpoint's task config as well.
    task, _, _ = build_task_and_twin(
        robot, 'slide_to_target', task_config={'task': 'slide_to_target', 'object_id': 'b',
                                               'object_size': [0.07, 0.05, 0.05]},
        overrides={'distance_range': (0.06, 0.09)})
    assert tuple(task.cfg.distance_range) == (0.06, 0.09)


def test_parameter_sets_load_from_files_and_stage_folders(tmp_path):
    ps = ParameterSet()
    ps.add(ParameterEstimate('joint/elbow_joint/damping', 0.6, 0.5, 0.7, 0.5, '', True))
    (tmp_path / 'identify_000').mkdir()
    ps.save(tmp_path / 'identify_000' / 'parameters.yaml')
    assert load_parameter_set(tmp_path / 'identify_000').values() == {
        'joint/elbow_joint/damping': 0.6}
    with pytest.raises(ParameterError, match='does not exist'):
        load_parameter_set(tmp_path / 'none.yaml')
    (tmp_path / 'config.yaml').write_text('parameters: [{name: joint/a/damping, prior: 1, '
                                          'lower: 0, upper: 2}]')
    with pytest.raises(ParameterError, match='config.yaml'):
        load_parameter_set(tmp_path / 'config.yaml')


def test_total_steps_scale_the_episode_budget():
    cfg = TrainConfig(demos=80, self_imitation_rounds=3, self_imitation_episodes=40,
                      ppo=PPOConfig(iterations=12, batch_size=32))
    assert training_steps(cfg, True) == 584
    assert budget_config(cfg, 0, True) is cfg
    half = budget_config(cfg, 292, True)
    assert (half.demos, half.self_imitation_episodes, half.ppo.iterations,
            half.ppo.batch_size) == (40, 20, 6, 32)
    assert training_steps(half, True) == 292
    tiny = budget_config(cfg, 10, True)
    assert tiny.demos == 4 and tiny.ppo.iterations == 0     # below a PPO batch: no PPO
    closed = budget_config(cfg, 600, False, steps_per_episode=60)
    assert closed.demos == 10 and training_steps(closed, False, 60) == 600


def test_the_trainers_parameters_make_its_train_config():
    from real2sim2real_ros.core.training_setup import train_config_from
    values = {'demos': 7, 'bc_epochs': 9, 'self_imitation_rounds': 1,
              'self_imitation_episodes': 4, 'ppo_iterations': 2, 'ppo_batch_size': 6,
              'ppo_lr': 0.01, 'randomization_widen': 1.5, 'randomization_min_relative': 0.1,
              'eval_trials': 3, 'seed': 11}
    cfg = train_config_from(values)
    assert (cfg.demos, cfg.bc_epochs, cfg.eval_trials, cfg.seed) == (7, 9, 3, 11)
    assert (cfg.ppo.iterations, cfg.ppo.batch_size, cfg.ppo.lr) == (2, 6, 0.01)
    assert (cfg.randomization_widen, cfg.randomization_min_relative) == (1.5, 0.1)


def test_a_checkpoints_train_manifest_rebuilds_its_twin(tmp_path):
    import json

    from real2sim2real_ros.core.training_setup import trained_twin_inputs, training_manifest
    ckpt = tmp_path / 'train_000' / 'checkpoint'
    ckpt.mkdir(parents=True)
    assert training_manifest(ckpt) is None
    manifest = {'stage': 'train', 'inputs': {'scene': {'mjcf_path': '/s.xml', 'source': 'x',
                                                       'object_friction_prior': 0.4}},
                'parameters': {'start_values': {'a': 1.0}, 'parameter_values': {'b': 2.0},
                               'train_config': {'seed': 5}}}
    (ckpt.parent / 'manifest.json').write_text(json.dumps(manifest))
    rec = trained_twin_inputs(training_manifest(ckpt), seed=0)
    assert rec == {'scene_mjcf': '/s.xml', 'scene_source': 'x', 'friction_prior': 0.4,
                   'start_values': {'a': 1.0}, 'parameter_values': {'b': 2.0}, 'seed': 5}
    (ckpt.parent / 'manifest.json').write_text(json.dumps({**manifest, 'stage': 'identify'}))
    assert training_manifest(ckpt) is None


def test_stack_takes_its_base_from_the_scene(robot, scene, tmp_path):
    """A task with a base (stack) gets the scene's other box as its base (the declared
    base_id where the scene has it, else the first other box), with its extents; a scene
    without one is a SceneError naming what it has; other tasks get nothing."""
    from real2sim2real_ros.core.robot_description import gripper_cell_urdf, load_robot
    assert select_base('pick_and_place', scene, 'box_3') == {}
    with pytest.raises(SceneError, match='stack sets the object on a second box'):
        select_base('stack', scene, 'box_3')
    two = SCENE.replace('</worldbody>', """    <body name="object/box_9" pos="0.4 0.2 0.12">
      <freejoint name="object/box_9"/>
      <geom name="object/box_9" type="box" size="0.035 0.034 0.02" mass="0.3"/>
    </body>
  </worldbody>""")
    (tmp_path / 'two.xml').write_text(two)
    scene2 = scene_info_from_mjcf(tmp_path / 'two.xml')
    assert select_base('stack', scene2, 'box_3') == {
        'base_id': 'box_9', 'base_size': pytest.approx((0.07, 0.068, 0.04))}
    task, twin, _ = build_task_and_twin(load_robot(gripper_cell_urdf()), 'stack', scene=scene2)
    try:
        assert (task.object_id, task.cfg.base_id) == ('box_3', 'box_9')
        assert task.place_lift == pytest.approx(0.04)        # set down on the base's top
    finally:
        twin.close()
