"""The ROS-free pieces the node shells call: rollout goals, parameter estimates, depth buffers,
tracker objects from parameters, depth averaging (no graph, no rclpy)."""
import threading

import numpy as np
import pytest

from real2sim2real_ros.core import rollout_goal as rg
from real2sim2real_ros.core.capture_set import average_depth
from real2sim2real_ros.core.object_tracking import depth_from_buffer, objects_from_parameters
from real2sim2real_ros.core.parameters import EstimateBook

JOINTS = ['a', 'b']


def test_command_arrays_reorder_and_refuse_what_does_not_fit():
    times, pos, vel = rg.command_arrays(JOINTS, ['b', 'a'],
                                        [(0.0, [2.0, 1.0], [0.2, 0.1]),
                                         (1.0, [4.0, 3.0], [0.4, 0.3])])
    assert times.tolist() == [0.0, 1.0]
    assert pos.tolist() == [[1.0, 2.0], [3.0, 4.0]] and vel.tolist() == [[0.1, 0.2], [0.3, 0.4]]
    _, _, vel = rg.command_arrays(JOINTS, JOINTS, [(0.0, [1, 2], []), (1.0, [1, 2], [0, 0])])
    assert vel is None                               # velocities for some points only: none
    with pytest.raises(rg.RolloutGoalError, match=r"missing \['b'\]"):
        rg.command_arrays(JOINTS, ['a'], [(0.0, [1.0], [])])
    with pytest.raises(rg.RolloutGoalError, match='have points'):
        rg.command_arrays(JOINTS, JOINTS, [])
    with pytest.raises(rg.RolloutGoalError, match='commands:'):
        rg.command_arrays(JOINTS, JOINTS, [(0.0, [1.0], [])])   # one position for two joints


def test_size_and_state_problems_name_the_bound():
    assert rg.rollout_size_problem(np.array([1.0]), 0.01, 0.001, 6, 1, 10) == ''
    assert 'not finite' in rg.rollout_size_problem(np.array([np.inf]), 0.0, 0.001, 6, 0, 1)
    assert 'sample_period' in rg.rollout_size_problem(np.array([1.0]), -1.0, 0.001, 6, 0, 1)
    assert str(rg.MAX_ROLLOUT_SAMPLES) in rg.rollout_size_problem(
        np.array([1.0]), 0.0, 0.001, 6, 0, rg.MAX_ROLLOUT_SAMPLES + 1)
    assert 'sim time' in rg.rollout_size_problem(
        np.array([rg.MAX_ROLLOUT_DURATION]), 0.0, 0.001, 6, 0, 1)
    assert str(rg.MAX_ROLLOUT_VALUES) in rg.rollout_size_problem(
        np.array([500.0]), 0.0, 0.001, 6, 1, 100)
    assert rg.state_vector_problem('qpos', [], JOINTS) == ''
    assert 'has 1 values' in rg.state_vector_problem('qpos', [1.0], JOINTS)
    assert 'b=nan' in rg.state_vector_problem('qvel', [0.0, float('nan')], JOINTS)


class _FakeTwin:
    def __init__(self):
        self.calls = []

    def rollout(self, q0, qd0, times, pos, period, param_samples=None, nthread=1,
                traj_velocities=None, object_poses=None):
        n = 1 if param_samples is None else len(param_samples)
        self.calls.append((param_samples, nthread, object_poses))

        class Result:
            positions = np.zeros((n, 3, 2))
            object_poses = np.zeros((n, 3, 1, 7))
            times = np.arange(3.0)
            joint_names = JOINTS
            object_ids = ['box']
        return Result()


