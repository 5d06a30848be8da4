"""``~/grip``: the gripper through the armed executor, within its own limits.

A goal (real2sim2real_msgs/action/Grip: ``open``, ``close`` or ``position``) is refused
(accepted, then aborted with its code) when DISARMED (NOT_ARMED), busy (BUSY), when the robot
description has no parallel-jaw gripper (NO_GRIPPER), for an unknown command, a position
outside the jaw or an effort / speed above ``gripper_max_effort`` / ``gripper_max_speed``
(INVALID_GOAL, naming the field), or when the gripper controller is not reachable
(BACKEND_UNAVAILABLE), all before anything is sent. ``open`` goes to the jaw's upper limit,
``close`` to its lower one with ``max_effort`` (else ``gripper_default_effort``): a grasp
stalls on the object and succeeds with ``stalled``. ``~/stop`` / ``~/disarm`` during a grip
cancel it: the controller holds the jaw where it is, so a stop never opens a loaded gripper
(and the executor never sends an opening command on a stop). ``gripper_goal_timeout``
without an outcome: TIMEOUT (cancelled). The controller aborting (a stall with its
allow_stalling off): FAILED. Each goal gets ``<run_dir>/grip_<n>/manifest.json`` and, when
recording, a bag with the jaw command and the joint states.
"""
from __future__ import annotations

import math
import time

from sensor_msgs.msg import JointState

from real2sim2real_msgs.action import Grip

from ...core.grasping.jaw import gripper_joints
from ...ros.goal_client import error_codes
from .supervision import (
    FEEDBACK_PERIOD,
    Abort,
    Execution,
    finish_goal,
    goal_server,
    run_goal,
)

Result = Grip.Result
ERROR_NAMES = error_codes(Result)
COMMANDS = ('open', 'close', 'position')


class GripGoals:
    """The ``~/grip`` action server of the executor ``node`` (its ``gripper`` backend)."""

    def __init__(self, node, callback_group):
        self.node = node
        self.server = goal_server(node, Grip, '~/grip', self.execute, callback_group)

    def execute(self, goal_handle):
        result = Result()

        def body(ex):
            t_start = time.monotonic()
            try:
                return self._run(goal_handle, ex, result)
            finally:
                result.duration = time.monotonic() - t_start
        return run_goal(self.node, goal_handle, result, 'grip', Result.BACKEND_UNAVAILABLE,
                        body, lambda ex, code, message: {
                            'error_code': int(code),
                            'error_name': ERROR_NAMES.get(code, str(code)),
                            'error_msg': message, 'position': result.position,
                            'effort': result.effort, 'stalled': result.stalled,
                            'reached_goal': result.reached_goal,
                            'duration': result.duration, 'bag_path': result.bag_path,
                            'recording_problem': ex.bag_error}, self._finish)

    def _finish(self, goal_handle, result, code, message):
        return finish_goal(self.node, goal_handle, result, code, message, ERROR_NAMES, 'grip',
                           Result.NONE, Result.CANCELED)

    def _target(self, request) -> tuple[str, float, float, float]:
        """(jaw joint, position m, effort N, speed m/s) of a goal within the limits."""
        n, p = self.node, self.node.p
        robot, _, _ = n.model()
        jaw = gripper_joints(robot) if robot is not None else None
        if jaw is None:
            raise Abort(Result.NO_GRIPPER, f'the robot ({getattr(robot, "name", "none")}) has '
                        'no parallel-jaw gripper in its robot description')
        command = request.command.strip().lower()
        if command not in COMMANDS:
            raise Abort(Result.INVALID_GOAL, f'command: must be one of {list(COMMANDS)}, got '
                        f'{request.command!r}')
        position = {'open': jaw.upper, 'close': jaw.lower}.get(command, request.position)
        if not (math.isfinite(position) and jaw.lower - 1e-9 <= position <= jaw.upper + 1e-9):
            raise Abort(Result.INVALID_GOAL, f'position: {position} m is outside {jaw.joint} '
                        f'[{jaw.lower}, {jaw.upper}]')
        effort = request.max_effort or p.gripper_default_effort
        speed = request.max_speed or p.gripper_max_speed
        for name, value, cap in (('max_effort', effort, p.gripper_max_effort),
                                 ('max_speed', speed, p.gripper_max_speed)):
            if not (math.isfinite(value) and 0 < value <= cap):
                raise Abort(Result.INVALID_GOAL, f'{name}: {value} is outside (0, {cap}] '
                            f'(gripper_{name.split("_")[1]} limit)')
        return jaw.joint, float(position), float(effort), float(speed)

    def _run(self, goal_handle, ex: Execution, result):
        n, request = self.node, goal_handle.request
        joint, position, effort, speed = self._target(request)
        backend = n.gripper
        if backend is None:
            raise Abort(Result.BACKEND_UNAVAILABLE, 'control_msgs is not importable: no '
                        'gripper action client')
        problem = backend.ready()
        if problem:
            raise Abort(Result.BACKEND_UNAVAILABLE, problem)
        ex.stage = n.recorder.new_stage('grip', inputs={
            'command': request.command, 'joint': joint, 'position': position,
            'max_effort': effort, 'max_speed': speed, 'record': bool(request.record)})
        command = JointState(name=[joint], position=[position], velocity=[speed],
                             effort=[effort])
        topic = backend.resolved_name() + '/command'
        if ex.stage is not None and (n.p.record or request.record):
            n.recorder.open_bag(ex, ex.stage, 'grip',
                                extra_topics=[(topic, 'sensor_msgs/msg/JointState')])
        with n.lock:
            if ex.stop_reason or not n.armed:
                raise Abort(Result.STOPPED, ex.stop_reason or 'disarmed before the grip')
        run = backend.send(joint, position, effort, speed)
        if ex.bag is not None:
            n.recorder.record(ex, topic, command, n.now())
        return self._supervise(goal_handle, ex, run, result, joint)

    def _supervise(self, goal_handle, ex, run, result, joint):
        n = self.node
        deadline = time.monotonic() + n.p.gripper_goal_timeout
        feedback = Grip.Feedback()
        while not run.done.wait(FEEDBACK_PERIOD):
            why = (ex.stop_reason and (Result.STOPPED, ex.stop_reason)
                   or not n.armed and (Result.STOPPED, 'disarmed')
                   or goal_handle.is_cancel_requested and (Result.CANCELED, 'canceled')
                   or time.monotonic() > deadline and (Result.TIMEOUT, (
                       f'no outcome within gripper_goal_timeout {n.p.gripper_goal_timeout} s')))
            if why:
                n.gripper.cancel(run)
                self._fill(result, n.jaw_state(joint), run)
                raise Abort(why[0], why[1] + '; the jaw holds where it is')
            pos, eff = n.jaw_state(joint)
            feedback.position, feedback.effort = pos, eff
            goal_handle.publish_feedback(feedback)
        self._fill(result, (run.position, run.effort), run)
        if run.outcome == 'succeeded':
            return Result.NONE, 'stalled on an object' if run.stalled else ''
        if run.outcome in ('rejected', 'failed'):
            raise Abort(Result.BACKEND_UNAVAILABLE, run.message)
        raise Abort(Result.FAILED, f'the gripper controller {run.outcome} the goal'
                    + (' (stalled)' if run.stalled else ''))

    @staticmethod
    def _fill(result, state, run):
        result.position, result.effort = (float(x) for x in state)
        result.stalled, result.reached_goal = run.stalled, run.reached_goal


