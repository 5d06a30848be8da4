"""Tasks declared in YAML (core/tasks/spec.py, predicates.py, config/tasks/*.yaml).

The two pushing tasks' YAML rewrite must not change them: the LEGACY_* functions below are
the classes' success, reward and sample_reset as they were before the rewrite (copied
verbatim); the declared ones must equal them exactly on seeded states that crowd the success
radius, the yaw tolerance, the rest height and the tilt limit, and draw the same resets."""
import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from real2sim2real_ros.core.geometry import wrap_angle
from real2sim2real_ros.core.tasks import TaskError, get_task, load_task_spec, task_names
from real2sim2real_ros.core.tasks import predicates as P
from real2sim2real_ros.core.tasks.push_to_pose import PushConfig
from real2sim2real_ros.core.tasks.slide_to_target import SlideConfig
from real2sim2real_ros.core.tasks.spec import shipped_spec, tasks_dir

TASKS_DIR = Path(__file__).resolve().parents[2] / 'config' / 'tasks'


# ------------------------------------------------------------------ the old classes' code
def legacy_slide_success(c: SlideConfig, s):
    z0 = c.table_height + c.object_size[2] / 2
    upright = bool(abs(s['object_z'] - z0) < 0.01 and s.get('object_up_z', 1.0) > 0.95)
    err = float(np.linalg.norm(np.asarray(s['object_xy']) - s['goal_xy']))
    return bool(upright and err <= c.success_radius)


def legacy_slide_reward(c, s):
    err = float(np.linalg.norm(np.asarray(s['object_xy']) - s['goal_xy']))
    return float(legacy_slide_success(c, s)) - err / 0.1


def legacy_slide_reset(c, rng):
    xy = np.asarray(c.start_xy) + rng.uniform(-c.start_jitter, c.start_jitter, 2)
    heading = rng.uniform(*c.heading_range)
    dist = rng.uniform(*c.distance_range)
    goal = xy + dist * np.array([np.cos(heading), np.sin(heading)])
    yaw = wrap_angle(heading + rng.uniform(-c.yaw_jitter, c.yaw_jitter))
    return xy, yaw, goal, 0.0, {}


def legacy_push_success(c: PushConfig, s):
    z0 = c.table_height + c.object_size[2] / 2
    upright = abs(s['object_z'] - z0) < 0.01
    err = float(np.linalg.norm(np.asarray(s['object_xy']) - s['goal_xy']))
    yaw_err = abs(wrap_angle(s['object_yaw'] - s['goal_yaw']))
    return bool(upright and err <= c.position_tolerance and yaw_err <= c.yaw_tolerance)


def legacy_push_reward(c, s):
    err = float(np.linalg.norm(np.asarray(s['object_xy']) - s['goal_xy']))
    yaw_err = abs(wrap_angle(s['object_yaw'] - s['goal_yaw']))
    return float(legacy_push_success(c, s)) - err / 0.1 - 0.1 * yaw_err


def legacy_push_reset(c, rng):
    xy = np.asarray(c.start_xy) + rng.uniform(-c.start_jitter, c.start_jitter, 2)
    yaw = rng.uniform(-c.start_yaw_jitter, c.start_yaw_jitter)
    goal = xy + np.array([rng.uniform(*c.goal_forward),
                          rng.uniform(-c.goal_lateral, c.goal_lateral)])
    goal_yaw = wrap_angle(yaw + rng.uniform(-c.goal_yaw_change, c.goal_yaw_change))
    kick = rng.random() < c.kick_probability
    ang = rng.uniform(0, 2 * np.pi)
    tip = xy - [c.tip_start_behind, 0.0] + rng.uniform(-c.tip_start_jitter,
                                                       c.tip_start_jitter, 2)
    extra = {'kick_step': int(rng.integers(*c.kick_steps)) if kick else -1,
             'kick_velocity': (c.kick_speed * np.array([np.cos(ang), np.sin(ang)])).tolist(),
             'tip_start_xy': tip.tolist()}
    return xy, yaw, goal, goal_yaw, extra