def test_run_in_chunks_batches_reports_progress_and_cancels_between_chunks():
    twin, seen = _FakeTwin(), []
    args = ((np.zeros(2), np.zeros(2)), (np.array([1.0]), np.zeros((1, 2)), None), 0.0)
    batch = rg.run_in_chunks(twin, threading.Lock(), *args, [{'x': i} for i in range(5)], 2, 3,
                             {}, lambda: False, seen.append)
    assert [len(c[0]) for c in twin.calls] == [2, 2, 1] and twin.calls[0][1:] == (3, None)
    assert seen == [0.4, 0.8, 1.0]
    assert batch.positions.shape == (5, 3, 2) and batch.object_poses.shape == (5, 3, 1, 7)
    assert batch.joint_names == JOINTS and batch.object_ids == ['box']
    twin = _FakeTwin()
    rg.run_in_chunks(twin, threading.Lock(), *args, [], 8, 1, {}, lambda: False, seen.append)
    assert twin.calls[0][0] is None                  # no samples: the current parameters once
    asked = iter([False, True])
    with pytest.raises(rg.RolloutCanceled, match='canceled after 2 of 5 rollouts'):
        rg.run_in_chunks(_FakeTwin(), threading.Lock(), *args, [{}] * 5, 2, 1, {},
                         lambda: next(asked), seen.append)


def test_estimate_book_keeps_intervals_that_hold_the_value():
    book = EstimateBook()
    book.priors = {'body/box_0/mass': 0.5}
    plain = book.describe('body/box_0/mass', 0.5)
    assert (plain.lower_95, plain.upper_95, plain.prior, plain.unit, plain.identified) == (
        0.5, 0.5, 0.5, 'kg', False)
    book.record('body/box_0/mass', 0.4, 0.3, 0.5, 0.45, True)
    est = book.describe('body/box_0/mass', 0.4)
    assert (est.lower_95, est.upper_95, est.prior, est.identified) == (0.3, 0.5, 0.45, True)
    book.record('body/box_0/mass', 0.6, 0.3, 0.5, 0.45, False, 'g')   # outside, not identified
    est = book.describe('body/box_0/mass', 0.6)
    assert (est.lower_95, est.upper_95, est.prior, est.unit) == (0.6, 0.6, 0.5, 'g')


def test_depth_from_buffer_reads_both_encodings_and_refuses_bad_geometry():
    mm = np.array([[1, 2, 3], [4, 5, 6]], '<u2')
    padded = np.zeros((2, 4), '<u2')
    padded[:, :3] = mm
    out = depth_from_buffer(padded.tobytes(), '16UC1', 2, 3, 8)
    assert out.dtype == np.uint16 and out.tolist() == mm.tolist()
    metres = np.array([[1.5, 2.5]], '>f4')
    assert depth_from_buffer(metres.tobytes(), '32FC1', 1, 2, 8, True).tolist() == [[1.5, 2.5]]
    with pytest.raises(ValueError, match='unsupported depth encoding'):
        depth_from_buffer(b'', 'rgb8', 1, 1, 3)
    with pytest.raises(ValueError, match='bad image geometry'):
        depth_from_buffer(b'', '16UC1', 1, 2, 2)
    with pytest.raises(ValueError, match='header says 8'):
        depth_from_buffer(b'\0' * 4, '16UC1', 2, 2, 4)


def test_objects_from_parameters_name_the_array_that_does_not_fit():
    models = objects_from_parameters(['a', 'b'], [], [0.1] * 6, [0.5, 0.0, 0.1, 0.6, 0.1, 0.2])
    assert [m.id for m in models] == ['a', 'b'] and [m.shape for m in models] == ['box'] * 2
    assert objects_from_parameters([], [], [], []) == []
    with pytest.raises(ValueError, match='object_extents has 3 values'):
        objects_from_parameters(['a', 'b'], [], [0.1] * 3, [])
    with pytest.raises(ValueError, match='object_shapes has 1 entries'):
        objects_from_parameters(['a', 'b'], ['box'], [0.1] * 6, [])
    with pytest.raises(ValueError, match='object_poses has 2 values'):
        objects_from_parameters(['a'], [], [0.1] * 3, [0.0, 0.0])


def test_average_depth_holes_where_fewer_than_half_are_valid():
    a = np.array([[1.0, np.nan, 0.0]], np.float32)
    b = np.array([[3.0, np.nan, 2.0]], np.float32)
    out = average_depth([a, b])
    assert out[0, 0] == 2.0 and np.isnan(out[0, 1]) and out[0, 2] == 2.0
    out = average_depth([a, a, b])
    assert np.isnan(out[0, 1]) and np.isnan(out[0, 2])   # 1 of 3 valid: a hole
