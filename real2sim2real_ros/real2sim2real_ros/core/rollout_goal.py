"""One batched-rollout request on the twin, checked and run in chunks (sim_server's ~/rollout).

Contract, ROS-free (the node turns messages into these arguments and exceptions into codes):

* :func:`command_arrays`: the commanded trajectory as (times, positions, velocities or None)
  in the twin's joint order; :class:`RolloutGoalError` when a joint is missing, there are no
  points or the values do not fit.
* :func:`rollout_size_problem`: '' when a goal is within the bounds below, else what is
  wrong. Per goal at most MAX_ROLLOUT_SAMPLES parameter samples, MAX_ROLLOUT_DURATION s of
  sim time (last time_from_start + 0.2 s) and MAX_ROLLOUT_VALUES floats in the result
  (rollouts x samples x (joints + 7 x objects)); all times finite, sample_period >= 0.
* :func:`state_vector_problem`: '' when a state vector is empty or one finite value per joint.
* :func:`run_in_chunks`: ``Twin.rollout`` over ``chunk`` parameter samples at a time with
  ``lock`` held per call; between calls ``canceled()`` is asked (then
  :class:`RolloutCanceled`) and ``progress(fraction)`` told. The twin's own exceptions
  (UnknownParameterError, UnstableTwinError, InvalidRolloutError, ...) pass through.
* :func:`object_poses`: the twin's object poses now (a rollout's and a stability check's start).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

MAX_ROLLOUT_SAMPLES = 10_000          # parameter samples per goal
MAX_ROLLOUT_DURATION = 600.0          # s of sim time (trajectory end + 0.2 s)
MAX_ROLLOUT_VALUES = 50_000_000       # floats in the result (positions + object poses)


class RolloutGoalError(ValueError):
    """A rollout request that cannot run as given (the node's INVALID_GOAL)."""


class RolloutCanceled(Exception):
    """Canceled between chunks, after ``done`` of ``total`` rollouts."""

    def __init__(self, done: int, total: int):
        super().__init__(f'canceled after {done} of {total} rollouts')
        self.done, self.total = done, total


@dataclass
class RolloutBatch:
    """The concatenated chunks: positions (rollouts, samples, joints), object poses
    (rollouts, samples, objects, 7) and the last chunk's times, joint names and object ids."""
    positions: np.ndarray
    object_poses: np.ndarray
    times: np.ndarray
    joint_names: list
    object_ids: list


def command_arrays(joint_names: Sequence[str], command_joints: Sequence[str], points):
    """(times, positions, velocities or None) of ``points`` — (time_from_start s, positions,
    velocities) per point, joints in ``command_joints`` order — reordered to ``joint_names``.
    Velocities only when every point gives one per joint."""
    index = {n: i for i, n in enumerate(command_joints)}
    missing = [n for n in joint_names if n not in index]
    if missing or not points:
        raise RolloutGoalError(f'commands must name every joint {joint_names} and have '
                               f'points; missing {missing}')
    order = [index[n] for n in joint_names]
    try:
        times = np.array([float(t) for t, _, _ in points])
        pos = np.array([np.asarray(q, float)[order] for _, q, _ in points])
        vel = (np.array([np.asarray(v, float)[order] for _, _, v in points])
               if all(len(v) == len(index) for _, _, v in points) else None)
    except (IndexError, ValueError) as exc:
        raise RolloutGoalError(f'commands: {exc}') from None
    return times, pos, vel


def rollout_size_problem(times, sample_period: float, timestep: float, n_joints: int,
                         n_objects: int, n_samples: int) -> str:
    """'' when a rollout goal's size is within the MAX_ROLLOUT_* bounds; else what is wrong."""
    if not np.all(np.isfinite(times)):
        return 'commands: a time_from_start is not finite'
    if not (math.isfinite(sample_period) and sample_period >= 0.0):
        return f'sample_period {sample_period} must be a finite number >= 0 s'
    if n_samples > MAX_ROLLOUT_SAMPLES:
        return (f'{n_samples} parameter_samples is more than the {MAX_ROLLOUT_SAMPLES} allowed '
                f'per goal; send several goals')
    duration = float(np.max(times)) + 0.2
    if duration > MAX_ROLLOUT_DURATION:
        return (f'commands last {duration:g} s of sim time, more than the '
                f'{MAX_ROLLOUT_DURATION:g} s allowed per rollout')
    period = max(sample_period, timestep)
    values = max(1, n_samples) * (int(duration / period) + 2) * (n_joints + 7 * n_objects)
    if values > MAX_ROLLOUT_VALUES:
        return (f'the result would hold {values} values, more than the {MAX_ROLLOUT_VALUES} '
                f'allowed: raise sample_period or send fewer parameter_samples')
    return ''


def state_vector_problem(field: str, values, joint_names) -> str:
    """'' when ``values`` is empty or one finite value per joint; else what is wrong."""
    n = len(values)
    if n == 0:
        return ''
    if n != len(joint_names):
        return (f'{field} has {n} values; the twin has {len(joint_names)} joints '
                f'{list(joint_names)}')
    bad = [f'{name}={v}' for name, v in zip(joint_names, values) if not math.isfinite(v)]
    if bad:
        return f'{field} holds NaN or infinite values: {", ".join(bad)}'
    return ''


def run_in_chunks(twin, lock, start: tuple, command: tuple, sample_period: float,
                  samples: list[dict], chunk: int, nthread: int, object_poses: dict,
                  canceled: Callable[[], bool],
                  progress: Callable[[float], None]) -> RolloutBatch:
    """``samples`` (empty: the current parameters once) rolled out from ``start`` = (q0, qd0)
    along ``command`` = (times, positions, velocities or None); see the module."""
    q0, qd0 = start
    times, pos, vel = command
    samples = samples or [{}]
    chunk = max(1, int(chunk))
    out_pos, out_obj, res = [], [], None
    for first in range(0, len(samples), chunk):
        if canceled():
            raise RolloutCanceled(first, len(samples))
        batch = samples[first:first + chunk]
        with lock:
            res = twin.rollout(q0, qd0, times, pos, sample_period,
                               param_samples=batch if batch != [{}] else None,
                               nthread=nthread, traj_velocities=vel,
                               object_poses=object_poses or None)
        out_pos.append(res.positions)
        out_obj.append(res.object_poses)
        progress(min(1.0, (first + len(batch)) / len(samples)))
    return RolloutBatch(np.concatenate(out_pos), np.concatenate(out_obj), res.times,
                        list(res.joint_names), list(res.object_ids))


def object_poses(twin) -> dict:
    """{object id: (xyz, quaternion wxyz)} of the twin's free objects now (copies)."""
    return {oid: (twin.data.qpos[a:a + 3].copy(), twin.data.qpos[a + 3:a + 7].copy())
            for oid, a in zip(twin.object_ids, twin._obj_qadr)}
