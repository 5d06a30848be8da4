"""``~/execute_policy``: a trained policy closed-loop on the arm, under the trajectory rules.

core/policy_execution.py plans (load the checkpoint, observation -> action -> motion); this
module runs it: it refuses before anything moves (NOT_ARMED, BUSY, INVALID_CHECKPOINT,
WORKSPACE_VIOLATION), waits for a fresh tracked pose (OBSERVATION_UNAVAILABLE), validates
every motion against the measured position before it is sent (LIMIT_VIOLATION /
WORKSPACE_VIOLATION: not sent, the arm holds), supervises like a trajectory
(:func:`supervision.check_motion`) plus the episode's ``max_duration`` (TIMEOUT), and scores
the task on a pose measured after the last motion and its settle time.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field

import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup

from real2sim2real_msgs.action import ExecutePolicy
from real2sim2real_msgs.msg import PolicyStep, TrackedObjects

from ...core import execution_safety as es
from ...ros import qos
from ...ros.executor_backends import BackendError, trajectory_to_msg
from ...ros.goal_client import error_codes
from ...ros.subscriptions import subscribed
from .grip_goal import EpisodeJaw
from .recording import Recorder
from .supervision import (
    FEEDBACK_PERIOD,
    MAX_EXTRAPOLATION,
    TRACKING_STAMP_WINDOW,
    Abort,
    Execution,
    check_motion,
    finish_goal,
    finite_or,
    goal_server,
    run_goal,
)

Result = ExecutePolicy.Result
ERROR_NAMES = error_codes(Result)   # {code: name}, from the .action file
# core/policy_execution error kinds and supervision.Fault kinds -> ExecutePolicy codes (a goal
# that does not fit the checkpoint's task has no code of its own: INVALID_CHECKPOINT, the
# message says which).
KIND_CODES = {
    'INVALID_CHECKPOINT': Result.INVALID_CHECKPOINT, 'INVALID_GOAL': Result.INVALID_CHECKPOINT,
    'LIMIT_VIOLATION': Result.LIMIT_VIOLATION, 'WORKSPACE_VIOLATION': Result.WORKSPACE_VIOLATION,
    'OBSERVATION_UNAVAILABLE': Result.OBSERVATION_UNAVAILABLE,
    'STOPPED': Result.STOPPED, 'CANCELED': Result.CANCELED, 'CONTROLLER': Result.STOPPED,
    'TRACKING_ERROR': Result.TRACKING_ERROR, 'STATES_STOPPED': Result.OBSERVATION_UNAVAILABLE,
    'STALE_STATE': Result.STALE_STATE}
TRACKED_OBJECTS_TYPE = 'real2sim2real_msgs/msg/TrackedObjects'
POLICY_STEP_TYPE = 'real2sim2real_msgs/msg/PolicyStep'
POLICY_STEPS_TOPIC = 'policy_steps'
# The parameters a policy manifest records beyond the trajectory's.
_POLICY_PARAMETERS = ('observation_timeout', 'observation_wait', 'policy_max_duration',
                      'approach_height', 'approach_velocity_fraction', 'approach_tip_speed')


@dataclass
class PolicyRun:
    """Book-keeping of one execute_policy goal (for the result and the manifest)."""
    episode: object = None             # core.policy_execution.PolicyEpisode
    gate: object = None                # core.policy_execution.SafetyGate
    t_start: float | None = None       # node clock: checkpoint loaded (episode clock zero)
    deadline: float = math.inf         # node clock: max_duration
    motions: list = field(default_factory=list)   # [label, t0, duration, points]
    first_pose: object = None
    final_pose: object = None
    final_pose_note: str = ''
    steps_recorded: int = 0            # episode.records already written to the bag
    steps_topic: str = ''


class PolicyGoals:
    """The ``~/execute_policy`` action server of the executor ``node``."""

    def __init__(self, node, callback_group):
        self.node = node
        self._tracked_cb = MutuallyExclusiveCallbackGroup()
        self.jaw = EpisodeJaw(self, Result)
        self.server = goal_server(node, ExecutePolicy, '~/execute_policy', self.execute,
                                  callback_group)

    # ------------------------------------------------------------------ the goal

    def execute(self, goal_handle):
        n = self.node
        result = Result()
        run = PolicyRun()

        def after(_ex):
            result.steps = int(run.episode.steps) if run.episode is not None else 0
            result.duration = float(n.now() - run.t_start) if run.t_start is not None else 0.0
        return run_goal(n, goal_handle, result, 'policy execution', Result.STOPPED,
                        lambda ex: self._run(goal_handle, ex, result, run),
                        lambda ex, code, message: _manifest_results(ex, run, result, code,
                                                                    message),
                        self._finish, after=after)

    def _finish(self, goal_handle, result, code, message):
        return finish_goal(self.node, goal_handle, result, code, message, ERROR_NAMES,
                           'execute_policy', Result.NONE, Result.CANCELED, extra=(
                               f' (task_success {result.task_success}, steps {result.steps}, '
                               f'{result.duration:.2f} s)'))

    def _new_stage(self, request):
        n = self.node
        return n.recorder.new_stage('execute_policy', inputs={
            'checkpoint_path': str(request.checkpoint_path),
            'task': str(request.task),
            'task_goal': [float(v) for v in request.task_goal],
            'max_duration': float(request.max_duration),
            'record': bool(request.record),
        }, parameters={
            'tracked_objects_topic': n.resolve_topic_name(n.p.tracked_objects_topic),
            **{name: getattr(n.p, name) for name in _POLICY_PARAMETERS}})

    def _abort(self, ex: Execution, kind_or_code, message: str, hold: bool = True) -> Abort:
        """An Abort for the policy goal; holds the arm first when something was sent."""
        code = KIND_CODES.get(kind_or_code, kind_or_code)
        if hold and ex.t0 is not None:
            self.node.send_stop(ex)
            message += '; holding position'
        return Abort(code, message)

    def _prepare(self, request, run: PolicyRun, stage) -> None:
        """Load the checkpoint and plan the episode (nothing moves); run.t_start is zero."""
        from ...core import policy_execution as pe
        n, p = self.node, self.node.p
        robot, limits, fk_lip = n.model()
        if robot is None or limits is None:
            raise Abort(Result.STOPPED, n.robot_error or 'no robot model')
        loaded = pe.load_policy(request.checkpoint_path, robot, request.task.strip())
        run.gate = pe.SafetyGate(limits, lambda x: robot.fk(x), n.workspace,
                                 p.velocity_limit_scale, p.start_tolerance,
                                 p.workspace_check_step, fk_lip)
        settings = pe.ExecutionSettings(
            approach_height=p.approach_height,
            approach_velocity_fraction=p.approach_velocity_fraction,
            approach_tip_speed=p.approach_tip_speed)
        run.episode = pe.make_episode(loaded, run.gate, list(request.task_goal), settings)
        run.t_start = n.now()
        max_duration = finite_or(request.max_duration, p.policy_max_duration)
        run.deadline = run.t_start + max_duration
        if stage is not None:
            stage.inputs.update({'task_resolved': run.episode.task.name,
                                 'object_id': run.episode.object_id,
                                 'max_duration_used': max_duration,
                                 'checkpoint_metadata': loaded.config.get('metadata', {})})

    def _run(self, goal_handle, ex: Execution, result, run: PolicyRun):
        import torch  # the policy runtime: imported on the first policy goal, not at start-up
        torch.set_num_threads(1)
        from ...core import policy_execution as pe
        n, req = self.node, goal_handle.request
        ex.stage = stage = self._new_stage(req)
        try:
            self._prepare(req, run, stage)
        except pe.ExecutionError as exc:
            raise self._abort(ex, exc.kind, exc.message) from None
        ex.tracked_topic = n.resolve_topic_name(n.p.tracked_objects_topic)
        ex.poses = pe.PoseBuffer(run.episode.object_id)
        if stage is not None and (n.p.record or req.record):
            run.steps_topic = n.resolve_topic_name(POLICY_STEPS_TOPIC)
            n.recorder.open_bag(ex, stage, 'episode', [(ex.tracked_topic, TRACKED_OBJECTS_TYPE),
                                                       (run.steps_topic, POLICY_STEP_TYPE)])
        elif req.record:
            ex.bag_error = "recording needs the run_dir parameter (it is '')"
        with subscribed(n, TrackedObjects, ex.tracked_topic, self.on_tracked_objects,
                        qos.SENSOR_DATA, callback_group=self._tracked_cb):
            self._episode(goal_handle, ex, run)
        result.task_success = bool(run.episode.success(run.final_pose))
        return Result.NONE, ''

    def _episode(self, goal_handle, ex: Execution, run: PolicyRun) -> None:
        """First observation -> the episode's motions -> (closed loop) -> observed outcome."""
        from ...core import policy_execution as pe
        n = self.node
        self._state_or_abort(Result.OBSERVATION_UNAVAILABLE)
        problem = n.backend.ready()
        if problem:
            raise Abort(Result.STOPPED, f'controller unavailable: {problem}')
        run.first_pose = self._await_pose(goal_handle, ex, run, wait=n.p.observation_wait)
        run.episode.other_pose = lambda oid: ex.poses.fresh_other(
            oid, n.now(), n.p.observation_timeout)
        q = self._state_or_abort(Result.OBSERVATION_UNAVAILABLE)
        try:
            motions = run.episode.start(q, run.first_pose)
        except pe.ExecutionError as exc:
            raise self._abort(ex, exc.kind, exc.message) from None
        finally:
            self._record_steps(ex, run)
        if any(m.grip for m in motions):
            self.jaw.ready(ex, motions)
        for motion in motions:
            if motion.grip:
                self.jaw.grip(goal_handle, ex, run, motion)
            self._send(ex, run, motion)
            self._wait_motion(goal_handle, ex, run, motion.label, motion.settle,
                              motion.wait_at_goal)
        if not run.episode.one_shot:
            self._loop(goal_handle, ex, run)
        self._observe_outcome(goal_handle, ex, run)

    def _observe_outcome(self, goal_handle, ex: Execution, run: PolicyRun) -> None:
        """The outcome: a pose measured after the last motion (and its settle time) ended
        (and, for a grasping task, the jaw's position then, from /joint_states)."""
        if hasattr(run.episode, 'jaw_position'):
            run.episode.jaw_position = self.node.jaw_state(run.episode.task.jaw.joint)[0]
        last = run.motions[-1] if run.motions else None
        after = last[1] + last[2] + last[3] if last else -math.inf
        try:
            run.final_pose = self._await_pose(goal_handle, ex, run, after=after, hold=False,
                                              wait=self.node.p.observation_wait)
        except Abort as exc:
            if exc.code != Result.OBSERVATION_UNAVAILABLE:
                raise               # stop, cancel, max_duration... while waiting for it
            run.final_pose = ex.poses.pose
            run.final_pose_note = exc.message
            raise Abort(Result.OBSERVATION_UNAVAILABLE,
                        f'the episode ran, but its outcome was not observed: {exc.message}'
                        ) from None

    def _state_or_abort(self, code):
        q, why = self.node.current_state()
        if q is None:
            raise Abort(code, why)
        return q

    def _loop(self, goal_handle, ex: Execution, run: PolicyRun) -> None:
        """Closed loop: observation -> action -> segment, once per control period."""
        from ...core import policy_execution as pe
        n, episode = self.node, run.episode
        next_tick = n.now()
        while True:
            pose = ex.poses.fresh(n.now(), n.p.observation_timeout)
            if pose is None:
                pose = self._await_pose(goal_handle, ex, run)
            try:
                motion = episode.step(pose)
            except pe.ExecutionError as exc:
                raise self._abort(ex, exc.kind, exc.message) from None
            finally:
                self._record_steps(ex, run)
            if motion is None:
                break
            self._send(ex, run, motion)
            next_tick = max(next_tick + episode.period, n.now())
            self._watch(goal_handle, ex, run, lambda now, t=next_tick: now >= t, next_tick)
        if run.motions:   # the last segment: reach its point
            self._wait_motion(goal_handle, ex, run, run.motions[-1][0])

    # ------------------------------------------------------------------ motions

    def _send(self, ex: Execution, run: PolicyRun, motion) -> None:
        """Validate ``motion`` against the measured position and send it (JTC replaces what
        runs from the new start time on)."""
        from ...core import policy_execution as pe
        n = self.node
        q, why = n.current_state()
        if q is None:
            raise self._abort(ex, Result.OBSERVATION_UNAVAILABLE, why)
        try:
            validated = run.gate.validate(motion.trajectory, q, motion.label)
        except pe.ExecutionError as exc:
            raise self._abort(ex, exc.kind, exc.message) from None
        delay = n.p.start_delay
        with n.lock:
            if ex.stop_reason:
                raise Abort(Result.STOPPED, ex.stop_reason)
            if not n.armed:
                raise self._abort(
                    ex, Result.NOT_ARMED if ex.t0 is None else Result.STOPPED,
                    'executor was disarmed during the episode' if ex.t0 is not None else
                    'executor was disarmed before the motion started')
            if ex.monitor is None:
                ex.monitor = es.TrackingMonitor(validated.reference, n.p.max_tracking_error,
                                                n.p.goal_tolerance,
                                                validated.command.joint_names)
            else:   # one monitor for the episode: statistics over every motion
                ex.monitor.reference = validated.reference
            sent = n.now()
            if ex.t0 is None:
                ex.last_state_time = ex.last_measured = sent
            ex.t0 = sent + delay
            run.motions.append([motion.label, ex.t0, validated.reference.duration,
                                motion.settle])
        msg = trajectory_to_msg(validated.command, start_time=ex.t0 if delay > 0 else None)
        try:
            n.backend.send(msg)
        except BackendError as exc:
            raise self._abort(ex, Result.STOPPED, f'controller unavailable: {exc}') from None
        if ex.bag is not None:
            n.recorder.record(ex, n.backend.record_topic, msg, sent)

    def _wait_motion(self, goal_handle, ex: Execution, run: PolicyRun, label: str,
                     settle: float = 0.0, wait_at_goal: bool = True) -> None:
        """Supervise until the last motion sent has ended, the arm is at its last point (when
        asked) and ``settle`` s have passed; TIMEOUT when the point is not reached in time."""
        n = self.node
        _label, t0, dur, _ = run.motions[-1]
        margin = n.p.goal_timeout_margin

        def done(now):
            t = now - t0
            with n.lock:
                at_goal = ex.monitor.at_goal()
            if t >= dur + settle and (at_goal or not wait_at_goal):
                return True
            if t >= dur + settle + margin:
                with n.lock:
                    final = ex.monitor.summary().final_error
                raise self._abort(ex, Result.TIMEOUT, (
                    f'{label}: not within goal_tolerance {n.p.goal_tolerance} rad of the '
                    f'last point {margin:.2f} s after it ended (final error {final:.4f} rad)'))
            return False
        self._watch(goal_handle, ex, run, done)

    def _await_pose(self, goal_handle, ex: Execution, run: PolicyRun,
                    after: float = -math.inf, hold: bool = True, wait: float | None = None):
        """A pose of the episode's object measured within observation_timeout (and not before
        ``after``), waiting up to ``wait`` s (default observation_timeout) for one;
        OBSERVATION_UNAVAILABLE. The arm is at rest when ``wait`` is longer: the first
        observation pays the new subscription's discovery and the tracker's next frame
        (measured in `make demo` at load 5-10: over 1 s, 3 of 3 runs failed)."""
        n = self.node
        timeout = n.p.observation_timeout
        waited = timeout if wait is None else max(wait, timeout)
        deadline = n.now() + waited
        got = []

        def ready(now):
            with n.lock:
                pose = ex.poses.fresh(now, timeout, after)
            if pose is not None:
                got.append(pose)
                return True
            return now >= deadline
        self._watch(goal_handle, ex, run, ready, deadline)
        if not got:
            with n.lock:
                why = ex.poses.describe_missing(ex.tracked_topic, waited)
            if after > -math.inf and ex.poses.pose is not None:
                why += f' (want one measured after {after:.3f}, the end of the last motion)'
            raise self._abort(ex, Result.OBSERVATION_UNAVAILABLE, why, hold=hold)
        return got[0]

    def _watch(self, goal_handle, ex: Execution, run: PolicyRun, until,
               wake_at: float | None = None) -> None:
        """Supervise (supervision.check_motion and max_duration) and publish feedback at
        FEEDBACK_PERIOD until ``until(now)`` is true."""
        n = self.node
        feedback = ExecutePolicy.Feedback()
        tick = time.monotonic()
        while True:
            tick = max(tick + FEEDBACK_PERIOD, time.monotonic() - FEEDBACK_PERIOD)
            wait = tick - time.monotonic()
            if wake_at is not None:
                wait = min(wait, wake_at - n.now())
            ex.wake.wait(max(0.0, wait))
            ex.wake.clear()
            if not rclpy.ok():
                raise Abort(Result.STOPPED, 'node shutting down')
            now = n.now()
            fault = check_motion(n, ex, goal_handle, now, 'the episode', now - run.t_start)
            if fault is not None:       # STOPPED: ~/stop already sent the stop ramp
                raise self._abort(ex, fault.kind, fault.message, hold=fault.kind != 'STOPPED')
            if now > run.deadline:
                raise self._abort(ex, Result.TIMEOUT, (
                    f'episode ran past max_duration {run.deadline - run.t_start:.1f} s'))
            feedback.step = int(run.episode.steps)
            feedback.elapsed = float(now - run.t_start)
            goal_handle.publish_feedback(feedback)
            if until(now):
                return

    # ------------------------------------------------------------------ observations

    def on_tracked_objects(self, msg: TrackedObjects) -> None:
        from ...core.policy_execution import ExecutionError, ObjectPose
        n = self.node
        now = n.now()
        ex = n.active
        if ex is None or ex.poses is None:
            return
        if ex.bag is not None:
            n.recorder.record(ex, ex.tracked_topic, msg, now)
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        # The measurement time: the stamp when it is plausible on our clock (see joint states).
        t = stamp if -MAX_EXTRAPOLATION <= now - stamp <= TRACKING_STAMP_WINDOW else now
        poses = []
        for p in msg.poses:
            o = p.orientation
            try:
                poses.append(ObjectPose.from_xyz_quat(
                    (p.position.x, p.position.y, p.position.z), (o.w, o.x, o.y, o.z), t))
            except ExecutionError:
                poses.append(None)
        with n.lock:
            found = ex.poses.add(list(msg.ids)[:len(poses)], poses, t, now)
        if found:
            ex.wake.set()

    def _record_steps(self, ex: Execution, run: PolicyRun) -> None:
        """The episode's actions decided since the last call, as PolicyStep messages."""
        n, episode = self.node, run.episode
        if ex.bag is None or episode is None or not run.steps_topic:
            return
        now = n.now()
        config = json.dumps(episode.task.config(), default=str)
        for rec in episode.records[run.steps_recorded:]:
            msg = PolicyStep(task=episode.task.name, object_id=episode.object_id,
                             step=int(rec['step']), observation=rec['observation'],
                             action=rec['action'], task_goal=rec['task_goal'],
                             object_pose=rec['object_pose'], tool_start=rec['tool_start'],
                             task_config=config)
            msg.header.stamp = n.get_clock().now().to_msg()
            msg.header.frame_id = 'world'
            n.recorder.record(ex, run.steps_topic, msg, now)
        run.steps_recorded = len(episode.records)


