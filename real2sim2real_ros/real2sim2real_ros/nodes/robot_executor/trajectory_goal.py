"""``~/execute_trajectory``: validate the path the controller will follow, send it, supervise.

A goal is refused (accepted, then aborted with its code) when DISARMED, busy, or when the
reference the controller would follow (core/execution_safety.py: the same interpolation as
JTC) leaves a joint limit, a velocity limit or the workspace box, all before anything is
sent. While the arm moves :func:`supervision.check_motion` runs at FEEDBACK_PERIOD; the goal
succeeds when every joint is within ``goal_tolerance`` of the last point after the
trajectory's duration, and times out ``goal_timeout_margin`` later (on the measurements'
clock).
"""
from __future__ import annotations

import math
import time

import rclpy

from real2sim2real_msgs.action import ExecuteTrajectory

from ...core import execution_safety as es
from ...ros.executor_backends import BackendError, trajectory_from_msg, trajectory_to_msg
from ...ros.goal_client import error_codes
from .supervision import (
    FEEDBACK_PERIOD,
    Abort,
    Execution,
    check_motion,
    finish_goal,
    finite_or,
    goal_server,
    run_goal,
)

Result = ExecuteTrajectory.Result
ERROR_NAMES = error_codes(Result)   # {code: name}, from the .action file
# supervision.Fault kinds -> ExecuteTrajectory codes
FAULT_CODES = {'STOPPED': Result.STOPPED, 'CANCELED': Result.CANCELED,
               'CONTROLLER': Result.BACKEND_UNAVAILABLE,
               'TRACKING_ERROR': Result.TRACKING_ERROR,
               'STATES_STOPPED': Result.BACKEND_UNAVAILABLE,
               'STALE_STATE': Result.STALE_STATE}