class EpisodeJaw:
    """The jaw commands of a policy episode (core.policy_execution.Motion.grip), for the
    ``~/execute_policy`` server ``goals`` (its ``_watch`` and ``_abort``; ``result`` its
    Result class)."""

    def __init__(self, goals, result):
        self.goals, self.node, self.R = goals, goals.node, result

    def ready(self, ex: Execution, motions) -> None:
        """Before anything moves: the gripper backend answers and every jaw command is
        within gripper_max_effort (STOPPED / INVALID_CHECKPOINT otherwise)."""
        n = self.node
        problem = 'control_msgs is not importable' if n.gripper is None else n.gripper.ready()
        if problem:
            raise self.goals._abort(ex, self.R.STOPPED, f'gripper unavailable: {problem}')
        effort = max(m.grip[1] for m in motions if m.grip)
        if not 0 < effort <= n.p.gripper_max_effort:
            raise self.goals._abort(ex, self.R.INVALID_CHECKPOINT, (
                f"the task's grasp_effort {effort} N is outside (0, gripper_max_effort "
                f'{n.p.gripper_max_effort}]'))

    def grip(self, goal_handle, ex: Execution, run, motion) -> None:
        """``motion.grip`` through the gripper backend at gripper_max_speed, supervised as a
        motion (the arm holds its last point) until the controller's outcome. On any abort
        the goal is cancelled: the jaw holds where it is (a stop never opens a grasp)."""
        n, (position, effort), R = self.node, motion.grip, self.R
        with n.lock:
            if ex.stop_reason or not n.armed:
                raise Abort(R.STOPPED, ex.stop_reason or 'disarmed before the grip')
        g = n.gripper.send(run.episode.task.jaw.joint, position, effort, n.p.gripper_max_speed)
        deadline = n.now() + n.p.gripper_goal_timeout

        def done(now):
            if now > deadline:
                raise self.goals._abort(ex, R.TIMEOUT, (
                    f'{motion.label}: no jaw outcome within gripper_goal_timeout '
                    f'{n.p.gripper_goal_timeout} s'))
            return g.done.is_set()
        try:
            self.goals._watch(goal_handle, ex, run, done)
        except Abort:
            n.gripper.cancel(g)
            raise
        if g.outcome != 'succeeded':
            raise self.goals._abort(ex, R.STOPPED, f'{motion.label}: the gripper controller '
                                    f'{g.outcome} the jaw goal {g.message}'.rstrip())