def _pose_dict(p):
    return None if p is None else {'xyz': [float(v) for v in p.position],
                                   'quat_wxyz': [float(v) for v in p.quat],
                                   'yaw': p.yaw, 'stamp': p.stamp}


def _manifest_results(ex: Execution, run: PolicyRun, result, code, message) -> dict:
    """The ``results`` of an execute_policy manifest."""
    tracking = {}
    if ex.monitor is not None:
        s = ex.monitor.summary()
        tracking = {'max_tracking_error': s.max_error, 'rms_tracking_error': s.rms_error,
                    'final_error': s.final_error if math.isfinite(s.final_error) else None,
                    'worst_joint': s.worst_joint, 'tracking_samples': s.samples}
    final_error = None
    if run.episode is not None and run.final_pose is not None and \
            getattr(run.episode, 'goal_xy', None) is not None:
        final_error = run.episode.error(run.final_pose)
    poses = ex.poses
    return {
        'error_code': int(code), 'error_name': ERROR_NAMES.get(code, str(code)),
        'error_msg': message, 'task_success': bool(result.task_success),
        'steps': int(result.steps), 'duration': float(result.duration),
        'bag_path': result.bag_path, 'recording_problem': ex.bag_error,
        **Recorder.state_summary(ex),
        'episode': run.episode.summary() if run.episode is not None else {},
        'final_goal_error': final_error,
        'first_object_pose': _pose_dict(run.first_pose),
        'final_object_pose': _pose_dict(run.final_pose),
        'final_pose_note': run.final_pose_note,
        'motions': [{'label': m[0], 'start': m[1], 'duration': m[2], 'settle': m[3]}
                    for m in run.motions],
        'tracked_messages': poses.messages if poses is not None else 0,
        'tracked_ids_seen': sorted(poses.ids_seen) if poses is not None else [],
        **tracking,
    }
