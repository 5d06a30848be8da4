"""The emulated cell's truth door (core/truth.py) and what a policy on the cell observes
(evaluation/observation.py): every truth read is recorded with its reader, a strict door
refuses one outside scoring / emulation, a leaking observer fails, the real episode path
(tracked start, scored outcome) passes; the tracker runs at its rate and latency."""
import numpy as np
import pytest

from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
from real2sim2real_ros.core.emulated_world import EmulatedWorld
from real2sim2real_ros.core.evaluation.observation import START_FRAMES, TrackedObservation
from real2sim2real_ros.core.object_tracking import TrackedObjectModel
from real2sim2real_ros.core.robot_description import default_cell_urdf, load_robot
from real2sim2real_ros.core.tasks import get_task
from real2sim2real_ros.core.tasks.worlds import CellWorld, ObservationLost
from real2sim2real_ros.core.truth import TruthDoor, TruthLeak


def test_door_records_allows_inside_a_purpose_and_refuses_outside_when_strict():
    door = TruthDoor()
    door.read('object_poses')                         # outside any purpose: a leak
    with door.scoring():
        door.read('object_poses')
        door.read('object_poses')
    with door.emulation('camera'):
        door.read('spec')
    rep = door.report()
    assert rep['allowed'] == {'scoring': {'object_poses': 2}, 'emulation: camera': {'spec': 1}}
    assert len(rep['leaks']) == 1 and rep['leaks'][0]['what'] == 'object_poses'
    assert rep['leaks'][0]['reader'].startswith(f'{__name__}.test_door_records')

    def declared_reader():
        door.read('spec')
    door.declare(f'{__name__}.declared_reader', 'lab config')
    with door.strict_mode():
        declared_reader()                             # declared: recorded, not a leak
        with pytest.raises(TruthLeak, match='test_door_records.*hidden truth \\(spec\\)'):
            door.read('spec')
    assert door.report()['declared'][0]['count'] == 1
    assert len(door.leaks) == 2


def _world(strict=True):
    spec = load_cell_spec(default_cell_spec_path())
    return spec, EmulatedWorld(spec, truth=TruthDoor(strict=strict))


def test_world_truth_accessors_go_through_the_door():
    spec, world = _world(strict=True)
    try:
        for read in (lambda: world.object_poses(), lambda: world.spec, lambda: world.model,
                     lambda: world.data, lambda: world.true_joint_positions(),
                     lambda: world.hidden_truth(), lambda: world.camera_spec('camera')):
            with pytest.raises(TruthLeak):
                read()
        # What a real cell gives is read freely.
        world.step_for(0.01)
        world.joint_positions(), world.controller_state(), world.render('camera')
        with world.truth.scoring():
            assert set(world.object_poses()) == {o.id for o in spec.objects}
        assert world.truth.report()['allowed'] == {'scoring': {'object_poses': 1}}
        assert len(world.truth.leaks) == 7
    finally:
        world.close()


def _tracked_cell(world, spec, stream):
    robot = load_robot(default_cell_urdf())
    models = [TrackedObjectModel(o.id, tuple(o.size) if o.shape == 'box'
                                 else (o.size[0], o.size[0], o.size[1]), o.shape,
                                 tuple(o.xyz[:2]), o.yaw) for o in spec.objects]
    obs = TrackedObservation(world, robot, models, spec.table.height, 'box_0')
    return robot, CellWorld(world, 'box_0', obs, stream=stream)


def test_tracked_slide_episode_reads_truth_only_to_score_and_a_leaking_observer_fails():
    spec, world = _world(strict=True)
    try:
        robot, cell = _tracked_cell(world, spec, stream=False)
        box = spec.object('box_0')
        task = get_task('slide_to_target', robot, {'object_id': 'box_0',
                                                   'object_size': tuple(box.size),
                                                   'table_height': spec.table.height})
        reset = task.sample_reset(np.random.default_rng(0))
        seen = []

        def honest(obs):
            seen.append(obs)
            return task.scripted_demo_policy(reset, np.random.default_rng(1))(obs)
        res = task.run_episode(cell, reset, honest)
        rep = world.truth.report()
        assert rep['leaks'] == []
        assert rep['allowed']['scoring'] == {'object_poses': 1}     # the score, once
        assert set(rep['allowed']) == {'scoring', 'emulation: calibrated camera pose and '
                                       'intrinsics'}
        # The policy saw the TRACKED start: close to, but not exactly, the placement.
        exact = task.observation(task.initial_state(reset))
        assert 0 < np.abs(seen[0] - exact).max() and abs(seen[0][0] - exact[0]) < 0.01
        assert cell.observer.cost['frames'] == START_FRAMES        # one-shot: start only
        assert res.final_error >= 0

        def leaking(obs):                                         # peeks at the truth
            xyz, _ = world.object_poses()['box_0']
            return np.array([1.0, 0.0]) if xyz[0] > 0 else np.array([0.5, 0.0])
        with pytest.raises(TruthLeak, match='leaking.*object_poses'):
            task.run_episode(cell, reset, leaking)
        # The old harness's backend (the policy plans from the true start) is a leak too.
        with pytest.raises(TruthLeak, match='observe_start.*object_poses'):
            task.run_episode(CellWorld(world, 'box_0'), reset, honest)
    finally:
        world.close()


def test_tracker_frames_on_the_grid_with_latency():
    spec, world = _world(strict=True)
    try:
        _, cell = _tracked_cell(world, spec, stream=True)
        obs = cell.observer
        box = spec.object('box_0')
        start = cell.observe_start(box.xyz, box.yaw)
        assert start is not None and np.linalg.norm(start[0][:2] - box.xyz[:2]) < 0.005
        world.reset()
        obs.restart_clock()
        frames0 = obs.cost['frames']
        obs.step(world, 1.0)
        # 5 Hz of cell time: frames at 0, 0.2, ..., 1.0 s.
        assert obs.cost['frames'] - frames0 == 6
        xyz, _ = cell.object_pose()
        # The newest usable pose is from the 1.0 s frame only after the latency; now 0.8 s.
        assert obs._latest[0] == pytest.approx(0.8)
        obs.step(world, obs.latency)
        cell.object_pose()
        assert obs._latest[0] == pytest.approx(1.0)
        assert np.linalg.norm(xyz[:2] - box.xyz[:2]) < 0.005
        assert obs.cost['render_s'] > 0 and obs.cost['track_s'] > 0
        assert obs.missed == {}
        # The box taken away: frames without it (the reason counted), and after the 1 s
        # observation timeout the policy has no pose (the executor's OBSERVATION_UNAVAILABLE).
        world.reset_objects(['box_0'], [((0.6, 0.0, -0.5), (1.0, 0.0, 0.0, 0.0))])
        obs.step(world, 0.8)
        cell.object_pose()                        # the last pose, 0.8 s old: still usable
        obs.step(world, 0.4)
        with pytest.raises(ObservationLost, match="no pose of 'box_0'"):
            cell.object_pose()
        assert sum(obs.missed.values()) == 6 and obs.cost['lost'] == 1
        assert world.truth.leaks == []
    finally:
        world.close()