LEGACY = {'slide_to_target': (SlideConfig, legacy_slide_success, legacy_slide_reward,
                              legacy_slide_reset),
          'push_to_pose': (PushConfig, legacy_push_success, legacy_push_reward,
                           legacy_push_reset)}


def edge_states(c, rng, n=400):
    """States whose distance, yaw gap, height and tilt sit near (and exactly at) the limits."""
    radius = getattr(c, 'success_radius', getattr(c, 'position_tolerance', 0.03))
    ytol = getattr(c, 'yaw_tolerance', 0.25)
    z0 = c.table_height + c.object_size[2] / 2
    out = []
    for k in range(n):
        goal = np.array([0.55, 0.05]) + rng.uniform(-0.05, 0.05, 2)
        d = radius * (1 + rng.choice([0.0, 1e-9, -1e-9, 1e-3, -1e-3, 0.5, -0.5, 2.0]))
        ang = rng.uniform(-np.pi, np.pi)
        goal_yaw = rng.uniform(-np.pi, np.pi)
        dyaw = ytol * (1 + rng.choice([0.0, 1e-9, -1e-9, 0.01, -0.01, -0.9, 3.0])) \
            * rng.choice([-1, 1])
        s = {'object_xy': goal + d * np.array([np.cos(ang), np.sin(ang)]),
             'goal_xy': goal, 'object_yaw': wrap_angle(goal_yaw + dyaw),
             'goal_yaw': goal_yaw,
             'object_z': z0 + rng.choice([0.0, 0.0099, -0.0099, 0.01, 0.0101, 0.3, -1.0])}
        if k % 3:
            s['object_up_z'] = float(rng.choice([1.0, 0.95, 0.9500001, 0.9499999, 0.0]))
        out.append(s)
    return out


@pytest.mark.parametrize('name', ['slide_to_target', 'push_to_pose'])
@pytest.mark.parametrize('overrides', [{}, {'success_radius': 0.07, 'position_tolerance':
                                            0.05, 'yaw_tolerance': 0.4, 'table_height': 0.02}])
def test_declared_success_and_reward_equal_the_old_classes(robot, name, overrides):
    cfg_cls, success, reward, _ = LEGACY[name]
    fields = cfg_cls.__dataclass_fields__
    over = {k: v for k, v in overrides.items() if k in fields}
    task = get_task(name, robot, over)
    c = cfg_cls(**over)
    assert task.cfg == c          # the YAML's config values are the old defaults
    states = edge_states(c, np.random.default_rng(19))
    got = [(task.success(s), task.reward(s)) for s in states]
    want = [(success(c, s), reward(c, s)) for s in states]
    assert got == want
    n_ok = sum(ok for ok, _ in want)
    assert 20 < n_ok < len(states) - 20, n_ok    # both outcomes are exercised


@pytest.mark.parametrize('name', ['slide_to_target', 'push_to_pose'])
def test_sample_reset_draws_the_old_samples(robot, name):
    cfg_cls, _, _, reset = LEGACY[name]
    task = get_task(name, robot, {'start_jitter': 0.025} if name == 'push_to_pose' else {})
    c = task.cfg
    a, b = np.random.default_rng(7), np.random.default_rng(7)
    for _ in range(50):
        got = task.sample_reset(a)
        xy, yaw, goal, goal_yaw, extra = reset(c, b)
        np.testing.assert_array_equal(got.object_xy, xy)
        np.testing.assert_array_equal(got.goal_xy, goal)
        assert (got.object_yaw, got.goal_yaw, got.extra) == (yaw, goal_yaw, extra)


def test_the_shipped_tasks_are_the_yaml_files(robot):
    assert task_names() == ['gentle_pick_and_place', 'pick_and_place', 'push_to_pose',
                            'slide_to_target', 'stack']
    assert tasks_dir() == TASKS_DIR
    path = TASKS_DIR / 'push_to_pose.yaml'
    by_path = get_task(str(path), robot, {'max_steps': 7})
    assert by_path.name == 'push_to_pose' and by_path.horizon == 7
    assert get_task('push_to_pose', robot).horizon == 60
    assert get_task('slide_to_target', robot).horizon == 1
    assert shipped_spec('slide_to_target').object == {'shape': 'box', 'index': 0, 'id': 'box_0'}
    scene = [('table_leg', 'cylinder'), ('b', 'box'), ('c', 'box')]
    assert shipped_spec('slide_to_target').match_object(scene) == 'b'


