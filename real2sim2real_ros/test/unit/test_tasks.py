"""Task plug-ins: registry, tool-down IK, slide_to_target physics, push_to_pose closed loop."""
import copy

import numpy as np
import pytest
import torch
import yaml

from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
from real2sim2real_ros.core.emulated_world import EmulatedWorld
from real2sim2real_ros.core.tasks import TaskError, get_task, task_names
from real2sim2real_ros.core.tasks.base import ResetSample
from real2sim2real_ros.core.tasks.kinematics import IKError, ToolDownIK
from real2sim2real_ros.core.tasks.worlds import (
    CellWorld,
    TaskObject,
    TwinWorld,
    applied_parameters,
    set_twin_parameters,
    task_scene_xml,
)
from real2sim2real_ros.core.twin import Twin

torch.set_num_threads(1)
BOX = (0.08, 0.06, 0.05)


@pytest.fixture(scope='module')
def push(robot):
    return get_task('push_to_pose', robot)


@pytest.fixture(scope='module')
def twin(robot):
    return Twin(robot, task_scene_xml(TaskObject('box_0', BOX, mass=0.2, friction=0.5)))


def cell_spec(friction, mass):
    data = yaml.safe_load(open(default_cell_spec_path()))
    data = copy.deepcopy(data)
    data['objects'][0]['friction'] = [friction, 0.005, 0.0001]
    data['objects'][0]['mass'] = mass
    return load_cell_spec(data)


def straight_reset(distance=0.14):
    xy = np.array([0.48, 0.10])
    return ResetSample(xy, 0.0, xy + [distance, 0.0])


# ------------------------------------------------------------------------ registry, IK
def test_registry_builds_both_tasks_and_names_unknown_ones(robot, slide, push):
    assert task_names() == ['gentle_pick_and_place', 'pick_and_place', 'push_to_pose',
                            'slide_to_target', 'stack']
    assert slide.name == 'slide_to_target' and push.name == 'push_to_pose'
    with pytest.raises(TaskError, match="unknown task 'open_drawer'.*push_to_pose"):
        get_task('open_drawer', robot)
    with pytest.raises(TaskError, match='slide_to_target config'):
        get_task('slide_to_target', robot, {'no_such_field': 1})
    with pytest.raises(TaskError, match='speed_range'):
        get_task('slide_to_target', robot, {'speed_range': (1.0, 0.5)})


def test_tool_down_ik_reaches_targets_with_the_tool_pointing_down(robot):
    ik = ToolDownIK(robot)
    for target in ([0.40, 0.10, 0.012], [0.70, -0.20, 0.05], [0.55, 0.25, 0.10]):
        q = ik.solve(target)
        pos, rot = ik.fk(q)
        np.testing.assert_allclose(pos, target, atol=2e-4)
        assert rot[:, 2] @ [0, 0, -1] > 0.9999          # tool axis straight down
    with pytest.raises(IKError, match='did not reach'):
        ik.solve([2.0, 0.0, 0.0])


# ------------------------------------------------------------------------ slide_to_target
def test_slide_rejects_bad_actions_and_clips_to_the_action_box(slide):
    reset = straight_reset()
    with pytest.raises(TaskError, match='2 finite numbers'):
        slide.plan(reset, [1.0])
    with pytest.raises(TaskError, match='finite'):
        slide.plan(reset, [np.nan, 0.0])
    plan = slide.plan(reset, [50.0, 0.0])       # clipped to the top speed
    tips = np.array([slide.ik.tip_position(q) for q in plan['positions']])
    speed = np.linalg.norm(np.diff(tips, axis=0), axis=1) / np.diff(plan['times'])
    # ... and slowed to the joints' velocity limits (the executor refuses the 1.8 m/s
    # strike's reference: test_wide_cells), by the plan's time scale exactly.
    assert plan['time_scale'] > 1.2
    assert speed.max() == pytest.approx(slide.cfg.speed_range[1] / plan['time_scale'],
                                        rel=0.05)


def test_strike_plan_runs_along_the_line_to_the_target_at_the_commanded_speed(slide):
    reset = ResetSample(np.array([0.50, 0.05]), 0.3, np.array([0.62, 0.12]))
    plan = slide.plan(reset, [0.9, 0.0])
    tips = np.array([slide.ik.tip_position(q) for q in plan['positions']])
    u = (reset.goal_xy - reset.object_xy) / np.linalg.norm(reset.goal_xy - reset.object_xy)
    lateral = (tips[:, :2] - reset.object_xy) @ np.array([-u[1], u[0]])
    assert np.abs(lateral).max() < 1e-3                 # a straight line through the box
    assert np.allclose(tips[:, 2], slide.cfg.strike_height, atol=1e-3)
    speed = np.linalg.norm(np.diff(tips, axis=0), axis=1) / np.diff(plan['times'])
    assert speed.max() == pytest.approx(0.9, rel=0.05)
    start = slide.ik.tip_position(plan['q_start'])[:2]
    behind = (reset.object_xy - start) @ u               # starts behind the box, clear of it
    c = slide.cfg
    assert behind > c.object_size[1] / 2 + c.tool_radius + 0.5 * c.approach_gap
    above = slide.ik.tip_position(plan['q_above'])        # the approach comes down onto it
    assert above[:2] == pytest.approx(start, abs=1e-3)
    assert above[2] == pytest.approx(c.strike_height + c.approach_height, abs=1e-3)


