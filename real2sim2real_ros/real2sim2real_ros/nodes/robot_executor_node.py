"""robot_executor: safe execution of joint trajectories on a ros2_control-style robot.

Starts DISARMED. ``~/arm`` needs a robot model (``robot_description_file`` or the latched
``robot_description`` topic), fresh ``joint_states`` for every joint and a reachable
controller. ``~/execute_trajectory`` validates the whole trajectory (joint names, position,
velocity and workspace limits, timing; see core/execution_safety.py) BEFORE anything is sent;
a refused goal is accepted and then aborted with its error code, so the client learns why.
While it runs the executor compares ``joint_states`` with the commanded trajectory and
aborts (holding the arm) on tracking error, timeout, controller failure or stale states.
``~/stop`` brings the arm to rest at once (stop ramp), ends the goal with STOPPED and
disarms; ``~/disarm`` during a motion does the same.

Start-state semantics (ros2_control JTC): the current position is an implicit point at
t = 0; a first point with time_from_start > 0 is reached from it, one at t = 0 must be within
``start_tolerance`` of it. header.stamp is the start time, ``start_delay`` seconds after the
command is sent (JTC semantics: the controller holds until then, so the delivery delay does not
shift the motion and a recording knows its start on the controller's clock); a start_delay
of 0 sends header.stamp = 0 ("start now"). Stop ramps always start now.

Each execution gets ``<run_dir>/execute_<n>/manifest.json`` (inputs, limits used, results)
and, when recording, ``trajectory.mcap`` (rosbag2 MCAP folder: commands + joint states).
Exit code 2 with one line on stderr for unusable parameters (ConfigurationError).
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import rclpy
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.serialization import serialize_message
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from real2sim2real_msgs.action import ExecuteTrajectory
from real2sim2real_msgs.srv import GetStatus

from .. import qos
from ..core import execution_safety as es
from ..executor_backends import (
    BACKENDS,
    BackendError,
    make_backend,
    trajectory_from_msg,
    trajectory_to_msg,
)
from ..params import declare
from ..ros_main import ConfigurationError, run_node
from ..state_listener import StateListener

R = ExecuteTrajectory.Result
ERROR_NAMES = {getattr(R, n): n for n in (
    'NONE', 'NOT_ARMED', 'INVALID_TRAJECTORY', 'JOINT_LIMIT_VIOLATION',
    'VELOCITY_LIMIT_VIOLATION', 'WORKSPACE_VIOLATION', 'TRACKING_ERROR', 'TIMEOUT', 'STOPPED',
    'CANCELED', 'BACKEND_UNAVAILABLE', 'BUSY')}
FEEDBACK_PERIOD = 0.05      # s: ~20 Hz feedback and supervision
MAX_EXTRAPOLATION = 0.1     # s: stop points are extrapolated from a state at most this old
TRACKING_STAMP_WINDOW = 2.0  # s: older joint_states stamps are implausible (other clock)


class _Abort(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class _Execution:
    """One running goal: what the joint_states callback and the services need to reach."""
    goal_id: str
    monitor: es.TrackingMonitor | None = None
    t0: float | None = None            # node-clock seconds when the trajectory starts
    stop_reason: str = ''              # set by ~/stop or ~/disarm
    bag: object = None                 # core.bag_io.BagWriter while recording
    bag_error: str = ''
    wake: threading.Event = field(default_factory=threading.Event)
    last_state_time: float = 0.0
    worst_joint: str = ''
    samples: int = 0
    frozen: bool = False               # tracking statistics stop at the stop/abort command


class RobotExecutorNode(Node):
    def __init__(self):
        super().__init__('robot_executor')
        self._lock = threading.RLock()
        self._armed = False
        self._active: _Execution | None = None
        self._robot = None
        self._limits: es.JointLimits | None = None
        self._robot_error = 'waiting for robot_description'
        self._state_pos: np.ndarray | None = None
        self._state_vel: np.ndarray | None = None
        self._state_seen: np.ndarray | None = None   # per joint, node-clock time of last update
        self._state_stamp = -math.inf                 # when the latest state was measured
        self._joint_index: dict[str, int] = {}
        self._executions = 0
        self._read_parameters()

        cb = ReentrantCallbackGroup()
        self._backend = make_backend(self.p_backend, self, self.p_controller, cb)
        # /joint_states (100+ Hz) on a helper node of its own: see state_listener.py.
        self._state_listener = StateListener(self, JointState, self.p_joint_states_topic,
                                             self._on_joint_states, qos.STATE_RECORDING)
        if self.p_description_file:
            self._load_robot(self.p_description_file, fatal=True)
        else:
            # Loading a URDF can take a while (meshes); keep it off the state callbacks.
            self.create_subscription(String, 'robot_description', self._on_description,
                                     qos.LATCHED,
                                     callback_group=MutuallyExclusiveCallbackGroup())
        self.create_service(Trigger, '~/arm', self._on_arm, callback_group=cb)
        self.create_service(Trigger, '~/disarm', self._on_disarm, callback_group=cb)
        self.create_service(Trigger, '~/stop', self._on_stop, callback_group=cb)
        self.create_service(GetStatus, '~/get_status', self._on_status, callback_group=cb)
        self._action = ActionServer(
            self, ExecuteTrajectory, '~/execute_trajectory', self._execute,
            goal_callback=lambda _goal: GoalResponse.ACCEPT,
            cancel_callback=lambda _goal: CancelResponse.ACCEPT, callback_group=cb)
        self.get_logger().info(
            f'robot_executor ready (DISARMED), backend {self.p_backend}, controller '
            f'{self.p_controller}, robot: {self._robot_error or self._robot.name}')

    # ------------------------------------------------------------------ parameters

    def _read_parameters(self):
        try:
            self.p_backend = declare(
                self, 'backend', 'trajectory_topic',
                'How trajectories reach the robot: trajectory_topic (<controller>/joint_trajectory'
                '), follow_joint_trajectory (control_msgs action), moveit (move_group execute).',
                choices=BACKENDS, read_only=True)
            self.p_controller = declare(
                self, 'controller_name', 'joint_trajectory_controller',
                'ros2_control JointTrajectoryController name (topic/action prefix).',
                read_only=True)
            self.p_description_file = declare(
                self, 'robot_description_file', '',
                "URDF file for limits and FK; '' = wait for the latched robot_description topic.",
                read_only=True)
            self.p_tip_link = declare(self, 'tip_link', '',
                                      "Link whose origin must stay in the workspace; '' = URDF "
                                      'chain tip.', read_only=True)
            ws_min = declare(self, 'workspace_min', [-1.5, -1.5, -0.5],
                             'Workspace box minimum x, y, z (m) of the tip in the base frame.')
            ws_max = declare(self, 'workspace_max', [1.5, 1.5, 1.5],
                             'Workspace box maximum x, y, z (m) of the tip in the base frame.')
            self.p_margin = declare(self, 'goal_timeout_margin', 2.0,
                                    'Seconds allowed past the trajectory duration to reach the '
                                    'goal before TIMEOUT.', lo=0.0, hi=600.0)
            self.p_max_err = declare(self, 'max_tracking_error', 0.15,
                                     'Abort (and hold) when any joint is this far (rad) from the '
                                     'commanded trajectory.', lo=0.001, hi=3.2)
            self.p_goal_tol = declare(self, 'goal_tolerance', 0.02,
                                      'Success when every joint is within this (rad) of the '
                                      'last point.', lo=0.0001, hi=1.0)
            self.p_start_tol = declare(self, 'start_tolerance', 0.05,
                                       'A first point at time_from_start 0 must be this close '
                                       '(rad) to the current position.', lo=0.0001, hi=1.0)
            self.p_decel = declare(self, 'stop_decel_time', 0.01,
                                   'Stop ramp length (s); <= control_period: hold the current '
                                   'position after one control period.', lo=0.0, hi=5.0)
            self.p_period = declare(self, 'control_period', 0.01,
                                    'Controller period (s): hold/stop point spacing.',
                                    lo=0.001, hi=1.0)
            self.p_vel_scale = declare(self, 'velocity_limit_scale', 1.0,
                                       'Fraction of the URDF velocity limits trajectories may use.',
                                       lo=0.001, hi=1.0)
            self.p_ws_step = declare(self, 'workspace_check_step', 0.05,
                                     'Max joint step (rad) between workspace FK samples along '
                                     'a segment.', lo=0.001, hi=1.0)
            self.p_state_timeout = declare(self, 'state_timeout', 0.5,
                                           'joint_states older than this (s) count as missing.',
                                           lo=0.01, hi=10.0)
            self.p_run_dir = declare(self, 'run_dir', '',
                                     "Run directory for execute_<n> manifests and bags; '' = "
                                     'none (no manifests, no recording).')
            self.p_start_delay = declare(
                self, 'start_delay', 0.05,
                'Seconds after sending that a trajectory starts (header.stamp = now + this; '
                'more than the delivery delay). 0 = header.stamp 0, start on arrival.',
                lo=0.0, hi=1.0)
            self.p_record = declare(self, 'record', False,
                                    'Record every execution (goals may also ask with record).')
            self.p_joint_states_topic = declare(self, 'joint_states_topic', 'joint_states',
                                                'Joint state topic to monitor.', read_only=True)
        except Exception as exc:  # rclpy range errors, wrong types, bad choices
            raise ConfigurationError(f'robot_executor parameters: {exc}') from None
        try:
            self._workspace = es.Workspace(np.array(ws_min, float), np.array(ws_max, float))
        except (es.SafetyConfigError, ValueError, TypeError) as exc:
            raise ConfigurationError(f'workspace_min/workspace_max: {exc}') from None
        if not self.p_controller.strip('/'):
            raise ConfigurationError('controller_name must not be empty')
        # Tunables may change at run time (ros2 param set); a running goal keeps its values
        # where it copied them. rclpy checks the ranges; the workspace box is checked here.
        self.add_on_set_parameters_callback(self._check_new_parameters)
        self.add_post_set_parameters_callback(self._apply_new_parameters)

    _DYNAMIC = {
        'goal_timeout_margin': 'p_margin', 'max_tracking_error': 'p_max_err',
        'goal_tolerance': 'p_goal_tol', 'start_tolerance': 'p_start_tol',
        'stop_decel_time': 'p_decel', 'control_period': 'p_period',
        'velocity_limit_scale': 'p_vel_scale', 'workspace_check_step': 'p_ws_step',
        'state_timeout': 'p_state_timeout', 'run_dir': 'p_run_dir', 'record': 'p_record',
        'start_delay': 'p_start_delay',
    }

    def _check_new_parameters(self, params):
        from rcl_interfaces.msg import SetParametersResult
        values = {p.name: p.value for p in params}
        if 'workspace_min' in values or 'workspace_max' in values:
            lo = values.get('workspace_min', self._workspace.minimum)
            hi = values.get('workspace_max', self._workspace.maximum)
            try:
                es.Workspace(np.array(lo, float), np.array(hi, float))
            except (es.SafetyConfigError, ValueError, TypeError) as exc:
                return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    def _apply_new_parameters(self, params):
        for p in params:
            if p.name in self._DYNAMIC:
                setattr(self, self._DYNAMIC[p.name], p.value)
            elif p.name in ('workspace_min', 'workspace_max'):
                lo = self.get_parameter('workspace_min').value
                hi = self.get_parameter('workspace_max').value
                self._workspace = es.Workspace(np.array(lo, float), np.array(hi, float))

    # ------------------------------------------------------------------ robot model

    def _load_robot(self, source: str, fatal: bool):
        from ..core.robot_description import load_robot
        try:
            robot = load_robot(source, tip_link=self.p_tip_link or None)
            limits = es.JointLimits.from_robot(robot)
            robot.fk(np.clip(np.zeros(len(limits.names)), limits.lower, limits.upper))
        except Exception as exc:  # noqa: BLE001 - any bad URDF is a configuration problem
            text = f'robot description unusable: {str(exc).splitlines()[0] if str(exc) else exc}'
            if fatal:
                raise ConfigurationError(text) from None
            with self._lock:
                if self._robot is None:
                    self._robot_error = text
                else:
                    text += f'; keeping the previous model ({self._robot.name})'
            self.get_logger().error(text)
            return
        with self._lock:
            self._robot, self._limits, self._robot_error = robot, limits, ''
            self._joint_index = {n: i for i, n in enumerate(limits.names)}
            self._state_pos = np.full(len(limits.names), np.nan)
            self._state_vel = np.zeros(len(limits.names))
            self._state_stamp = -math.inf
            self._state_seen = np.full(len(limits.names), -math.inf)
        self.get_logger().info(f'robot {robot.name}: joints {list(limits.names)}, tip '
                               f'{robot.tip_link}')

    def _on_description(self, msg: String):
        if self._active is not None:
            self.get_logger().warning('robot_description changed during an execution; the running '
                                   'goal keeps the limits it was validated with')
        self._load_robot(msg.data, fatal=False)

    # ------------------------------------------------------------------ joint states

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_joint_states(self, msg: JointState):
        now = self._now()
        with self._lock:
            limits = self._limits
            if limits is None:
                return
            index = self._joint_index
            for k, name in enumerate(msg.name):
                i = index.get(name)
                if i is None or k >= len(msg.position) or not math.isfinite(msg.position[k]):
                    continue
                self._state_pos[i] = msg.position[k]
                self._state_vel[i] = msg.velocity[k] if k < len(msg.velocity) else 0.0
                self._state_seen[i] = now
            stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
            # The measurement time: the header stamp when it is plausible on our clock.
            self._state_stamp = stamp if 0.0 <= now - stamp <= MAX_EXTRAPOLATION else now
            ex = self._active
            q = self._state_pos.copy()
            # Tracking compares at the measurement time. A cell whose clock lags (a loaded
            # machine) stamps old times and started the trajectory late by the same amount,
            # so any plausible stamp (up to TRACKING_STAMP_WINDOW old) is the right one.
            measured = stamp if 0.0 <= now - stamp <= TRACKING_STAMP_WINDOW else now
            complete = bool(np.all(self._state_seen > -math.inf))
        if ex is None:
            return
        if ex.bag is not None:
            self._record(ex, self._joint_states_topic(), msg, now)
        if ex.monitor is not None and ex.t0 is not None and complete:
            with self._lock:
                if not ex.frozen:
                    # Compare at the measurement time (header stamp), not the receive time:
                    # a sample that waited in the queue is not a tracking error.
                    ex.monitor.update(measured - ex.t0, q)
                ex.last_state_time = now

    def _joint_states_topic(self) -> str:
        name = self.p_joint_states_topic
        return name if name.startswith('/') else (
            self.get_namespace().rstrip('/') + '/' + name)

    def _current_state(self):
        """(positions, velocities) in robot order if every joint is fresh, else (None, why)."""
        with self._lock:
            if self._limits is None:
                return None, self._robot_error
            age = self._now() - self._state_seen
            stale = [n for n, a in zip(self._limits.names, age) if not a <= self.p_state_timeout]
            if stale:
                return None, (f'no joint_states within {self.p_state_timeout} s for joints '
                              f'{stale} on {self._joint_states_topic()}')
            return self._state_pos.copy(), self._state_vel.copy()

    # ------------------------------------------------------------------ services

    def _on_arm(self, _req, resp):
        with self._lock:
            if self._armed:
                resp.success, resp.message = True, 'already armed'
                return resp
        q, why = self._current_state()
        problem = why if q is None else self._backend.ready()
        if problem is None:
            with self._lock:
                self._armed = True
            self.get_logger().info('ARMED')
        resp.success = problem is None
        resp.message = 'armed' if problem is None else f'not armed: {problem}'
        return resp

    def _on_disarm(self, _req, resp):
        with self._lock:
            was_running = self._active is not None and self._active.t0 is not None
        if was_running:
            resp.success, resp.message = self._stop('disarmed during execution')
        else:
            with self._lock:
                self._armed = False
            resp.success, resp.message = True, 'disarmed'
        self.get_logger().info('DISARMED')
        return resp

    def _on_stop(self, _req, resp):
        resp.success, resp.message = self._stop('stop requested')
        return resp

    def _stop(self, reason: str) -> tuple[bool, str]:
        """Disarm, command the arm to rest, and end the running goal with STOPPED."""
        with self._lock:
            self._armed = False
            ex = self._active
            if ex is not None:
                ex.stop_reason = reason
        sent = self._send_stop(ex)
        if ex is not None:
            ex.wake.set()
        self.get_logger().warning(f'STOP: {reason}; disarmed; {sent}')
        return sent.startswith('stop trajectory sent'), f'disarmed; {sent}'

    def _send_stop(self, ex: _Execution | None) -> str:
        """Publish the stop ramp from the latest state; returns what was done."""
        with self._lock:
            if ex is not None:
                ex.frozen = True
            limits = self._limits
            q = None if self._state_pos is None else self._state_pos.copy()
            v = None if self._state_vel is None else self._state_vel.copy()
            age = self._now() - self._state_stamp
        if limits is None or q is None or not np.all(np.isfinite(q)):
            return 'no joint state known: nothing to hold'
        # The arm kept moving since that state was measured (late callbacks on a loaded
        # machine): start the stop from where it is now, or the hold would pull it back.
        if v is not None and 0.0 < age <= MAX_EXTRAPOLATION:
            q = q + v * age
        ramp = es.stop_ramp(q, v, self.p_decel, self.p_period, limits)
        msg = trajectory_to_msg(ramp)
        try:
            self._backend.hold(msg)
        except BackendError as exc:
            return f'stop trajectory NOT sent: {exc}'
        if ex is not None and ex.bag is not None:
            self._record(ex, self._backend.record_topic, msg, self._now())
        return f'stop trajectory sent ({len(ramp.times)} point(s) over {ramp.times[-1]:.3f} s)'

    def _on_status(self, _req, resp):
        with self._lock:
            resp.armed = self._armed
            resp.executing = self._active is not None
            problem = self._robot_error
        resp.backend = self._backend.name
        q, why = self._current_state()
        resp.success = not problem and q is not None
        resp.message = problem or (why if q is None else (
            f'{"ARMED" if resp.armed else "DISARMED"}, '
            f'{"executing" if resp.executing else "idle"}, executions so far: {self._executions}'))
        return resp

    # ------------------------------------------------------------------ execution

    def _execute(self, goal_handle):
        result = R()
        with self._lock:
            if not self._armed:
                return self._finish(goal_handle, result, R.NOT_ARMED,
                                    'executor is DISARMED: call ~/arm first')
            if self._active is not None:
                return self._finish(goal_handle, result, R.BUSY,
                                    'another trajectory is executing')
            ex = _Execution(goal_id=bytes(goal_handle.goal_id.uuid).hex())
            self._active = ex
        stage = None
        try:
            stage = self._new_stage(goal_handle.request)
            code, message = self._run(goal_handle, ex, result, stage)
        except _Abort as exc:
            code, message = exc.code, exc.message
        except Exception as exc:  # noqa: BLE001 - bad input must never kill the node
            self.get_logger().error(f'execution failed unexpectedly: {exc!r}')
            if ex.t0 is not None:
                self._send_stop(ex)
            code, message = R.BACKEND_UNAVAILABLE, f'internal error: {exc}'
        finally:
            with self._lock:
                self._active = None
        self._close_bag(ex, result)
        self._fill_stats(ex, result)
        if stage is not None:
            self._write_manifest(stage, ex, result, code, message)
        return self._finish(goal_handle, result, code, message)

    def _finish(self, goal_handle, result, code, message):
        result.error_code = code
        result.error_msg = message
        if code == R.NONE:
            goal_handle.succeed()
        elif code == R.CANCELED and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        else:
            goal_handle.abort()
        text = f'execute_trajectory: {ERROR_NAMES.get(code, code)}' + (
            f': {message}' if message else '')
        # rclpy forbids one logging call site with two severities: two calls.
        if code == R.NONE:
            self.get_logger().info(text)
        else:
            self.get_logger().warning(text)
        return result

    def _validate(self, request):
        q, why = self._current_state()
        if q is None:
            raise _Abort(R.BACKEND_UNAVAILABLE, why)
        problem = self._backend.ready()
        if problem:
            raise _Abort(R.BACKEND_UNAVAILABLE, problem)
        with self._lock:
            robot, limits = self._robot, self._limits
        try:
            traj = trajectory_from_msg(request.trajectory)
            return es.validate_trajectory(
                traj, limits, q, velocity_scale=self.p_vel_scale,
                fk=lambda x: robot.fk(x), workspace=self._workspace,
                start_tolerance=self.p_start_tol, workspace_step=self.p_ws_step), q
        except es.TrajectoryViolation as v:
            raise _Abort(getattr(R, v.kind), v.message) from None

    def _run(self, goal_handle, ex: _Execution, result, stage):
        validated, q0 = self._validate(goal_handle.request)
        if stage is not None:
            stage.inputs['start_position'] = q0.tolist()
            stage.inputs['start_prepended'] = validated.start_prepended
        req_margin = goal_handle.request.goal_timeout
        margin = req_margin if math.isfinite(req_margin) and req_margin > 0 else self.p_margin
        duration = validated.reference.duration
        monitor = es.TrackingMonitor(validated.reference, self.p_max_err, self.p_goal_tol,
                                     validated.command.joint_names)
        if stage is not None and (self.p_record or goal_handle.request.record):
            self._open_bag(ex, stage)
        elif goal_handle.request.record:
            ex.bag_error = "recording needs the run_dir parameter (it is '')"
        delay = self.p_start_delay
        with self._lock:
            if ex.stop_reason:
                raise _Abort(R.STOPPED, ex.stop_reason)
            if not self._armed:    # disarmed while the trajectory was being validated
                raise _Abort(R.NOT_ARMED, 'executor was disarmed before the motion started')
            ex.monitor = monitor
            sent = self._now()
            ex.t0 = sent + delay      # the monitor's t = 0: when the controller starts
            ex.last_state_time = sent
        msg = trajectory_to_msg(validated.command, start_time=ex.t0 if delay > 0 else None)
        try:
            self._backend.send(msg)
        except BackendError as exc:
            raise _Abort(R.BACKEND_UNAVAILABLE, str(exc)) from None
        if ex.bag is not None:
            self._record(ex, self._backend.record_topic, msg, sent)

        feedback = ExecuteTrajectory.Feedback()
        tick = time.monotonic()
        while True:
            # Fixed-rate supervision: sleep to the next tick, not a full period after the work.
            tick = max(tick + FEEDBACK_PERIOD, time.monotonic() - FEEDBACK_PERIOD)
            ex.wake.wait(max(0.0, tick - time.monotonic()))
            ex.wake.clear()
            if not rclpy.ok():
                raise _Abort(R.STOPPED, 'node shutting down')
            now = self._now()
            t = now - ex.t0
            with self._lock:
                sample = monitor.last
                at_goal = monitor.at_goal()
                stale = now - ex.last_state_time > self.p_state_timeout
                stop_reason = ex.stop_reason
            if stop_reason:
                raise _Abort(R.STOPPED, stop_reason)   # _stop already sent the stop ramp
            if goal_handle.is_cancel_requested:
                self._send_stop(ex)
                raise _Abort(R.CANCELED, f'canceled at t = {t:.2f} s; holding position')
            failure = self._backend.failure()
            if failure:
                self._send_stop(ex)
                raise _Abort(R.BACKEND_UNAVAILABLE, failure)
            if sample is not None and sample.exceeded:
                self._send_stop(ex)
                j = int(np.argmax(sample.error))
                raise _Abort(R.TRACKING_ERROR, (
                    f'tracking error {sample.max_error:.4f} rad on joint '
                    f'{validated.command.joint_names[j]!r} at t = {sample.time:.3f} s exceeds '
                    f'max_tracking_error {self.p_max_err} rad; holding position'))
            if stale:
                self._send_stop(ex)
                raise _Abort(R.BACKEND_UNAVAILABLE, (
                    f'joint_states stopped arriving for {now - ex.last_state_time:.2f} s '
                    f'during execution; stop sent'))
            if sample is not None:
                feedback.progress = float(min(1.0, max(0.0, t / duration)))
                feedback.tracking_error = float(sample.max_error)
                feedback.time_from_start = float(t)
                goal_handle.publish_feedback(feedback)
            if t >= duration and at_goal:
                return R.NONE, ''
            if t >= duration + margin:
                final = monitor.summary().final_error
                self._send_stop(ex)
                raise _Abort(R.TIMEOUT, (
                    f'not within goal_tolerance {self.p_goal_tol} rad of the last point '
                    f'{margin:.2f} s after the trajectory ended (final error {final:.4f} rad)'))

    # ------------------------------------------------------------------ artifacts

    def _new_stage(self, request):
        if not self.p_run_dir:
            return None
        from ..core.artifacts import RunDirectory
        with self._lock:
            limits = self._limits
            self._executions += 1
        traj = request.trajectory
        stage = RunDirectory(self.p_run_dir).new_stage('execute', inputs={
            'joint_names': list(traj.joint_names),
            'points': len(traj.points),
            'duration': (traj.points[-1].time_from_start.sec
                         + traj.points[-1].time_from_start.nanosec * 1e-9) if traj.points else 0,
            'record': bool(request.record),
            'goal_timeout': float(request.goal_timeout),
        }, parameters={
            'backend': self._backend.name,
            'controller_name': self.p_controller,
            'limits': limits.as_dict() if limits is not None else None,
            'velocity_limit_scale': self.p_vel_scale,
            'workspace_min': self._workspace.minimum.tolist(),
            'workspace_max': self._workspace.maximum.tolist(),
            'tip_link': self._robot.tip_link if self._robot is not None else '',
            'max_tracking_error': self.p_max_err,
            'goal_tolerance': self.p_goal_tol,
            'start_tolerance': self.p_start_tol,
            'goal_timeout_margin': self.p_margin,
            'stop_decel_time': self.p_decel,
            'control_period': self.p_period,
            'start_delay': self.p_start_delay,
        })
        return stage

    def _open_bag(self, ex: _Execution, stage):
        from ..core.bag_io import BagWriter
        try:
            bag = BagWriter(stage.folder / 'trajectory').open()
            bag.add_topic(self._backend.record_topic, self._backend.record_type)
            bag.add_topic(self._joint_states_topic(), 'sensor_msgs/msg/JointState')
        except Exception as exc:  # noqa: BLE001 - a broken recorder must not stop the motion
            ex.bag_error = f'recording disabled: {exc}'
            self.get_logger().error(ex.bag_error)
            return
        ex.bag = bag

    def _record(self, ex: _Execution, topic: str, msg, t: float):
        try:
            data = serialize_message(msg)
            with self._lock:
                if ex.bag is not None:
                    ex.bag.write_raw(topic, int(t * 1e9), data)
        except Exception as exc:  # noqa: BLE001
            ex.bag_error = f'recording failed: {exc}'

    def _close_bag(self, ex: _Execution, result):
        with self._lock:
            bag, ex.bag = ex.bag, None
        if bag is None:
            return
        try:
            result.bag_path = str(bag.close())
        except Exception as exc:  # noqa: BLE001
            ex.bag_error = f'closing the bag failed: {exc}'

    def _fill_stats(self, ex: _Execution, result):
        if ex.monitor is None or ex.t0 is None:
            return
        with self._lock:
            s = ex.monitor.summary()
        result.max_tracking_error = float(s.max_error)
        result.rms_tracking_error = float(s.rms_error)
        result.final_error = float(s.final_error) if math.isfinite(s.final_error) else -1.0
        result.duration = float(self._now() - ex.t0)
        ex.worst_joint = s.worst_joint
        ex.samples = s.samples

    def _write_manifest(self, stage, ex: _Execution, result, code, message):
        stage.results = {
            'error_code': int(code), 'error_name': ERROR_NAMES.get(code, str(code)),
            'error_msg': message,
            'max_tracking_error': result.max_tracking_error,
            'rms_tracking_error': result.rms_tracking_error,
            'final_error': result.final_error, 'duration': result.duration,
            'bag_path': result.bag_path, 'recording_problem': ex.bag_error,
            'worst_joint': ex.worst_joint, 'tracking_samples': ex.samples,
        }
        if result.bag_path:
            stage.add_output('bag', result.bag_path)
            for i, f in enumerate(sorted(Path(result.bag_path).glob('*.mcap'))):
                stage.add_output(f'bag_file_{i}', f)
        try:
            stage.finish()
        except OSError as exc:
            self.get_logger().error(f'writing {stage.folder}/manifest.json failed: {exc}')

    def close(self):
        with self._lock:
            ex = self._active
        if ex is not None and ex.t0 is not None:
            self._stop('node shutting down')
            time.sleep(self.p_period)
        self._state_listener.close()
        # Destroy the action server before the node so its goal-expiry timer cannot fire on a
        # half-destroyed server.
        self._action.destroy()


def _make_node():
    try:
        return RobotExecutorNode()
    except ConfigurationError as exc:
        exc.node_name = 'robot_executor'
        raise


def main(args=None):
    return run_node(_make_node, args=args)


if __name__ == '__main__':
    raise SystemExit(main())
