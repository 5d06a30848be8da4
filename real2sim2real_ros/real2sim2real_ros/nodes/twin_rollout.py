"""sim_server's ``~/rollout`` action (real2sim2real_msgs/action/Rollout).

Contract: one batched ``mujoco.rollout`` per chunk of ``rollout_chunk`` parameter samples
over ``nthread`` threads (both read per goal, so ``ros2 param set`` applies to the next one),
feedback per chunk, cancel between chunks (CANCELED). Every goal is accepted; what cannot run
ends with an error code and a message: INVALID_GOAL (no twin, initial state or commands that
do not fit, more than core/rollout_goal.py's MAX_ROLLOUT_* bounds), UNKNOWN_PARAMETER,
UNSTABLE (the twin diverges). The twin's lock is held per chunk, never between chunks.
"""
from __future__ import annotations

import numpy as np
from rclpy.action import ActionServer, CancelResponse, GoalResponse

from real2sim2real_msgs.action import Rollout

from ..core import rollout_goal
from ..core.parameters import ParameterError, UnknownParameterError
from ..core.rollout_goal import RolloutCanceled, RolloutGoalError
from ..core.twin import InvalidRolloutError, UnstableTwinError
from ..ros.ros_time import duration_to_sec


class RolloutAction:
    """The action server on ``node``; ``twin_now()`` -> (twin or None, why not) is called with
    ``lock`` held; ``params`` holds ``rollout_chunk`` and ``nthread``."""

    def __init__(self, node, lock, twin_now, params, callback_group):
        self._node, self._lock, self._twin_now, self._params = node, lock, twin_now, params
        self._server = ActionServer(
            node, Rollout, '~/rollout', self._execute,
            goal_callback=lambda _g: GoalResponse.ACCEPT,
            cancel_callback=lambda _g: CancelResponse.ACCEPT, callback_group=callback_group)

    def destroy(self):
        self._server.destroy()

    def _execute(self, goal_handle):
        result = Rollout.Result()
        code, text = self._rollout(goal_handle, result)
        result.error_code, result.error_msg = code, text
        if code == Rollout.Result.NONE:
            goal_handle.succeed()
        elif code == Rollout.Result.CANCELED:
            goal_handle.canceled()
        else:
            goal_handle.abort()
            self._node.get_logger().warning(f'rollout failed ({code}): {text}')
        return result

    def _start(self, goal):
        """(twin, problem, (q0, qd0), object poses) at the goal's start."""
        with self._lock:
            twin, problem = self._twin_now()
            if twin is None:
                return None, problem, None, None
            q0 = (np.asarray(goal.initial_qpos, float) if len(goal.initial_qpos)
                  else twin.joint_positions())
            qd0 = (np.asarray(goal.initial_qvel, float) if len(goal.initial_qvel)
                   else twin.data.qvel[twin._dadr].copy())
            return twin, '', (q0, qd0), rollout_goal.object_poses(twin)

    def _rollout(self, goal_handle, result):
        goal = goal_handle.request
        twin, problem, start, objects = self._start(goal)
        if twin is None:
            return Rollout.Result.INVALID_GOAL, f'no twin: {problem}'
        nj = len(twin.joint_names)
        if start[0].shape != (nj,) or start[1].shape != (nj,):
            return Rollout.Result.INVALID_GOAL, (f'initial_qpos/initial_qvel need {nj} values '
                                                 f'(joints {twin.joint_names}) or none')
        samples = [{p.name: p.value for p in s.parameters} for s in goal.parameter_samples]
        feedback = Rollout.Feedback()

        def progress(fraction):
            feedback.progress = fraction
            goal_handle.publish_feedback(feedback)
        try:
            command = rollout_goal.command_arrays(
                twin.joint_names, goal.commands.joint_names,
                [(duration_to_sec(p.time_from_start), p.positions, p.velocities)
                 for p in goal.commands.points])
            problem = rollout_goal.rollout_size_problem(
                command[0], goal.sample_period, twin.timestep, nj, len(twin.object_ids),
                len(samples))
            if problem:
                return Rollout.Result.INVALID_GOAL, problem
            batch = rollout_goal.run_in_chunks(
                twin, self._lock, start, command, goal.sample_period, samples,
                self._params.rollout_chunk, self._params.nthread, objects,
                lambda: goal_handle.is_cancel_requested, progress)
        except RolloutCanceled as exc:
            return Rollout.Result.CANCELED, str(exc)
        except UnknownParameterError as exc:
            return Rollout.Result.UNKNOWN_PARAMETER, str(exc)
        except UnstableTwinError as exc:
            return Rollout.Result.UNSTABLE, str(exc)
        except (RolloutGoalError, InvalidRolloutError, ParameterError, ValueError) as exc:
            return Rollout.Result.INVALID_GOAL, str(exc)
        _fill_result(result, batch)
        return Rollout.Result.NONE, ''


def _fill_result(result, batch: rollout_goal.RolloutBatch):
    result.joint_names = batch.joint_names
    result.num_rollouts = int(batch.positions.shape[0])
    result.num_samples = int(batch.positions.shape[1])
    result.times = batch.times.tolist()
    result.positions = batch.positions.ravel().tolist()
    result.object_ids = batch.object_ids
    result.object_poses = batch.object_poses.ravel().tolist()