def test_slide_distance_grows_with_speed_and_falls_with_friction(slide, twin):
    reset = straight_reset()
    d = {}
    for mu in (0.25, 0.7):
        for v in (0.6, 1.0):
            st = slide.twin_outcomes(twin, reset, [v, 0.0], [{'geom/box_0/friction': mu}])[0]
            d[mu, v] = st['object_xy'][0] - reset.object_xy[0]
            assert abs(st['object_xy'][1] - 0.10) < 0.01        # straight along the line
    assert d[0.25, 1.0] > 1.3 * d[0.25, 0.6] and d[0.7, 1.0] > 1.3 * d[0.7, 0.6]
    # Coulomb sliding: distance ~ 1 / mu once the box leaves the tool.
    assert d[0.25, 1.0] > 2.0 * d[0.7, 1.0]
    # applied_parameters restored the twin.
    assert twin.get_parameter('geom/box_0/friction') == pytest.approx(0.5)


def test_mass_set_as_a_parameter_behaves_like_a_compiled_mass(robot, slide):
    """Regression: Twin.set_parameters leaves dof_M0 stale; a 3x heavier box then blew up."""
    reset = straight_reset()
    compiled = Twin(robot, task_scene_xml(TaskObject('box_0', BOX, mass=0.6)))
    light = Twin(robot, task_scene_xml(TaskObject('box_0', BOX, mass=0.2)))
    a = slide.twin_outcomes(compiled, reset, [1.0, 0.0])[0]
    b = slide.twin_outcomes(light, reset, [1.0, 0.0], [{'body/box_0/mass': 0.6}])[0]
    assert np.linalg.norm(a['object_xy'] - b['object_xy']) < 2e-3
    set_twin_parameters(light, {'body/box_0/mass': 0.6})
    c = slide.twin_outcomes(light, reset, [1.0, 0.0])[0]
    assert np.linalg.norm(a['object_xy'] - c['object_xy']) < 2e-3
    with applied_parameters(light, {'body/box_0/mass': 0.3}):
        assert light.get_parameter('body/box_0/mass') == pytest.approx(0.3)
    assert light.get_parameter('body/box_0/mass') == pytest.approx(0.6)


def test_slide_episode_twin_world_matches_batched_rollout_and_scores(slide, twin):
    reset = straight_reset(0.14)
    world = TwinWorld(twin, 'box_0')
    res = slide.run_episode(world, reset, lambda obs: np.array([0.95, 0.0]))
    fast = slide.twin_outcomes(twin, reset, [0.95, 0.0])[0]
    assert np.linalg.norm(res.final_object_xy - fast['object_xy']) < 5e-3
    assert res.final_error == pytest.approx(np.linalg.norm(res.final_object_xy - reset.goal_xy))
    assert res.success == (res.final_error <= slide.cfg.success_radius)
    assert res.observations.shape == (1, 3) and res.observations[0, 0] == pytest.approx(0.14)


def test_slide_on_the_emulated_cell_and_friction_decides_the_outcome(slide):
    """Same strike, two cells: the slippery box slides much further (the identification gap)."""
    reset = straight_reset()
    moved = {}
    for mu in (0.25, 0.75):
        world = CellWorld(EmulatedWorld(cell_spec(mu, 0.2)), 'box_0')
        res = slide.run_episode(world, reset, lambda obs: np.array([0.8, 0.0]))
        moved[mu] = res.final_object_xy[0] - reset.object_xy[0]
        assert res.final_object_xy[0] > reset.object_xy[0] + slide.cfg.push_length
    # Beyond the push, the free slide goes as 1 / mu.
    push = slide.cfg.push_length
    assert moved[0.25] - push > 2.0 * (moved[0.75] - push)


def test_hindsight_relabel_gives_the_goal_the_strike_reached(slide, twin):
    reset = straight_reset(0.14)
    res = slide.run_episode(TwinWorld(twin, 'box_0'), reset, lambda obs: np.array([0.7, 0.05]))
    obs, action = slide.hindsight_relabel(reset, res)
    assert obs[0] == pytest.approx(np.linalg.norm(res.final_object_xy - reset.object_xy))
    assert action[0] == pytest.approx(0.7)
    # Replaying the relabelled action at the relabelled goal is a hit.
    relabelled = ResetSample(reset.object_xy, reset.object_yaw, res.final_object_xy.copy())
    again = slide.run_episode(TwinWorld(twin, 'box_0'), relabelled, lambda o: action)
    assert again.success and again.final_error < 0.01


