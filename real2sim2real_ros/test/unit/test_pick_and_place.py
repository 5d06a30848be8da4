"""pick_and_place and stack declared in YAML (core/tasks/pick_and_place.py, config/tasks/
pick_and_place.yaml, stack.yaml): the grasp predicates, the scripted expert in the twin
(with its grasp contact recipe) and on both cells, and the errors for a robot without a
gripper or a malformed YAML field."""
import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from real2sim2real_ros.core.cell_spec import load_cell_spec
from real2sim2real_ros.core.robot_description import (
    default_cell_urdf,
    gripper_cell_urdf,
    load_robot,
)
from real2sim2real_ros.core.tasks import TaskError, get_task, load_task_spec
from real2sim2real_ros.core.tasks.spec import tasks_dir
from real2sim2real_ros.core.tasks.worlds import CellWorld, TaskObject, TwinWorld, task_scene_xml
from real2sim2real_ros.core.twin import Twin
from real2sim2real_ros.core.world import make_world

CELLS = Path(__file__).resolve().parents[2] / 'config' / 'cells'


@pytest.fixture(scope='module')
def robot():
    return load_robot(gripper_cell_urdf())


@pytest.fixture(scope='module')
def task(robot):
    return get_task('pick_and_place', robot)


def _state(task, dx=0.0, dz=0.0, up=1.0, jaw=0.04, speed=0.0):
    return {'object_xy': np.array([0.5 + dx, 0.1]), 'goal_xy': np.array([0.5, 0.1]),
            'object_z': task.object_z + dz, 'object_yaw': 0.0, 'object_up_z': up,
            'jaw_position': jaw, 'jaw_open_at': 0.04, 'object_speed': speed}


def test_success_is_the_declared_conjunction(task):
    assert task.success(_state(task, dx=0.049))
    for bad in ({'dx': 0.051}, {'dz': 0.02}, {'up': 0.9}, {'jaw': 0.03}, {'speed': 0.05}):
        assert not task.success(_state(task, **bad)), bad
    assert task.reward(_state(task)) == pytest.approx(1.0)


def test_a_robot_without_a_gripper_and_a_bad_field_are_named(tmp_path):
    with pytest.raises(TaskError, match='no parallel-jaw gripper'):
        get_task('pick_and_place', load_robot(default_cell_urdf()))
    data = yaml.safe_load((tasks_dir() / 'pick_and_place.yaml').read_text())
    data['success'][0] = {'object_in_square': {'half_width': -0.05}}
    bad = tmp_path / 'bad.yaml'
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(TaskError, match=r'bad\.yaml: success\[0\]\.half_width: must be a '
                                        r'number > 0, got -0\.05'):
        load_task_spec(bad)