def test_the_expert_params_come_from_the_spec(robot):
    spec = yaml.safe_load((TASKS_DIR / 'slide_to_target.yaml').read_text())
    spec['expert']['params'] = {'friction': 0.2, 'spread': 0.0}
    low = get_task(load_task_spec(spec), robot)
    spec['expert']['params']['friction'] = 0.8
    high = get_task(load_task_spec(spec), robot)
    reset = low.sample_reset(np.random.default_rng(0))
    obs = low.observation(low.initial_state(reset))
    v_low = low.scripted_demo_policy(reset, np.random.default_rng(1))(obs)[0]
    v_high = high.scripted_demo_policy(reset, np.random.default_rng(1))(obs)[0]
    assert v_high == pytest.approx(v_low * 2.0)     # sqrt(0.8 / 0.2)


# ------------------------------------------------------------------ malformed YAML
def _edit(path, value):
    def f(d):
        node = d
        for k in path[:-1]:
            node = node[k]
        if value is KeyError:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return f


BAD = [
    (_edit(['success', 1, 'object_within', 'radius'], -0.1),
     'success[1].radius: must be a number > 0, got -0.1'),
    (_edit(['success', 0], {'on_the_moon': {}}), "success[0]: unknown predicate 'on_the_moon'"),
    (_edit(['success', 0, 'upright', 'tilt'], 0.3), 'success[0].upright.tilt: unknown key'),
    (_edit(['expert', 'name'], 'oracle'), "expert.name: unknown expert 'oracle'"),
    (_edit(['expert', 'params'], {'friction': 0.5}), 'expert.params.spread: missing'),
    (_edit(['config', 'success_radius'], 'wide'),
     "config.success_radius: must be like 0.03, got 'wide'"),
    (_edit(['config', 'start_xy'], [0.5]), 'config.start_xy: must be like (0.48, 0.1)'),
    (_edit(['config', 'colour'], 'red'), 'config.colour: unknown field of slide_to_target'),
    (_edit(['gaol'], {}), 'gaol: unknown key'),
    (_edit(['horizon'], 0), 'horizon: must be an integer >= 1'),
    (_edit(['horizon'], KeyError), 'horizon: missing'),
    (_edit(['task'], 'juggle'), "task: unknown task kind 'juggle'"),
    (_edit(['goal', 'polar', 'distance'], [0.2, 0.1]), 'goal.polar.distance: must have lo <= hi'),
    (_edit(['start', 'yaw', 'about'], 'north'), "start.yaw.about: must be 'zero' or"),
    (_edit(['object', 'index'], -1), 'object.index: must be an integer >= 0'),
    (_edit(['success', 1, 'object_within', 'radius'], 'config.no_such'),
     "success[1].radius: 'config.no_such' names no field"),
    (_edit(['reward', 'distance_scale'], 0), 'reward.distance_scale: must be > 0, got 0'),
    (_edit(['success'], []), 'success: must be a non-empty list'),
]


@pytest.mark.parametrize('edit, message', BAD, ids=[m.split(':')[0] for _, m in BAD])
def test_a_malformed_task_yaml_gets_one_line_naming_the_field(tmp_path, edit, message):
    data = yaml.safe_load((TASKS_DIR / 'slide_to_target.yaml').read_text())
    edit(data)
    path = tmp_path / 'x.yaml'
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(TaskError) as err:
        load_task_spec(path)
    text = str(err.value)
    assert '\n' not in text
    assert text.startswith(f'{path}: ') and message in text, text