# ------------------------------------------------------------------------ push_to_pose
def test_push_reset_distribution_and_observation(push):
    rng = np.random.default_rng(3)
    resets = [push.sample_reset(rng) for _ in range(50)]
    dist = [np.linalg.norm(r.goal_xy - r.object_xy) for r in resets]
    assert 0.08 <= min(dist) and max(dist) <= np.hypot(0.15, 0.05) + 1e-9
    assert np.std([r.object_yaw for r in resets]) > 0.1
    # The goal yaw reaches beyond the tolerance: a box that keeps its start yaw fails some.
    yaw_change = [abs(r.goal_yaw - r.object_yaw) for r in resets]
    assert max(yaw_change) > push.cfg.yaw_tolerance
    lo, hi = push.cfg.kick_steps
    assert all(lo <= r.extra['kick_step'] < hi for r in resets)      # mid-push
    tips = np.array([r.extra['tip_start_xy'] for r in resets])
    behind = np.array([r.object_xy for r in resets])[:, 0] - tips[:, 0]
    assert np.all(np.abs(behind - 0.09) <= push.cfg.tip_start_jitter + 1e-12)
    assert np.std(behind) > 0.003                                      # perturbed tool start
    state = {'object_xy': np.array([0.5, 0.0]), 'object_yaw': 0.2, 'object_z': 0.025,
             'goal_xy': np.array([0.52, 0.0]), 'goal_yaw': 0.0,
             'tip_xy': np.array([0.45, 0.01])}
    c, s = np.cos(0.2), np.sin(0.2)
    np.testing.assert_allclose(push.observation(state),
                               [-0.02, 0, s, c, -0.05, 0.01, s, c,      # world frame
                                -0.02 * c, 0.02 * s,                   # box - goal, box frame
                                -0.05 * c + 0.01 * s, 0.05 * s + 0.01 * c], atol=1e-12)
    assert push.observation_dim == 12
    assert push.success(state)
    assert not push.success({**state, 'object_yaw': 0.3})
    assert not push.success({**state, 'goal_xy': np.array([0.54, 0.0])})
    assert not push.success({**state, 'object_z': 0.2})


def test_push_scripted_demonstrator_succeeds_in_the_twin_despite_kicks(push, twin):
    rng = np.random.default_rng(0)
    world = TwinWorld(twin, 'box_0')
    results = []
    for _ in range(6):
        reset = push.sample_reset(rng)
        results.append(push.run_episode(world, reset, push.scripted_demo_policy(reset, rng)))
    assert sum(r.success for r in results) >= 5
    for r in results:
        assert r.observations.shape == (r.info['steps'], push.observation_dim)
        assert np.all(np.abs(r.actions) <= push.cfg.max_speed + 1e-12)
        assert len(r.info['rewards']) == r.info['steps'] and r.info['kicked']
        if r.success:   # position AND yaw
            assert r.final_error <= push.cfg.position_tolerance
            assert r.info['yaw_error'] <= push.cfg.yaw_tolerance