def _run(task, world, episodes, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(episodes):
        reset = task.sample_reset(rng)
        out.append(task.run_episode(world, reset, task.scripted_demo_policy(reset, rng)))
    return out


def test_the_expert_places_the_box_in_the_twin(robot, task):
    """Measured: 20/20 in the twin, 6.3 mm from the target's centre on average
    (results/grasping/pick_and_place_expert.json)."""
    obj = TaskObject('box_0', task.cfg.object_size)
    world = TwinWorld(Twin(robot, task_scene_xml(obj)), 'box_0')
    results = _run(task, world, 8)
    assert sum(r.success for r in results) >= 7
    assert np.mean([r.final_error for r in results]) < 0.02
    assert all(abs(r.info['jaw_on_box'] - 0.025) < 0.002 for r in results)  # on its faces


@pytest.mark.parametrize('engine,episodes', [('mujoco', 3), ('drake', 1)])
def test_the_expert_places_the_box_on_the_cells(robot, task, engine, episodes):
    data = yaml.safe_load((CELLS / 'gripper.yaml').read_text())
    data['cameras'] = []
    data['engine'] = engine
    data['objects'] = [dict(copy.deepcopy(data['objects'][0]), size=[0.05, 0.05, 0.05])]
    world = make_world(load_cell_spec(data))
    try:
        results = _run(task, CellWorld(world, 'box_0'), episodes)
    finally:
        world.close()
    assert all(r.success for r in results), [(r.final_error, r.info) for r in results]


def test_stack_success_needs_the_box_on_the_base(robot):
    stack = get_task('stack', robot)
    top = stack.object_z + 0.04            # resting on the 4 cm base
    state = dict(_state(stack), object_z=top, goal_z=top)
    assert stack.success(state)
    for bad in ({'object_xy': np.array([0.521, 0.1])}, {'object_z': stack.object_z},
                {'object_up_z': 0.9}, {'jaw_position': 0.02}):
        assert not stack.success({**state, **bad}), bad


def test_the_expert_stacks_in_the_twin_and_on_the_mujoco_cell(robot):
    """Measured: results/grasping/stack_expert.json."""
    stack = get_task('stack', robot)
    objs = [TaskObject(oid, size) for oid, size in stack.scene_objects()]
    twin = TwinWorld(Twin(robot, task_scene_xml(objs[0], others=tuple(objs[1:]))), 'box_0')
    results = _run(stack, twin, 4)
    assert sum(r.success for r in results) >= 3
    assert all(abs(r.info['height_error']) < 0.005 for r in results if r.success)
    data = yaml.safe_load((CELLS / 'gripper.yaml').read_text())
    data['cameras'] = []
    box = data['objects'][0]
    data['objects'] = [dict(box, id=oid, size=list(size), pose={'xyz': [0.75, 0.3 + 0.15 * k],
                                                                  'yaw': 0.0})
                       for k, (oid, size) in enumerate(stack.scene_objects())]
    world = make_world(load_cell_spec(data))
    try:
        results = _run(stack, CellWorld(world, 'box_0'), 2)
    finally:
        world.close()
    assert all(r.success for r in results), [(r.final_error, r.info) for r in results]


class _SeenOff(CellWorld):
    """A cell whose tracker reports the base ``off`` (m, x, y) from where it stands (None:
    not seen)."""

    def __init__(self, *a, off=(0.0, 0.0), **kw):
        super().__init__(*a, **kw)
        self.off = off

    def observed_position(self, object_id):
        if self.off is None:
            return None
        xyz = np.array(self.world.object_poses()[self.others[object_id]][0], float)
        return xyz + [*self.off, 0.0]


def test_stack_plans_from_the_seen_base_and_is_scored_on_the_true_one(robot):
    """config/cells/gripper_stack.yaml: the task's base id ('base', as the twin names it) is
    the cell's box_1. Seen where it stands, the box is stacked; seen 3 cm off, the box is
    set down 3 cm off the base (stack_radius 2 cm): a failure, scored on the base's true
    centre (measured: it tips off, ending 7 cm away); not seen: the episode fails before
    anything moves."""
    stack = get_task('stack', robot, {'object_size': (0.08, 0.06, 0.05), 'base_id': 'base'})
    data = yaml.safe_load((CELLS / 'gripper_stack.yaml').read_text())
    data['cameras'] = []
    world = make_world(load_cell_spec(data))
    reset = stack.sample_reset(np.random.default_rng(3))
    def policy(_obs):
        return np.zeros(4)     # the expert's: grasp the centre, place on the seen goal
    try:
        out = {}
        for off in ((0.0, 0.0), (0.03, 0.0), None):
            cell = _SeenOff(world, 'box_0', others={'base': 'box_1'}, off=off)
            out[off] = (stack.run_episode(cell, reset, policy),
                        cell.scored_position('base'), cell.world.object_poses()['box_0'][0])
    finally:
        world.close()
    ok, base_xyz, box_xyz = out[(0.0, 0.0)]
    assert ok.success, (ok.final_error, ok.info)
    assert np.linalg.norm(base_xyz[:2] - reset.goal_xy) < 0.005    # placed at the goal
    assert abs(box_xyz[2] - (0.04 + 0.025)) < 0.005                 # on its 4 cm top
    off, base_xyz, box_xyz = out[(0.03, 0.0)]
    assert not off.success
    assert np.linalg.norm(box_xyz[:2] - base_xyz[:2]) > 0.02      # set down off the base
    assert out[None][0].info == {'goal_not_seen': True}


def test_a_redundant_arm_turns_its_hand_to_the_box_faces():
    """The Panda's IK leaves the roll about the tool free for pushing; a grasp needs it: with
    the roll free the hand stayed 0.42 rad off this box's faces, and 4 of 20 Drake-cell
    episodes failed (the box stayed behind); with it tracked, the jaw closes across them."""
    from real2sim2real_ros.core.tasks.base import ResetSample
    from real2sim2real_ros.core.tools import resolve_robot_urdf
    panda = load_robot(resolve_robot_urdf('example-robot-data:panda'))
    task = get_task('pick_and_place', panda)
    reset = ResetSample(np.array([0.45, -0.10]), 0.09, np.array([0.45, 0.10]))
    plan = task.plan(reset, np.zeros(4))
    assert abs(plan['turn']) > 0.6                         # a large turn is asked for
    yaw = task.jaw_axis_yaw(plan['descend'][1][-1])
    gap = (yaw - 0.09 + np.pi / 4) % (np.pi / 2) - np.pi / 4
    assert abs(gap) < 0.01


def test_a_long_box_is_held_across_its_narrow_faces(robot):
    """An 8 x 6 cm box (the shipped cells' box) is closed on across its 6 cm, whatever the
    nearest quarter turn: across its 8 cm the 8 cm opening of either jaw barely reaches it
    (measured in the Panda hand's twin: the jaw stopped at 39.5 of its 40 mm, a box held by
    its corners). A box whose extents differ < 5 mm keeps the nearest quarter turn."""
    from real2sim2real_ros.core.tasks.base import ResetSample
    long_box = get_task('pick_and_place', robot, {'object_size': (0.08, 0.06, 0.05)})
    cube = get_task('pick_and_place', robot, {'object_size': (0.05, 0.052, 0.05)})
    for yaw in np.linspace(-1.5, 1.5, 13):
        reset = ResetSample(np.array([0.45, -0.10]), float(yaw), np.array([0.45, 0.10]))
        plan = long_box.plan(reset, np.zeros(4))
        jaw = long_box.jaw_axis_yaw(plan['descend'][1][-1])
        # the jaw travels along the box's y axis (yaw + 90 deg), either way round
        off = (jaw - yaw - np.pi / 2 + np.pi / 2) % np.pi - np.pi / 2
        assert abs(off) < 0.01, (yaw, off)
        assert abs(plan['turn']) <= np.pi / 2 + 1e-9
        turn = cube.plan(reset, np.zeros(4))['turn']
        assert abs(turn) <= np.pi / 4 + 1e-9       # the nearest quarter turn


def _pick_result(task, final_xy, upright=True, released=True, height_error=0.0):
    from real2sim2real_ros.core.tasks.base import EpisodeResult
    return EpisodeResult(False, 0.0, 0.1, np.array([[0.02, 0.18, 0.1]]),
                         np.array([[0.001, -0.002, 0.004, 0.003]]), np.asarray(final_xy),
                         0.0, {'upright': upright, 'released': released,
                               'height_error': height_error})


def test_hindsight_moves_the_target_to_where_the_box_rests(task):
    """A carried, upright, released box teaches where that place offset puts it: the target
    is moved there (observation target - seen start), the action kept; a toppled, held,
    floating or uncarried box teaches nothing (None)."""
    from real2sim2real_ros.core.tasks.base import ResetSample
    reset = ResetSample(np.array([0.45, -0.10]), 0.1, np.array([0.47, 0.08]))
    seen = reset.goal_xy - np.array([0.02, 0.18])
    obs, action = task.hindsight_relabel(reset, _pick_result(task, [0.50, 0.11]))
    np.testing.assert_allclose(obs[:2], np.array([0.50, 0.11]) - seen)
    assert obs[2] == pytest.approx(0.1)
    np.testing.assert_allclose(action, [0.001, -0.002, 0.004, 0.003])
    for bad in ({'upright': False}, {'released': False}, {'height_error': 0.02}):
        assert task.hindsight_relabel(reset, _pick_result(task, [0.50, 0.11], **bad)) is None
    assert task.hindsight_relabel(reset, _pick_result(task, [0.46, -0.09])) is None
    stack = get_task('stack', task.robot)     # the base stands at the goal: successes only
    assert stack.hindsight_relabel(reset, _pick_result(stack, [0.50, 0.11])) is None
    ok = _pick_result(stack, [0.47, 0.08])
    ok.success = True
    obs, action = stack.hindsight_relabel(reset, ok)
    np.testing.assert_allclose(obs, [0.02, 0.18, 0.1])


def test_pick_and_place_trains_in_the_twin(robot, tmp_path):
    """The policy_trainer's one-shot pipeline on pick_and_place: the scripted grasp expert's
    episodes in the twin (jaw and grasp recipe), behaviour cloning, a checkpoint, and the
    policy's own episodes in the twin succeed."""
    from real2sim2real_ros.core.policies.pipeline import TrainConfig, train_policy
    from real2sim2real_ros.core.policies.ppo import PPOConfig
    from real2sim2real_ros.core.training_setup import build_task_and_twin
    task, twin, _ = build_task_and_twin(robot, 'pick_and_place')
    cfg = TrainConfig(demos=6, self_imitation_rounds=0, bc_epochs=200, eval_trials=4,
                      ppo=PPOConfig(iterations=0, batch_size=8), seed=3)
    res = train_policy(task, twin, config=cfg, checkpoint_dir=tmp_path / 'ckpt')
    assert res.demos_kept >= 5                    # hindsight keeps every carried box
    assert res.twin_eval.success_rate >= 0.75
    assert (tmp_path / 'ckpt').is_dir()
    # the expert's mean action is zero offsets: the clone stays within 5 mm of it
    a = res.policy.act(task.observation({'object_xy': np.array([0.45, -0.1]),
                                         'object_yaw': 0.0,
                                         'goal_xy': np.array([0.45, 0.08])}))
    assert np.max(np.abs(a)) < 0.005


def test_gentle_pick_sizes_the_grasp_to_the_weight(robot):
    """gentle_pick_and_place: the closing effort is the action's 5th component, charged for
    in the reward; the weight_sized_grasp expert closes with margin x m (g + a) / (2 mu).
    In the twin a 0.9 kg box held with the effort sized for the prior's 0.2 kg (6.4 N) slips
    out of the jaw, with the effort sized for 0.9 kg (28.8 N) it is placed (the grip that
    holds, results/grasping/grip_thresholds.json: twin 8-12 N, MuJoCo cell 15-18 N, Drake
    cell 15-18 N for 0.9 kg; 2-3, 3-4 and 3-4 N for 0.21 kg)."""
    from real2sim2real_ros.core.tasks.base import ResetSample
    size = (0.08, 0.06, 0.05)
    light = get_task('gentle_pick_and_place', robot, {'object_size': size})
    heavy = get_task('gentle_pick_and_place', robot, {'object_size': size, 'demo_mass': 0.9})
    assert light.action_dim == 5 and list(light.action_high[4:]) == [30.0]
    a = light.lift_acceleration()
    assert a == pytest.approx(5.7735 * 0.25 ** 2 / (1.875 ** 2 * 0.12))
    rng = np.random.default_rng(0)
    e_light = light.scripted_demo_policy(None, rng)(np.zeros(3))[4]
    e_heavy = heavy.scripted_demo_policy(None, rng)(np.zeros(3))[4]
    assert e_light == pytest.approx(3.0 * 0.2 * (9.81 + a) / (2 * 0.5))
    assert e_heavy == pytest.approx(3.0 * 0.9 * (9.81 + a) / (2 * 0.5))
    world = TwinWorld(Twin(robot, task_scene_xml(TaskObject('box_0', size, 0.9, 0.55))),
                      'box_0')
    reset = ResetSample(np.array([0.45, -0.10]), 0.1, np.array([0.44, 0.09]))
    drop = light.run_episode(world, reset, lambda o: np.array([0, 0, 0, 0, e_light]))
    hold = light.run_episode(world, reset, lambda o: np.array([0, 0, 0, 0, e_heavy]))
    assert not drop.success and drop.final_error > 0.15     # left where it stood
    assert hold.success and hold.final_error < 0.01
    # the squeeze is charged: 28.8 N costs 0.72 of the success bonus (effort_scale 40 N)
    assert hold.reward == pytest.approx(1.0 - hold.final_error / 0.05 - e_heavy / 40.0)


def test_the_harness_maps_the_stack_base_through_the_reconstruction():
    """evaluation/harness.base_overrides: the cell's base (HarnessConfig.base_id) as found by
    the reconstruction becomes the task's base (its id and extents); not found, or not a
    box: the cell's reason; a task without a base: nothing."""
    from types import SimpleNamespace as NS

    from real2sim2real_ros.core.evaluation.harness import HarnessConfig, base_overrides
    from real2sim2real_ros.core.evaluation.reasons import CellEnded
    found = {'box_0': NS(id='box_0', shape='box', extents=np.array([0.08, 0.06, 0.05])),
             'box_7': NS(id='box_7', shape='box', extents=np.array([0.071, 0.069, 0.041]))}
    recon = {'_by_truth': {'box_0': NS(found_id='box_0'), 'box_1': NS(found_id='box_7')},
             '_found': found}
    over = {}
    assert base_overrides(HarnessConfig(task='stack'), recon, over) == {'box_7': 'box_1'}
    assert over == {'base_id': 'box_7', 'base_size': pytest.approx((0.071, 0.069, 0.041))}
    over = {}
    assert base_overrides(HarnessConfig(task='pick_and_place'), recon, over) == {}
    assert over == {}
    with pytest.raises(CellEnded, match="did not find the base 'box_2'") as err:
        base_overrides(HarnessConfig(task='stack', base_id='box_2'), recon, {})
    assert err.value.code == 'OBJECT_NOT_FOUND'
    found['box_7'].shape = 'cylinder'
    with pytest.raises(CellEnded, match='reconstructed as a cylinder') as err:
        base_overrides(HarnessConfig(task='stack'), recon, {})
    assert err.value.code == 'UNSUPPORTED_OBJECT'
