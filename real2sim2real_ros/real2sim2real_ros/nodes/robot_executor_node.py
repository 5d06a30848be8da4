"""robot_executor: safe execution of joint trajectories on a ros2_control-style robot.

Starts DISARMED. ``~/arm`` needs a robot model (``robot_description_file`` or the latched
``robot_description`` topic), fresh ``joint_states`` for every joint and a reachable
controller. ``~/execute_trajectory`` validates the whole trajectory (joint names, position,
velocity and workspace limits, timing; see core/execution_safety.py) BEFORE anything is sent;
a refused goal is accepted and then aborted with its error code, so the client learns why.
While it runs the executor compares ``joint_states`` with the commanded trajectory at each
state's measurement time (its header stamp, however late it arrives) and aborts, holding the
arm, on: TRACKING_ERROR (the arm does not follow), STALE_STATE (states arrive, but the latest
was more than 2 s old when it arrived: the executor's state is old, which says nothing about
the arm), BACKEND_UNAVAILABLE (the controller fails or joint_states stop arriving) or
TIMEOUT (counted on the measurements' clock); the last three disarm.
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

``~/execute_policy`` (real2sim2real_msgs/ExecutePolicy) runs a trained policy closed-loop with
the SAME safety rules (core/policy_execution.py does the planning): it refuses when DISARMED
(NOT_ARMED) or busy (BUSY), for a bad checkpoint or a task mismatch (INVALID_CHECKPOINT naming
the file; a task_goal that does not fit the task also gets INVALID_CHECKPOINT), and for a goal
outside the workspace (WORKSPACE_VIOLATION), all before anything moves. Observations: the
joint state above and the object's pose from ``tracked_objects_topic``
(real2sim2real_msgs/TrackedObjects from the object_tracker, subscribed only while a policy goal
runs); no pose younger than ``observation_timeout`` -> OBSERVATION_UNAVAILABLE. Every
trajectory the policy produces is validated against the measured position before it is sent
(LIMIT_VIOLATION / WORKSPACE_VIOLATION: not sent, the arm holds); tracking, stop/disarm, cancel
and the goal's ``max_duration`` (else ``policy_max_duration``; TIMEOUT) are supervised as for
trajectories. slide_to_target: one observation -> one action -> approach + strike, then the
outcome is observed after the task's settle time. push_to_pose: one observation -> action ->
segment per control period until the task's success rule or its max_steps. task_success is
the task's rule on the last tracked pose; ``duration`` and the feedback's ``elapsed`` count
from the checkpoint being loaded. ``<run_dir>/execute_policy_<n>/`` holds the manifest (the
episode's observations, actions, goal, tracking statistics) and, when recording,
``episode`` (MCAP: joint states, every commanded trajectory, tracked objects, and one
real2sim2real_msgs/PolicyStep per action on ``policy_steps``: observation, action, resolved
goal, the tracked pose behind it, the task and its config; what makes the bag a demonstration
for the policy_trainer, core/policies/demo_bags.py).
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

from real2sim2real_msgs.action import ExecutePolicy, ExecuteTrajectory
from real2sim2real_msgs.msg import PolicyStep, TrackedObjects
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
from ..subscriptions import subscribed

R = ExecuteTrajectory.Result
ERROR_NAMES = {getattr(R, n): n for n in (
    'NONE', 'NOT_ARMED', 'INVALID_TRAJECTORY', 'JOINT_LIMIT_VIOLATION',
    'VELOCITY_LIMIT_VIOLATION', 'WORKSPACE_VIOLATION', 'TRACKING_ERROR', 'TIMEOUT', 'STOPPED',
    'CANCELED', 'BACKEND_UNAVAILABLE', 'BUSY', 'STALE_STATE')}
P = ExecutePolicy.Result
POLICY_ERROR_NAMES = {getattr(P, n): n for n in (
    'NONE', 'NOT_ARMED', 'INVALID_CHECKPOINT', 'LIMIT_VIOLATION', 'WORKSPACE_VIOLATION',
    'TRACKING_ERROR', 'TIMEOUT', 'STOPPED', 'CANCELED', 'OBSERVATION_UNAVAILABLE', 'BUSY',
    'STALE_STATE')}
# core/policy_execution error kinds -> ExecutePolicy codes (a goal that does not fit the
# checkpoint's task has no code of its own: INVALID_CHECKPOINT, the message says which).
POLICY_KIND_CODES = {
    'INVALID_CHECKPOINT': P.INVALID_CHECKPOINT, 'INVALID_GOAL': P.INVALID_CHECKPOINT,
    'LIMIT_VIOLATION': P.LIMIT_VIOLATION, 'WORKSPACE_VIOLATION': P.WORKSPACE_VIOLATION,
    'OBSERVATION_UNAVAILABLE': P.OBSERVATION_UNAVAILABLE}
TRACKED_OBJECTS_TYPE = 'real2sim2real_msgs/msg/TrackedObjects'
POLICY_STEP_TYPE = 'real2sim2real_msgs/msg/PolicyStep'
POLICY_STEPS_TOPIC = 'policy_steps'
FEEDBACK_PERIOD = 0.05      # s: ~20 Hz feedback and supervision
MAX_EXTRAPOLATION = 0.1     # s: stop points are extrapolated from a state at most this old
TRACKING_STAMP_WINDOW = 2.0  # s: older tracked-object stamps are implausible (other clock)
OTHER_CLOCK_AGE = 60.0      # s: a joint_states stamp this old is on another clock, not late
# s: a state older than this when it arrives is STALE_STATE. Tracking used to accept stamps up
# to 2 s old; with one busy process per core beside the bringup states arrived up to 1.2 s old
# (the executor's own queue under load), which is still judged at its stamp.
MAX_STATE_AGE = 2.0


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
    last_state_time: float = 0.0       # node clock: when the latest joint_states arrived
    last_measured: float = 0.0         # node clock: when the latest one was measured (stamp)
    measured_seen: bool = False        # last_measured is from a state (not the send time)
    worst_joint: str = ''
    samples: int = 0
    frozen: bool = False               # tracking statistics stop at the stop/abort command
    poses: object = None               # policy goals: core.policy_execution.PoseBuffer
    tracked_topic: str = ''


@dataclass
class _PolicyRun:
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


class RobotExecutorNode(Node):
    def __init__(self):
        super().__init__('robot_executor')
        self._lock = threading.RLock()
        self._armed = False
        self._active: _Execution | None = None
        self._robot = None
        self._limits: es.JointLimits | None = None
        self._fk_lip: np.ndarray | None = None
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
        self._tracked_cb = MutuallyExclusiveCallbackGroup()
        self._policy_action = ActionServer(
            self, ExecutePolicy, '~/execute_policy', self._execute_policy,
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
            self.p_tracked_topic = declare(
                self, 'tracked_objects_topic', 'tracked_objects',
                'execute_policy: object poses (real2sim2real_msgs/TrackedObjects, the '
                'object_tracker); subscribed only while a policy goal runs.', read_only=True)
            self.p_obs_timeout = declare(
                self, 'observation_timeout', 1.0,
                'execute_policy: an object pose measured longer ago than this (s) is no '
                'observation; none fresh -> OBSERVATION_UNAVAILABLE.', lo=0.05, hi=30.0)
            self.p_policy_max_duration = declare(
                self, 'policy_max_duration', 60.0,
                'execute_policy: seconds an episode may take when the goal gives no '
                'max_duration (then TIMEOUT, holding the arm).', lo=0.1, hi=3600.0)
            self.p_approach_height = declare(
                self, 'approach_height', 0.10,
                'execute_policy: tool height (m above the task\'s table) for moves between '
                'poses: lift, traverse, descend straight down.', lo=0.0, hi=1.0)
            self.p_approach_vel = declare(
                self, 'approach_velocity_fraction', 0.3,
                'execute_policy: fraction of the scaled joint velocity limits that approach '
                'moves use (peak).', lo=0.01, hi=1.0)
            self.p_approach_tip_speed = declare(
                self, 'approach_tip_speed', 0.15,
                'execute_policy: peak tool speed (m/s) on the straight approach legs.',
                lo=0.01, hi=2.0)
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
        'observation_timeout': 'p_obs_timeout', 'policy_max_duration': 'p_policy_max_duration',
        'approach_height': 'p_approach_height',
        'approach_velocity_fraction': 'p_approach_vel',
        'approach_tip_speed': 'p_approach_tip_speed',
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
            fk_lip = es.fk_lipschitz_bound(robot)   # certifies the tip between FK samples
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
            self._fk_lip = fk_lip
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
            # Tracking compares at the measurement time, the stamp, however late it arrives
            # (the arm was where it says at that time). Only a stamp on another clock (zero,
            # sim time, far off) falls back to the arrival time. How OLD the state is, is a
            # separate question (STALE_STATE in the supervision loops), never a tracking error.
            measured = stamp if 0.0 <= now - stamp <= OTHER_CLOCK_AGE else now
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
                ex.last_measured = (max(ex.last_measured, measured) if ex.measured_seen
                                    else measured)
                ex.measured_seen = True

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

    def _disarm_on_fault(self, reason: str) -> None:
        """A controller or state fault during a motion: nothing moves again until ~/arm."""
        with self._lock:
            self._armed = False
        self.get_logger().error(f'DISARMED: {reason}')

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
            robot, limits, fk_lip = self._robot, self._limits, self._fk_lip
        try:
            traj = trajectory_from_msg(request.trajectory)
            return es.validate_trajectory(
                traj, limits, q, velocity_scale=self.p_vel_scale,
                fk=lambda x: robot.fk(x), workspace=self._workspace,
                start_tolerance=self.p_start_tol, workspace_step=self.p_ws_step,
                fk_lipschitz=fk_lip), q
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
            ex.last_state_time = ex.last_measured = sent
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
                # How old the latest state already was when it arrived (a clock or a queue
                # behind ours); states that stop arriving are the check above.
                old = ex.last_state_time - ex.last_measured
                stop_reason = ex.stop_reason
            if stop_reason:
                raise _Abort(R.STOPPED, stop_reason)   # _stop already sent the stop ramp
            if goal_handle.is_cancel_requested:
                self._send_stop(ex)
                raise _Abort(R.CANCELED, f'canceled at t = {t:.2f} s; holding position')
            failure = self._backend.failure()
            if failure:
                self._send_stop(ex)
                self._disarm_on_fault(failure)
                raise _Abort(R.BACKEND_UNAVAILABLE, f'{failure}; stop sent; disarmed')
            if sample is not None and sample.exceeded:
                self._send_stop(ex)
                j = int(np.argmax(sample.error))
                raise _Abort(R.TRACKING_ERROR, (
                    f'tracking error {sample.max_error:.4f} rad on joint '
                    f'{validated.command.joint_names[j]!r} at t = {sample.time:.3f} s exceeds '
                    f'max_tracking_error {self.p_max_err} rad (state measured '
                    f'{now - ex.t0 - sample.time:.3f} s before it was judged); '
                    f'holding position'))
            if stale:
                self._send_stop(ex)
                self._disarm_on_fault('joint_states stopped arriving')
                raise _Abort(R.BACKEND_UNAVAILABLE, (
                    f'joint_states stopped arriving for {now - ex.last_state_time:.2f} s '
                    f'during execution; stop sent; disarmed'))
            if old > MAX_STATE_AGE:
                self._send_stop(ex)
                self._disarm_on_fault('joint_states too old')
                raise _Abort(R.STALE_STATE, self._stale_message(ex, now, 'execution'))
            if sample is not None:
                feedback.progress = float(min(1.0, max(0.0, t / duration)))
                feedback.tracking_error = float(sample.max_error)
                feedback.time_from_start = float(t)
                goal_handle.publish_feedback(feedback)
            if t >= duration and at_goal:
                return R.NONE, ''
            # The trajectory's clock is the measurements' (a lagging cell started it late
            # by as much); STALE_STATE above bounds how far that is behind ours.
            if ex.last_measured - ex.t0 >= duration + margin:
                final = monitor.summary().final_error
                self._send_stop(ex)
                raise _Abort(R.TIMEOUT, (
                    f'not within goal_tolerance {self.p_goal_tol} rad of the last point '
                    f'{margin:.2f} s after the trajectory ended (final error {final:.4f} rad)'))

    # ------------------------------------------------------------------ policy execution

    def _execute_policy(self, goal_handle):
        result = P()
        with self._lock:
            if not self._armed:
                return self._finish_policy(goal_handle, result, P.NOT_ARMED,
                                           'executor is DISARMED: call ~/arm first')
            if self._active is not None:
                return self._finish_policy(goal_handle, result, P.BUSY,
                                           'another goal is executing')
            ex = _Execution(goal_id=bytes(goal_handle.goal_id.uuid).hex())
            self._active = ex
        run = _PolicyRun()
        stage = None
        try:
            stage = self._new_policy_stage(goal_handle.request)
            code, message = self._run_policy(goal_handle, ex, result, stage, run)
        except _Abort as exc:
            code, message = exc.code, exc.message
        except Exception as exc:  # noqa: BLE001 - bad input must never kill the node
            self.get_logger().error(f'policy execution failed unexpectedly: {exc!r}')
            if ex.t0 is not None:
                self._send_stop(ex)
            code, message = P.STOPPED, f'internal error: {exc}; holding position'
        finally:
            with self._lock:
                self._active = None
        self._close_bag(ex, result)
        result.steps = int(run.episode.steps) if run.episode is not None else 0
        result.duration = float(self._now() - run.t_start) if run.t_start is not None else 0.0
        if stage is not None:
            self._write_policy_manifest(stage, ex, run, result, code, message)
        return self._finish_policy(goal_handle, result, code, message)

    def _finish_policy(self, goal_handle, result, code, message):
        result.error_code = code
        result.error_msg = message
        if code == P.NONE:
            goal_handle.succeed()
        elif code == P.CANCELED and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        else:
            goal_handle.abort()
        text = (f'execute_policy: {POLICY_ERROR_NAMES.get(code, code)}'
                + (f': {message}' if message else '')
                + f' (task_success {result.task_success}, steps {result.steps}, '
                  f'{result.duration:.2f} s)')
        if code == P.NONE:
            self.get_logger().info(text)
        else:
            self.get_logger().warning(text)
        return result

    def _policy_abort(self, ex: _Execution, kind_or_code, message: str, hold: bool = True):
        """An _Abort for the policy goal; holds the arm first when something was sent."""
        code = POLICY_KIND_CODES.get(kind_or_code, kind_or_code)
        if hold and ex.t0 is not None:
            self._send_stop(ex)
            message += '; holding position'
        return _Abort(code, message)

    def _run_policy(self, goal_handle, ex: _Execution, result, stage, run: _PolicyRun):
        import torch  # the policy runtime: imported on the first policy goal, not at start-up
        torch.set_num_threads(1)
        from ..core import policy_execution as pe
        req = goal_handle.request
        with self._lock:
            robot, limits, fk_lip = self._robot, self._limits, self._fk_lip
        if robot is None or limits is None:
            raise _Abort(P.STOPPED, self._robot_error or 'no robot model')
        try:
            loaded = pe.load_policy(req.checkpoint_path, robot, req.task.strip())
            run.gate = pe.SafetyGate(limits, lambda x: robot.fk(x), self._workspace,
                                     self.p_vel_scale, self.p_start_tol, self.p_ws_step,
                                     fk_lip)
            settings = pe.ExecutionSettings(
                approach_height=self.p_approach_height,
                approach_velocity_fraction=self.p_approach_vel,
                approach_tip_speed=self.p_approach_tip_speed)
            run.episode = episode = pe.make_episode(loaded, run.gate, list(req.task_goal),
                                                    settings)
        except pe.ExecutionError as exc:
            raise self._policy_abort(ex, exc.kind, exc.message) from None
        run.t_start = self._now()
        max_duration = req.max_duration if math.isfinite(req.max_duration) and \
            req.max_duration > 0 else self.p_policy_max_duration
        run.deadline = run.t_start + max_duration
        if stage is not None:
            stage.inputs.update({'task_resolved': episode.task.name,
                                 'object_id': episode.object_id,
                                 'max_duration_used': max_duration,
                                 'checkpoint_metadata': loaded.config.get('metadata', {})})
        ex.tracked_topic = self.resolve_topic_name(self.p_tracked_topic)
        ex.poses = pe.PoseBuffer(episode.object_id)
        if stage is not None and (self.p_record or req.record):
            run.steps_topic = self.resolve_topic_name(POLICY_STEPS_TOPIC)
            self._open_bag(ex, stage, 'episode', [(ex.tracked_topic, TRACKED_OBJECTS_TYPE),
                                                  (run.steps_topic, POLICY_STEP_TYPE)])
        elif req.record:
            ex.bag_error = "recording needs the run_dir parameter (it is '')"
        with subscribed(self, TrackedObjects, ex.tracked_topic, self._on_tracked_objects,
                        qos.SENSOR_DATA, callback_group=self._tracked_cb):
            q, why = self._current_state()
            if q is None:
                raise _Abort(P.OBSERVATION_UNAVAILABLE, why)
            problem = self._backend.ready()
            if problem:
                raise _Abort(P.STOPPED, f'controller unavailable: {problem}')
            run.first_pose = self._await_pose(goal_handle, ex, run)
            q, why = self._current_state()
            if q is None:
                raise _Abort(P.OBSERVATION_UNAVAILABLE, why)
            try:
                motions = episode.start(q, run.first_pose)
            except pe.ExecutionError as exc:
                raise self._policy_abort(ex, exc.kind, exc.message) from None
            finally:
                self._record_policy_steps(ex, run)
            for motion in motions:
                self._policy_send(goal_handle, ex, run, motion)
                self._policy_wait_motion(goal_handle, ex, run, motion.label, motion.settle,
                                         motion.wait_at_goal)
            if not episode.one_shot:
                self._policy_loop(goal_handle, ex, run)
            # The outcome: a pose measured after the last motion (and its settle time) ended.
            last = run.motions[-1] if run.motions else None
            after = last[1] + last[2] + last[3] if last else -math.inf
            try:
                run.final_pose = self._await_pose(goal_handle, ex, run, after=after, hold=False)
            except _Abort as exc:
                if exc.code != P.OBSERVATION_UNAVAILABLE:
                    raise               # stop, cancel, max_duration... while waiting for it
                run.final_pose = ex.poses.pose
                run.final_pose_note = exc.message
                raise _Abort(P.OBSERVATION_UNAVAILABLE,
                             f'the episode ran, but its outcome was not observed: {exc.message}'
                             ) from None
        result.task_success = bool(episode.success(run.final_pose))
        return P.NONE, ''

    def _policy_loop(self, goal_handle, ex: _Execution, run: _PolicyRun):
        """Closed loop: observation -> action -> segment, once per control period."""
        from ..core import policy_execution as pe
        episode = run.episode
        next_tick = self._now()
        while True:
            pose = ex.poses.fresh(self._now(), self.p_obs_timeout)
            if pose is None:
                pose = self._await_pose(goal_handle, ex, run)
            try:
                motion = episode.step(pose)
            except pe.ExecutionError as exc:
                raise self._policy_abort(ex, exc.kind, exc.message) from None
            finally:
                self._record_policy_steps(ex, run)
            if motion is None:
                break
            self._policy_send(goal_handle, ex, run, motion)
            next_tick = max(next_tick + episode.period, self._now())
            self._policy_watch(goal_handle, ex, run, lambda now, t=next_tick: now >= t,
                               next_tick)
        if run.motions:   # the last segment: reach its point
            self._policy_wait_motion(goal_handle, ex, run, run.motions[-1][0])

    def _policy_send(self, goal_handle, ex: _Execution, run: _PolicyRun, motion):
        """Validate ``motion`` against the measured position and send it (JTC replaces what
        runs from the new start time on)."""
        from ..core import policy_execution as pe
        q, why = self._current_state()
        if q is None:
            raise self._policy_abort(ex, P.OBSERVATION_UNAVAILABLE, why)
        try:
            validated = run.gate.validate(motion.trajectory, q, motion.label)
        except pe.ExecutionError as exc:
            raise self._policy_abort(ex, exc.kind, exc.message) from None
        delay = self.p_start_delay
        with self._lock:
            if ex.stop_reason:
                raise _Abort(P.STOPPED, ex.stop_reason)
            if not self._armed:
                raise self._policy_abort(
                    ex, P.NOT_ARMED if ex.t0 is None else P.STOPPED,
                    'executor was disarmed during the episode' if ex.t0 is not None else
                    'executor was disarmed before the motion started')
            if ex.monitor is None:
                ex.monitor = es.TrackingMonitor(validated.reference, self.p_max_err,
                                                self.p_goal_tol, validated.command.joint_names)
            else:   # one monitor for the episode: statistics over every motion
                ex.monitor.reference = validated.reference
            sent = self._now()
            if ex.t0 is None:
                ex.last_state_time = ex.last_measured = sent
            ex.t0 = sent + delay
            run.motions.append([motion.label, ex.t0, validated.reference.duration,
                                motion.settle])
        msg = trajectory_to_msg(validated.command, start_time=ex.t0 if delay > 0 else None)
        try:
            self._backend.send(msg)
        except BackendError as exc:
            raise self._policy_abort(ex, P.STOPPED, f'controller unavailable: {exc}') from None
        if ex.bag is not None:
            self._record(ex, self._backend.record_topic, msg, sent)

    def _policy_wait_motion(self, goal_handle, ex: _Execution, run: _PolicyRun, label: str,
                            settle: float = 0.0, wait_at_goal: bool = True):
        """Supervise until the last motion sent has ended, the arm is at its last point (when
        asked) and ``settle`` s have passed; TIMEOUT when the point is not reached in time."""
        _label, t0, dur, _ = run.motions[-1]
        margin = self.p_margin

        def done(now):
            t = now - t0
            with self._lock:
                at_goal = ex.monitor.at_goal()
            if t >= dur + settle and (at_goal or not wait_at_goal):
                return True
            if t >= dur + settle + margin:
                with self._lock:
                    final = ex.monitor.summary().final_error
                raise self._policy_abort(ex, P.TIMEOUT, (
                    f'{label}: not within goal_tolerance {self.p_goal_tol} rad of the '
                    f'last point {margin:.2f} s after it ended (final error {final:.4f} rad)'))
            return False
        self._policy_watch(goal_handle, ex, run, done)

    def _await_pose(self, goal_handle, ex: _Execution, run: _PolicyRun,
                    after: float = -math.inf, hold: bool = True):
        """A pose of the episode's object measured within observation_timeout (and not before
        ``after``), waiting up to observation_timeout for one; OBSERVATION_UNAVAILABLE."""
        timeout = self.p_obs_timeout
        deadline = self._now() + timeout
        got = []

        def ready(now):
            with self._lock:
                pose = ex.poses.fresh(now, timeout, after)
            if pose is not None:
                got.append(pose)
                return True
            return now >= deadline
        self._policy_watch(goal_handle, ex, run, ready, deadline)
        if not got:
            with self._lock:
                why = ex.poses.describe_missing(ex.tracked_topic, timeout)
            if after > -math.inf and ex.poses.pose is not None:
                why += f' (want one measured after {after:.3f}, the end of the last motion)'
            raise self._policy_abort(ex, P.OBSERVATION_UNAVAILABLE, why, hold=hold)
        return got[0]

    def _policy_watch(self, goal_handle, ex: _Execution, run: _PolicyRun, until,
                      wake_at: float | None = None):
        """Supervise (stop, cancel, controller, tracking, stale states, max_duration) and
        publish feedback at FEEDBACK_PERIOD until ``until(now)`` is true."""
        feedback = ExecutePolicy.Feedback()
        tick = time.monotonic()
        while True:
            tick = max(tick + FEEDBACK_PERIOD, time.monotonic() - FEEDBACK_PERIOD)
            wait = tick - time.monotonic()
            if wake_at is not None:
                wait = min(wait, wake_at - self._now())
            ex.wake.wait(max(0.0, wait))
            ex.wake.clear()
            if not rclpy.ok():
                raise _Abort(P.STOPPED, 'node shutting down')
            now = self._now()
            with self._lock:
                sample = ex.monitor.last if ex.monitor is not None else None
                moving = ex.t0 is not None
                stale = moving and now - ex.last_state_time > self.p_state_timeout
                old = ex.last_state_time - ex.last_measured if moving else 0.0
                stop_reason = ex.stop_reason
            if stop_reason:
                raise _Abort(P.STOPPED, stop_reason)   # _stop already sent the stop ramp
            if goal_handle.is_cancel_requested:
                raise self._policy_abort(ex, P.CANCELED, f'canceled after '
                                         f'{now - run.t_start:.2f} s')
            failure = self._backend.failure() if moving else None
            if failure:
                self._disarm_on_fault(failure)
                raise self._policy_abort(ex, P.STOPPED, f'controller failure: {failure}; '
                                         f'disarmed')
            if sample is not None and sample.exceeded:
                j = int(np.argmax(sample.error))
                raise self._policy_abort(ex, P.TRACKING_ERROR, (
                    f'tracking error {sample.max_error:.4f} rad on joint '
                    f'{ex.monitor.joint_names[j]!r} exceeds max_tracking_error '
                    f'{self.p_max_err} rad'))
            if stale:
                self._disarm_on_fault('joint_states stopped arriving')
                raise self._policy_abort(ex, P.OBSERVATION_UNAVAILABLE, (
                    f'joint_states stopped arriving for {now - ex.last_state_time:.2f} s '
                    f'during the episode; disarmed'))
            if old > MAX_STATE_AGE:
                self._disarm_on_fault('joint_states too old')
                raise self._policy_abort(ex, P.STALE_STATE,
                                         self._stale_message(ex, now, 'the episode'))
            if now > run.deadline:
                raise self._policy_abort(ex, P.TIMEOUT, (
                    f'episode ran past max_duration {run.deadline - run.t_start:.1f} s'))
            feedback.step = int(run.episode.steps)
            feedback.elapsed = float(now - run.t_start)
            goal_handle.publish_feedback(feedback)
            if until(now):
                return

    def _stale_message(self, ex: _Execution, now: float, during: str) -> str:
        """STALE_STATE: states arrive, but the latest was measured too long ago to judge
        whether the arm follows (a cell or driver whose clock falls behind, a queue)."""
        late = ex.last_state_time - ex.last_measured
        return (f'joint_states arrive but the latest was {late:.2f} s old when it arrived '
                f'(> {MAX_STATE_AGE} s; measured '
                f'{now - ex.last_measured:.2f} s ago) during {during}: the executor\'s state '
                f'is old, which says nothing about the arm; stop sent; disarmed')

    def _record_policy_steps(self, ex: _Execution, run: _PolicyRun):
        """The episode's actions decided since the last call, as PolicyStep messages."""
        episode = run.episode
        if ex.bag is None or episode is None or not run.steps_topic:
            return
        import json
        now = self._now()
        config = json.dumps(episode.task.config(), default=str)
        for rec in episode.records[run.steps_recorded:]:
            msg = PolicyStep(task=episode.task.name, object_id=episode.object_id,
                             step=int(rec['step']), observation=rec['observation'],
                             action=rec['action'], task_goal=rec['task_goal'],
                             object_pose=rec['object_pose'], tool_start=rec['tool_start'],
                             task_config=config)
            msg.header.stamp = self.get_clock().now().to_msg()
            msg.header.frame_id = 'world'
            self._record(ex, run.steps_topic, msg, now)
        run.steps_recorded = len(episode.records)

    def _on_tracked_objects(self, msg: TrackedObjects):
        from ..core.policy_execution import ExecutionError, ObjectPose
        now = self._now()
        ex = self._active
        if ex is None or ex.poses is None:
            return
        if ex.bag is not None:
            self._record(ex, ex.tracked_topic, msg, now)
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
        with self._lock:
            found = ex.poses.add(list(msg.ids)[:len(poses)], poses, t, now)
        if found:
            ex.wake.set()

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

    def _new_policy_stage(self, request):
        if not self.p_run_dir:
            return None
        from ..core.artifacts import RunDirectory
        with self._lock:
            limits = self._limits
            self._executions += 1
        return RunDirectory(self.p_run_dir).new_stage('execute_policy', inputs={
            'checkpoint_path': str(request.checkpoint_path),
            'task': str(request.task),
            'task_goal': [float(v) for v in request.task_goal],
            'max_duration': float(request.max_duration),
            'record': bool(request.record),
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
            'tracked_objects_topic': self.resolve_topic_name(self.p_tracked_topic),
            'observation_timeout': self.p_obs_timeout,
            'policy_max_duration': self.p_policy_max_duration,
            'approach_height': self.p_approach_height,
            'approach_velocity_fraction': self.p_approach_vel,
            'approach_tip_speed': self.p_approach_tip_speed,
        })

    def _write_policy_manifest(self, stage, ex: _Execution, run: _PolicyRun, result, code,
                               message):
        def pose_dict(p):
            return None if p is None else {'xyz': [float(v) for v in p.position],
                                           'quat_wxyz': [float(v) for v in p.quat],
                                           'yaw': p.yaw, 'stamp': p.stamp}
        tracking = {}
        if ex.monitor is not None:
            s = ex.monitor.summary()
            tracking = {'max_tracking_error': s.max_error, 'rms_tracking_error': s.rms_error,
                        'final_error': s.final_error if math.isfinite(s.final_error) else None,
                        'worst_joint': s.worst_joint, 'tracking_samples': s.samples}
        episode = run.episode.summary() if run.episode is not None else {}
        final_error = None
        if run.episode is not None and run.final_pose is not None and \
                getattr(run.episode, 'goal_xy', None) is not None:
            final_error = run.episode.error(run.final_pose)
        poses = ex.poses
        stage.results = {
            'error_code': int(code), 'error_name': POLICY_ERROR_NAMES.get(code, str(code)),
            'error_msg': message, 'task_success': bool(result.task_success),
            'steps': int(result.steps), 'duration': float(result.duration),
            'bag_path': result.bag_path, 'recording_problem': ex.bag_error,
            'episode': episode, 'final_goal_error': final_error,
            'first_object_pose': pose_dict(run.first_pose),
            'final_object_pose': pose_dict(run.final_pose),
            'final_pose_note': run.final_pose_note,
            'motions': [{'label': m[0], 'start': m[1], 'duration': m[2], 'settle': m[3]}
                        for m in run.motions],
            'tracked_messages': poses.messages if poses is not None else 0,
            'tracked_ids_seen': sorted(poses.ids_seen) if poses is not None else [],
            **tracking,
        }
        if result.bag_path:
            stage.add_output('bag', result.bag_path)
            for i, f in enumerate(sorted(Path(result.bag_path).glob('*.mcap'))):
                stage.add_output(f'bag_file_{i}', f)
        try:
            stage.finish()
        except (OSError, TypeError, ValueError) as exc:
            self.get_logger().error(f'writing {stage.folder}/manifest.json failed: {exc}')

    def _open_bag(self, ex: _Execution, stage, name: str = 'trajectory', extra_topics=()):
        from ..core.bag_io import BagWriter
        try:
            bag = BagWriter(stage.folder / name).open()
            bag.add_topic(self._backend.record_topic, self._backend.record_type)
            bag.add_topic(self._joint_states_topic(), 'sensor_msgs/msg/JointState')
            for topic, msgtype in extra_topics:
                bag.add_topic(topic, msgtype)
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
        # Destroy the action servers before the node so their goal-expiry timers cannot fire
        # on a half-destroyed server.
        self._action.destroy()
        self._policy_action.destroy()


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