def test_push_expert_steers_the_yaw_and_is_a_function_of_the_observation(push, twin):
    """The expert turns the box to the goal yaw (a push at a lateral offset), and labels any
    observation the same way (DAgger relies on it)."""
    xy = np.array([0.48, 0.05])
    reset = ResetSample(xy, 0.0, xy + [0.12, 0.0], 0.3, {'kick_step': -1})
    res = push.run_episode(TwinWorld(twin, 'box_0'), reset,
                           lambda o: push.expert_action(o))
    assert res.success and abs(res.final_object_yaw - 0.3) < push.cfg.yaw_tolerance
    assert res.final_object_yaw > 0.1                      # it turned the box, not luck
    obs = res.observations[len(res.observations) // 2]
    np.testing.assert_array_equal(push.expert_action(obs), push.expert_action(obs.copy()))


def test_push_kick_moves_the_box_and_bad_actions_are_rejected(push, twin):
    reset = push.sample_reset(np.random.default_rng(1))
    reset.extra.update(kick_step=2, kick_velocity=[0.0, 0.3])
    res = push.run_episode(TwinWorld(twin, 'box_0'), reset, lambda obs: np.zeros(2))
    # A 0.3 m/s kick slides the box v^2 / (2 mu g) = 9 mm at mu = 0.5; without it, nothing.
    assert 0.006 < res.final_object_xy[1] - reset.object_xy[1] < 0.015
    assert res.info['steps'] == push.cfg.max_steps and not res.success
    reset.extra.update(kick_step=-1)
    still = push.run_episode(TwinWorld(twin, 'box_0'), reset, lambda obs: np.zeros(2))
    assert np.linalg.norm(still.final_object_xy - reset.object_xy) < 1e-3
    with pytest.raises(TaskError, match='2 finite numbers'):
        push.run_episode(TwinWorld(twin, 'box_0'), reset, lambda obs: np.zeros(3))


@pytest.mark.parametrize('size, shape, period', [((0.08, 0.06, 0.05), 'box', np.pi),
                                                 ((0.07, 0.0705, 0.05), 'box', np.pi / 2),
                                                 ((0.06, 0.06, 0.08), 'cylinder', None)])
def test_slide_observes_the_yaw_a_tracker_can_know(robot, size, shape, period):
    """A depth tracker reports a box's yaw modulo its outline's symmetry (pi; pi/2 for a square
    footprint) and no yaw for a cylinder: the observation is the same for every yaw the tracker
    may report, and for a box the training range (yaw within +-0.15 rad of the heading) is
    observed as it is. (With the raw yaw, a wide-prior cell's box struck with its heading
    beyond +-pi/2 was observed pi off: 0/10 with the tracker, 10/10 with the true pose.)"""
    task = get_task('slide_to_target', robot, {'object_size': list(size), 'object_shape': shape})
    xy, goal = np.array([0.45, 0.05]), np.array([0.33, 0.02])
    heading = float(np.arctan2(*(goal - xy)[::-1]))
    assert abs(heading) > np.pi / 2                  # a strike back towards the base
    for jitter in (-0.15, 0.0, 0.1):
        base = task.observation({'object_xy': xy, 'goal_xy': goal,
                                 'object_yaw': heading + jitter})
        assert base[0] == pytest.approx(np.linalg.norm(goal - xy))
        assert base[1] == pytest.approx(heading)
        assert base[2] == pytest.approx(0.0 if period is None else jitter, abs=1e-12)
        for turns in (1, 2, -1, 3):
            turned = heading + jitter + turns * (period or 0.77)
            obs = task.observation({'object_xy': xy, 'goal_xy': goal, 'object_yaw': turned})
            np.testing.assert_allclose(obs, base, atol=1e-9)


def test_an_episode_is_one_placement_when_reconstruction_turned_the_box_axes(robot):
    """A box 56 mm along its own x and 82 mm along y: reconstruction names the long side x, so
    the twin's frame is the cell's turned by 90 degrees. The evaluator places the cell's box
    at the episode's yaw + that turn and scores in the episode's frame, and the tracker
    (given the reconstruction's outline) reports the episode's yaw: before, it placed the
    box at the episode's yaw in the cell's own frame and the tracker saw it 90 degrees off
    (the wide cells' policies then saw yaws they never trained on)."""
    from types import SimpleNamespace

    from real2sim2real_ros.core.evaluation.object_identification import episode_frame_yaw
    from real2sim2real_ros.core.evaluation.observation import TrackedObservation
    from real2sim2real_ros.core.geometry import angle_gap, quat_yaw
    from real2sim2real_ros.core.object_tracking import TrackedObjectModel
    data = copy.deepcopy(yaml.safe_load(open(default_cell_spec_path())))
    box = data['objects'][0]
    box['size'] = [0.056, 0.082, 0.05]
    spec = load_cell_spec(data)
    obj = spec.object('box_0')
    found = SimpleNamespace(shape='box', yaw=obj.yaw - np.pi / 2 + 0.01)
    turn = episode_frame_yaw(spec, 'box_0', found)
    assert turn == pytest.approx(np.pi / 2)
    assert episode_frame_yaw(spec, 'box_0', SimpleNamespace(shape='cylinder', yaw=1.0)) == 0.0
    world = EmulatedWorld(spec)
    try:
        model = TrackedObjectModel('box_0', (0.082, 0.056, 0.05), 'box', tuple(obj.xyz[:2]),
                                   found.yaw)
        obs = TrackedObservation(world, robot, [model], spec.table.height, 'box_0')
        cell = CellWorld(world, 'box_0', obs, stream=False, frame_yaw=turn)
        xyz = [*obj.xyz[:2], obj.xyz[2]]
        seen = cell.observe_start(xyz, 0.2)
        assert seen is not None and angle_gap(seen[1], 0.2, np.pi) < 0.05, seen
        with world.truth.scoring():
            true_yaw = quat_yaw(world.object_poses()['box_0'][1])
        assert angle_gap(true_yaw, 0.2 + np.pi / 2) < 1e-6
        assert angle_gap(quat_yaw(cell.scored_object_pose()[1]), 0.2) < 1e-6
        plain = CellWorld(world, 'box_0', frame_yaw=turn)
        assert angle_gap(plain.observe_start(xyz, -0.1)[1], -0.1) < 1e-6
    finally:
        world.close()