def test_a_reference_resolving_to_a_bad_value_names_the_field(robot):
    data = yaml.safe_load((TASKS_DIR / 'push_to_pose.yaml').read_text())
    data['success'][2]['yaw_within']['tolerance'] = 'config.table_height'   # 0.0
    with pytest.raises(TaskError, match=r'<dict>: success\[2\]\.tolerance: must be a '
                                        r'number > 0, got 0.0'):
        get_task(load_task_spec(data), robot)
    with pytest.raises(TaskError, match="unknown task 'open_drawer'"):
        get_task('open_drawer', robot)
    with pytest.raises(TaskError, match='nope.yaml: cannot read'):
        get_task('nope.yaml', robot)


# ------------------------------------------------------------------ predicates
def test_predicates_are_functions_of_the_state():
    ctx = {'rest_z': 0.025}
    s = {'object_xy': [0.5, 0.0], 'goal_xy': [0.5, 0.03], 'object_z': 0.025,
         'object_yaw': 0.2, 'goal_yaw': -0.05, 'object_up_z': 0.96, 'object_speed': 0.004,
         'joint_positions': [0.1, 1.2], 'robot_contacts': 0, 'held_steps': 4}
    assert P.object_within(s, {'radius': 0.03}, ctx)
    assert not P.object_within(s, {'radius': 0.0299}, ctx)
    assert P.upright(s, {'height_tolerance': 0.01, 'min_up_z': 0.95}, ctx)
    assert not P.upright(s, {'height_tolerance': 0.01, 'min_up_z': 0.97}, ctx)
    assert not P.upright({**s, 'object_z': 0.04}, {'height_tolerance': 0.01,
                                                   'min_up_z': None}, ctx)
    assert P.yaw_within(s, {'tolerance': 0.25}, ctx)
    assert not P.yaw_within(s, {'tolerance': 0.249}, ctx)
    assert P.at_rest(s, {'speed': 0.005}, ctx) and not P.at_rest(s, {'speed': 0.004}, ctx)
    assert P.held_for(s, {'steps': 4}, ctx) and not P.held_for(s, {'steps': 5}, ctx)
    assert P.joint_past(s, {'joint': 1, 'threshold': 1.0, 'direction': 'above'}, ctx)
    assert not P.joint_past(s, {'joint': 1, 'threshold': 1.0, 'direction': 'below'}, ctx)
    assert P.no_robot_contact(s, {}, ctx)
    assert not P.no_robot_contact({**s, 'robot_contacts': 2}, {}, ctx)
    with pytest.raises(TaskError, match="'at_rest' needs state\\['object_speed'\\]"):
        P.at_rest({k: v for k, v in s.items() if k != 'object_speed'}, {'speed': 1.0}, ctx)


def test_a_spec_can_declare_the_other_predicates(robot):
    data = copy.deepcopy(yaml.safe_load((TASKS_DIR / 'push_to_pose.yaml').read_text()))
    data['success'] += ['no_robot_contact', {'at_rest': {'speed': 0.01}},
                        {'held_for': {'steps': 3}},
                        {'joint_past': {'joint': 0, 'threshold': -3.0}}]
    task = get_task(load_task_spec(data), robot)
    s = {'object_xy': [0.5, 0.0], 'goal_xy': [0.5, 0.0], 'object_z': task.object_z,
         'object_yaw': 0.0, 'goal_yaw': 0.0, 'robot_contacts': 0, 'object_speed': 0.0,
         'held_steps': 3, 'joint_positions': [0.0] * 6}
    assert task.success(s)
    assert not task.success({**s, 'held_steps': 2})
    assert not task.success({**s, 'robot_contacts': 1})


def test_training_picks_the_object_the_yaml_declares():
    from real2sim2real_ros.core.training_setup import SceneInfo, SceneObject, declared_object
    objs = [SceneObject('cyl', 'cylinder', (0.06, 0.06, 0.08)),
            SceneObject('b_far', 'box', (0.08, 0.06, 0.05)),
            SceneObject('b_near', 'box', (0.08, 0.06, 0.05))]
    assert declared_object('push_to_pose', SceneInfo('s.xml', 0.0, objs)) == 'b_far'
    assert declared_object('push_to_pose', SceneInfo('s.xml', 0.0, objs[:1])) == ''