class TrajectoryGoals:
    """The ``~/execute_trajectory`` action server of the executor ``node``."""

    def __init__(self, node, callback_group):
        self.node = node
        self.server = goal_server(node, ExecuteTrajectory, '~/execute_trajectory', self.execute,
                                  callback_group)

    def execute(self, goal_handle):
        result = Result()
        return run_goal(self.node, goal_handle, result, 'execution',
                        Result.BACKEND_UNAVAILABLE, lambda ex: self._run(goal_handle, ex),
                        lambda ex, code, message: self._manifest(ex, result, code, message),
                        self._finish, after=lambda ex: self._fill_stats(ex, result))

    def _manifest(self, ex, result, code, message) -> dict:
        return {'error_code': int(code), 'error_name': ERROR_NAMES.get(code, str(code)),
                'error_msg': message,
                'max_tracking_error': result.max_tracking_error,
                'rms_tracking_error': result.rms_tracking_error,
                'final_error': result.final_error, 'duration': result.duration,
                'bag_path': result.bag_path, 'recording_problem': ex.bag_error,
                'worst_joint': ex.worst_joint, 'tracking_samples': ex.samples,
                **self.node.recorder.state_summary(ex)}

    def _finish(self, goal_handle, result, code, message):
        return finish_goal(self.node, goal_handle, result, code, message, ERROR_NAMES,
                           'execute_trajectory', Result.NONE, Result.CANCELED)

    def _new_stage(self, request):
        traj = request.trajectory
        last = traj.points[-1].time_from_start if traj.points else None
        return self.node.recorder.new_stage('execute', inputs={
            'joint_names': list(traj.joint_names),
            'points': len(traj.points),
            'duration': (last.sec + last.nanosec * 1e-9) if last is not None else 0,
            'record': bool(request.record),
            'goal_timeout': float(request.goal_timeout),
        })

    def _validate(self, request):
        n = self.node
        q, why = n.current_state()
        if q is None:
            raise Abort(Result.BACKEND_UNAVAILABLE, why)
        problem = n.backend.ready()
        if problem:
            raise Abort(Result.BACKEND_UNAVAILABLE, problem)
        robot, limits, fk_lip = n.model()
        p = n.p
        try:
            traj = trajectory_from_msg(request.trajectory)
            return es.validate_trajectory(
                traj, limits, q, velocity_scale=p.velocity_limit_scale,
                fk=lambda x: robot.fk(x), workspace=n.workspace,
                start_tolerance=p.start_tolerance, workspace_step=p.workspace_check_step,
                fk_lipschitz=fk_lip), q
        except es.TrajectoryViolation as v:
            raise Abort(getattr(Result, v.kind), v.message) from None

    def _run(self, goal_handle, ex: Execution):
        n, p = self.node, self.node.p
        request = goal_handle.request
        ex.stage = stage = self._new_stage(request)
        validated, q0 = self._validate(request)
        if stage is not None:
            stage.inputs['start_position'] = q0.tolist()
            stage.inputs['start_prepended'] = validated.start_prepended
        monitor = es.TrackingMonitor(validated.reference, p.max_tracking_error,
                                     p.goal_tolerance, validated.command.joint_names)
        if stage is not None and (p.record or request.record):
            n.recorder.open_bag(ex, stage)
        elif request.record:
            ex.bag_error = "recording needs the run_dir parameter (it is '')"
        self._send(ex, validated, monitor)
        return self._supervise(goal_handle, ex, monitor, validated.reference.duration,
                               finite_or(request.goal_timeout, p.goal_timeout_margin))

    def _send(self, ex: Execution, validated, monitor) -> None:
        n = self.node
        delay = n.p.start_delay
        with n.lock:
            if ex.stop_reason:
                raise Abort(Result.STOPPED, ex.stop_reason)
            if not n.armed:    # disarmed while the trajectory was being validated
                raise Abort(Result.NOT_ARMED, 'executor was disarmed before the motion started')
            ex.monitor = monitor
            sent = n.now()
            ex.t0 = sent + delay      # the monitor's t = 0: when the controller starts
            ex.last_state_time = ex.last_measured = sent
        msg = trajectory_to_msg(validated.command, start_time=ex.t0 if delay > 0 else None)
        try:
            n.backend.send(msg)
        except BackendError as exc:
            raise Abort(Result.BACKEND_UNAVAILABLE, str(exc)) from None
        if ex.bag is not None:
            n.recorder.record(ex, n.backend.record_topic, msg, sent)

    def _supervise(self, goal_handle, ex: Execution, monitor, duration: float, margin: float):
        n = self.node
        feedback = ExecuteTrajectory.Feedback()
        tick = time.monotonic()
        while True:
            # Fixed-rate supervision: sleep to the next tick, not a full period after the work.
            tick = max(tick + FEEDBACK_PERIOD, time.monotonic() - FEEDBACK_PERIOD)
            ex.wake.wait(max(0.0, tick - time.monotonic()))
            ex.wake.clear()
            if not rclpy.ok():
                raise Abort(Result.STOPPED, 'node shutting down')
            now = n.now()
            t = now - ex.t0
            fault = check_motion(n, ex, goal_handle, now, 'execution', t)
            if fault is not None:
                if fault.kind != 'STOPPED':     # ~/stop already sent the stop ramp
                    n.send_stop(ex)
                    fault.message += '; stop sent, holding position'
                raise Abort(FAULT_CODES[fault.kind], fault.message)
            with n.lock:
                sample = monitor.last
                at_goal = monitor.at_goal()
            if sample is not None:
                feedback.progress = float(min(1.0, max(0.0, t / duration)))
                feedback.tracking_error = float(sample.max_error)
                feedback.time_from_start = float(t)
                goal_handle.publish_feedback(feedback)
            if t >= duration and at_goal:
                return Result.NONE, ''
            # The trajectory's clock is the measurements' (a lagging cell started it late
            # by as much); STALE_STATE bounds how far that is behind ours.
            if ex.last_measured - ex.t0 >= duration + margin:
                final = monitor.summary().final_error
                n.send_stop(ex)
                raise Abort(Result.TIMEOUT, (
                    f'not within goal_tolerance {n.p.goal_tolerance} rad of the last point '
                    f'{margin:.2f} s after the trajectory ended (final error {final:.4f} rad)'))

    def _fill_stats(self, ex: Execution, result) -> None:
        if ex.monitor is None or ex.t0 is None:
            return
        with self.node.lock:
            s = ex.monitor.summary()
        result.max_tracking_error = float(s.max_error)
        result.rms_tracking_error = float(s.rms_error)
        result.final_error = float(s.final_error) if math.isfinite(s.final_error) else -1.0
        result.duration = float(self.node.now() - ex.t0)
        ex.worst_joint = s.worst_joint
        ex.samples = s.samples
