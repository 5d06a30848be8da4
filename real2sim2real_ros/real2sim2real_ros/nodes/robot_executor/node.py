"""The robot_executor node: parameters, robot model, joint states, arm/disarm/stop/status.

The node owns what both goals share (the armed flag, the one running goal, the latest joint
state per joint, the robot model and limits, the controller backend, the stop ramp); the
goals themselves live in trajectory_goal.py and policy_goal.py. See the package docstring
for the whole contract.
"""
from __future__ import annotations

import math
import threading
import time

import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from real2sim2real_msgs.srv import GetStatus

from ...core import execution_safety as es
from ...core.grasping.gripper_goal import ACTION_TYPES as GRIPPER_ACTION_TYPES
from ...ros import qos
from ...ros.executor_backends import BACKENDS, BackendError, make_backend, trajectory_to_msg
from ...ros.params import Param, bind_checked
from ...ros.ros_main import ConfigurationError, run_node
from ...ros.state_listener import StateListener
from .grip_goal import GripGoals
from .policy_goal import PolicyGoals
from .recording import Recorder
from .supervision import MAX_EXTRAPOLATION, OTHER_CLOCK_AGE, Execution
from .trajectory_goal import TrajectoryGoals

PARAMETERS = (
    Param('backend', 'trajectory_topic',
          'How trajectories reach the robot: trajectory_topic (<controller>/joint_trajectory), '
          'follow_joint_trajectory (control_msgs action), moveit (move_group execute).',
          choices=BACKENDS, read_only=True),
    Param('controller_name', 'joint_trajectory_controller',
          'ros2_control JointTrajectoryController name (topic/action prefix).', read_only=True),
    Param('robot_description_file', '',
          "URDF file for limits and FK; '' = wait for the latched robot_description topic.",
          read_only=True),
    Param('tip_link', '', "Link whose origin must stay in the workspace; '' = URDF chain tip.",
          read_only=True),
    Param('workspace_min', [-1.5, -1.5, -0.5],
          'Workspace box minimum x, y, z (m) of the tip in the base frame.'),
    Param('workspace_max', [1.5, 1.5, 1.5],
          'Workspace box maximum x, y, z (m) of the tip in the base frame.'),
    Param('goal_timeout_margin', 2.0,
          'Seconds allowed past the trajectory duration to reach the goal before TIMEOUT.',
          lo=0.0, hi=600.0),
    Param('max_tracking_error', 0.15,
          'Abort (and hold) when any joint is this far (rad) from the commanded trajectory.',
          lo=0.001, hi=3.2),
    Param('goal_tolerance', 0.02,
          'Success when every joint is within this (rad) of the last point.',
          lo=0.0001, hi=1.0),
    Param('start_tolerance', 0.05,
          'A first point at time_from_start 0 must be this close (rad) to the current '
          'position.', lo=0.0001, hi=1.0),
    Param('stop_decel_time', 0.01,
          'Stop ramp length (s); <= control_period: hold the current position after one '
          'control period.', lo=0.0, hi=5.0),
    Param('control_period', 0.01, 'Controller period (s): hold/stop point spacing.',
          lo=0.001, hi=1.0),
    Param('velocity_limit_scale', 1.0,
          'Fraction of the URDF velocity limits trajectories may use.', lo=0.001, hi=1.0),
    Param('workspace_check_step', 0.05,
          'Max joint step (rad) between workspace FK samples along a segment.',
          lo=0.001, hi=1.0),
    Param('state_timeout', 0.5, 'joint_states older than this (s) count as missing.',
          lo=0.01, hi=10.0),
    Param('run_dir', '',
          "Run directory for execute_<n> manifests and bags; '' = none (no manifests, no "
          'recording).'),
    Param('start_delay', 0.05,
          'Seconds after sending that a trajectory starts (header.stamp = now + this; more '
          'than the delivery delay). 0 = header.stamp 0, start on arrival.', lo=0.0, hi=1.0),
    Param('record', False, 'Record every execution (goals may also ask with record).'),
    Param('joint_states_topic', 'joint_states', 'Joint state topic to monitor.',
          read_only=True),
    Param('tracked_objects_topic', 'tracked_objects',
          'execute_policy: object poses (real2sim2real_msgs/TrackedObjects, the '
          'object_tracker); subscribed only while a policy goal runs.', read_only=True),
    Param('observation_timeout', 1.0,
          'execute_policy: an object pose measured longer ago than this (s) is no '
          'observation; none fresh -> OBSERVATION_UNAVAILABLE.', lo=0.05, hi=30.0),
    Param('observation_wait', 5.0,
          'execute_policy: seconds to wait for a fresh pose while the arm is at rest (the '
          'first observation, the outcome); in the closed loop observation_timeout.',
          lo=0.05, hi=60.0),
    Param('policy_max_duration', 60.0,
          'execute_policy: seconds an episode may take when the goal gives no max_duration '
          '(then TIMEOUT, holding the arm).', lo=0.1, hi=3600.0),
    Param('approach_height', 0.10,
          "execute_policy: tool height (m above the task's table) for moves between poses: "
          'lift, traverse, descend straight down.', lo=0.0, hi=1.0),
    Param('approach_velocity_fraction', 0.3,
          'execute_policy: fraction of the scaled joint velocity limits that approach moves '
          'use (peak).', lo=0.01, hi=1.0),
    Param('gripper_controller_name', 'gripper_controller',
          'Gripper controller name (the namespace of its action).', read_only=True),
    Param('gripper_action_type', 'parallel_gripper_command',
          "The gripper's controller: ParallelGripperCommand, GripperCommand (its gripper_cmd) "
          'or a JTC on the finger joint (its follow_joint_trajectory; no effort).',
          choices=GRIPPER_ACTION_TYPES, read_only=True),
    Param('gripper_max_effort', 40.0, 'grip: the most effort (N) a goal may ask for.',
          lo=0.1, hi=1e4),
    Param('gripper_default_effort', 20.0, 'grip: effort (N) of a goal that gives none.',
          lo=0.1, hi=1e4),
    Param('gripper_max_speed', 0.1, 'grip: the fastest jaw speed (m/s) a goal may ask for; '
          'also the speed of a goal that gives none.', lo=0.001, hi=10.0),
    Param('gripper_goal_timeout', 10.0, 'grip: seconds without an outcome -> TIMEOUT (the '
          'goal is cancelled, the jaw holds).', lo=0.1, hi=600.0),
    Param('approach_tip_speed', 0.15,
          'execute_policy: peak tool speed (m/s) on the straight approach legs.',
          lo=0.01, hi=2.0),
)


def _workspace(lo, hi) -> es.Workspace:
    return es.Workspace(np.array(lo, float), np.array(hi, float))


def _workspace_problem(values: dict) -> str | None:
    try:
        _workspace(values['workspace_min'], values['workspace_max'])
    except (es.SafetyConfigError, ValueError, TypeError) as exc:
        return str(exc)
    return None


class RobotExecutorNode(Node):
    def __init__(self):
        super().__init__('robot_executor')
        self.lock = threading.RLock()
        self.armed = False
        self.active: Execution | None = None
        self.robot = self.limits = self.fk_lip = None
        self.robot_error = 'waiting for robot_description'
        self._state_pos: np.ndarray | None = None
        self._state_vel: np.ndarray | None = None
        self._state_seen: np.ndarray | None = None   # per joint, node-clock time of last update
        self._state_stamp = -math.inf                 # when the latest state was measured
        self._joint_index: dict[str, int] = {}
        self.executions = 0
        self._read_parameters()
        cb = ReentrantCallbackGroup()
        self.backend = make_backend(self.p.backend, self, self.p.controller_name, cb)
        self.gripper = _gripper_backend(self, cb)
        self._jaw: tuple[str, float, float] | None = None   # (joint, position, effort)
        # /joint_states (100+ Hz) on a helper node of its own: see ros/state_listener.py.
        self._state_listener = StateListener(self, JointState, self.p.joint_states_topic,
                                             self._on_joint_states, qos.STATE_RECORDING)
        if self.p.robot_description_file:
            self._load_robot(self.p.robot_description_file, fatal=True)
        else:
            # Loading a URDF can take a while (meshes); keep it off the state callbacks.
            self.create_subscription(String, 'robot_description', self._on_description,
                                     qos.LATCHED,
                                     callback_group=MutuallyExclusiveCallbackGroup())
        self.create_service(Trigger, '~/arm', self._on_arm, callback_group=cb)
        self.create_service(Trigger, '~/disarm', self._on_disarm, callback_group=cb)
        self.create_service(Trigger, '~/stop', self._on_stop, callback_group=cb)
        self.create_service(GetStatus, '~/get_status', self._on_status, callback_group=cb)
        self.recorder = Recorder(self)
        self._goals = (TrajectoryGoals(self, cb), PolicyGoals(self, cb), GripGoals(self, cb))
        self.get_logger().info(
            f'robot_executor ready (DISARMED), backend {self.p.backend}, controller '
            f'{self.p.controller_name}, robot: {self.robot_error or self.robot.name}')

    # ------------------------------------------------------------------ parameters

    def _read_parameters(self):
        # Tunables may change at run time (ros2 param set); a running goal keeps its values
        # where it copied them. rclpy checks the ranges; the workspace box is checked here.
        self.p = bind_checked(self, PARAMETERS, 'robot_executor', check=_workspace_problem,
                              on_change=self._on_parameters)
        problem = _workspace_problem(self.p.as_dict())
        if problem:
            raise ConfigurationError(f'workspace_min/workspace_max: {problem}')
        self.workspace = _workspace(self.p.workspace_min, self.p.workspace_max)
        if not self.p.controller_name.strip('/'):
            raise ConfigurationError('controller_name must not be empty')

    def _on_parameters(self, p):
        self.workspace = _workspace(p.workspace_min, p.workspace_max)

    # ------------------------------------------------------------------ robot model

    def _load_robot(self, source: str, fatal: bool):
        from ...core.robot_description import load_robot
        try:
            robot = load_robot(source, tip_link=self.p.tip_link or None)
            limits = es.JointLimits.from_robot(robot)
            robot.fk(np.clip(np.zeros(len(limits.names)), limits.lower, limits.upper))
            fk_lip = es.fk_lipschitz_bound(robot)   # certifies the tip between FK samples
        except Exception as exc:  # noqa: BLE001 - any bad URDF is a configuration problem
            text = f'robot description unusable: {str(exc).splitlines()[0] if str(exc) else exc}'
            if fatal:
                raise ConfigurationError(text) from None
            with self.lock:
                if self.robot is None:
                    self.robot_error = text
                else:
                    text += f'; keeping the previous model ({self.robot.name})'
            self.get_logger().error(text)
            return
        from ...core.grasping.jaw import gripper_joints
        n = len(limits.names)
        jaw = gripper_joints(robot)
        with self.lock:
            self._jaw = None if jaw is None else (jaw.joint, math.nan, math.nan)
            self.robot, self.limits, self.fk_lip, self.robot_error = robot, limits, fk_lip, ''
            self._joint_index = {name: i for i, name in enumerate(limits.names)}
            self._state_pos = np.full(n, np.nan)
            self._state_vel = np.zeros(n)
            self._state_stamp = -math.inf
            self._state_seen = np.full(n, -math.inf)
        self.get_logger().info(f'robot {robot.name}: joints {list(limits.names)}, tip '
                               f'{robot.tip_link}')

    def _on_description(self, msg: String):
        if self.active is not None:
            self.get_logger().warning('robot_description changed during an execution; the running '
                                   'goal keeps the limits it was validated with')
        self._load_robot(msg.data, fatal=False)

    def model(self):
        """(robot, limits, fk Lipschitz bound) as one consistent snapshot."""
        with self.lock:
            return self.robot, self.limits, self.fk_lip

    # ------------------------------------------------------------------ joint states

    def now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_joint_states(self, msg: JointState):
        now = self.now()
        with self.lock:
            if self.limits is None:
                return
            for k, name in enumerate(msg.name):
                i = self._joint_index.get(name)
                if i is None or k >= len(msg.position) or not math.isfinite(msg.position[k]):
                    if i is None and self._jaw is not None and name == self._jaw[0] \
                            and k < len(msg.position):
                        self._jaw = (name, msg.position[k],
                                     msg.effort[k] if k < len(msg.effort) else math.nan)
                    continue
                self._state_pos[i] = msg.position[k]
                self._state_vel[i] = msg.velocity[k] if k < len(msg.velocity) else 0.0
                self._state_seen[i] = now
            stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
            # The measurement time: the header stamp when it is plausible on our clock.
            self._state_stamp = stamp if 0.0 <= now - stamp <= MAX_EXTRAPOLATION else now
            ex = self.active
            q = self._state_pos.copy()
            # Tracking compares at the measurement time, the stamp, however late it arrives
            # (the arm was where it says at that time). Only a stamp on another clock (zero,
            # sim time, far off) falls back to the arrival time. How OLD the state is, is a
            # separate question (STALE_STATE in supervision.py), never a tracking error.
            measured = stamp if 0.0 <= now - stamp <= OTHER_CLOCK_AGE else now
            complete = bool(np.all(self._state_seen > -math.inf))
        if ex is None:
            return
        if ex.bag is not None:
            self.recorder.record(ex, self.joint_states_topic(), msg, now, stamp)
        if ex.monitor is not None and ex.t0 is not None and complete:
            with self.lock:
                if not ex.frozen:
                    ex.monitor.update(measured - ex.t0, q)
                ex.last_state_time = now
                ex.last_measured = (max(ex.last_measured, measured) if ex.measured_seen
                                    else measured)
                ex.measured_seen = True

    def jaw_state(self, joint: str) -> tuple[float, float]:
        """The jaw ``joint``'s latest (position m, effort N) from joint_states (NaN: none)."""
        with self.lock:
            jaw = self._jaw
        return (jaw[1], jaw[2]) if jaw is not None and jaw[0] == joint else (math.nan, math.nan)

    def joint_states_topic(self) -> str:
        name = self.p.joint_states_topic
        return name if name.startswith('/') else (
            self.get_namespace().rstrip('/') + '/' + name)

    def current_state(self):
        """(positions, velocities) in robot order if every joint is fresh, else (None, why)."""
        with self.lock:
            if self.limits is None:
                return None, self.robot_error
            timeout = self.p.state_timeout
            age = self.now() - self._state_seen
            stale = [n for n, a in zip(self.limits.names, age) if not a <= timeout]
            if stale:
                return None, (f'no joint_states within {timeout} s for joints '
                              f'{stale} on {self.joint_states_topic()}')
            return self._state_pos.copy(), self._state_vel.copy()

    # ------------------------------------------------------------------ goals

    def claim(self, goal_handle, result_type):
        """(Execution, None) for a goal that may start, else (None, (code, message))."""
        with self.lock:
            if not self.armed:
                return None, (result_type.NOT_ARMED, 'executor is DISARMED: call ~/arm first')
            if self.active is not None:
                return None, (result_type.BUSY, 'another goal is executing')
            self.active = Execution(goal_id=bytes(goal_handle.goal_id.uuid).hex())
            return self.active, None

    def release(self) -> None:
        with self.lock:
            self.active = None

    # ------------------------------------------------------------------ services

    def _on_arm(self, _req, resp):
        with self.lock:
            if self.armed:
                resp.success, resp.message = True, 'already armed'
                return resp
        q, why = self.current_state()
        problem = why if q is None else self.backend.ready()
        if problem is None:
            with self.lock:
                self.armed = True
            self.get_logger().info('ARMED')
        resp.success = problem is None
        resp.message = 'armed' if problem is None else f'not armed: {problem}'
        return resp

    def _on_disarm(self, _req, resp):
        with self.lock:
            was_running = self.active is not None and self.active.t0 is not None
        if was_running:
            resp.success, resp.message = self._stop('disarmed during execution')
        else:
            with self.lock:
                self.armed = False
            resp.success, resp.message = True, 'disarmed'
        self.get_logger().info('DISARMED')
        return resp

    def _on_stop(self, _req, resp):
        resp.success, resp.message = self._stop('stop requested')
        return resp

    def _stop(self, reason: str) -> tuple[bool, str]:
        """Disarm, command the arm to rest, and end the running goal with STOPPED."""
        with self.lock:
            self.armed = False
            ex = self.active
            if ex is not None:
                ex.stop_reason = reason
        sent = self.send_stop(ex)
        if ex is not None:
            ex.wake.set()
        self.get_logger().warning(f'STOP: {reason}; disarmed; {sent}')
        return sent.startswith('stop trajectory sent'), f'disarmed; {sent}'

    def disarm_on_fault(self, reason: str) -> None:
        """A controller or state fault during a motion: nothing moves again until ~/arm."""
        with self.lock:
            self.armed = False
        self.get_logger().error(f'DISARMED: {reason}')

    def send_stop(self, ex: Execution | None) -> str:
        """Publish the stop ramp from the latest state; returns what was done."""
        with self.lock:
            if ex is not None:
                ex.frozen = True
            limits = self.limits
            q = None if self._state_pos is None else self._state_pos.copy()
            v = None if self._state_vel is None else self._state_vel.copy()
            age = self.now() - self._state_stamp
        if limits is None or q is None or not np.all(np.isfinite(q)):
            return 'no joint state known: nothing to hold'
        # The arm kept moving since that state was measured (late callbacks on a loaded
        # machine): start the stop from where it is now, or the hold would pull it back.
        if v is not None and 0.0 < age <= MAX_EXTRAPOLATION:
            q = q + v * age
        ramp = es.stop_ramp(q, v, self.p.stop_decel_time, self.p.control_period, limits)
        msg = trajectory_to_msg(ramp)
        try:
            self.backend.hold(msg)
        except BackendError as exc:
            return f'stop trajectory NOT sent: {exc}'
        if ex is not None and ex.bag is not None:
            self.recorder.record(ex, self.backend.record_topic, msg, self.now())
        return f'stop trajectory sent ({len(ramp.times)} point(s) over {ramp.times[-1]:.3f} s)'

    def _on_status(self, _req, resp):
        with self.lock:
            resp.armed = self.armed
            resp.executing = self.active is not None
            problem = self.robot_error
            executions = self.executions
        resp.backend = self.backend.name
        q, why = self.current_state()
        resp.success = not problem and q is not None
        resp.message = problem or (why if q is None else (
            f'{"ARMED" if resp.armed else "DISARMED"}, '
            f'{"executing" if resp.executing else "idle"}, executions so far: {executions}'))
        return resp

    def close(self):
        with self.lock:
            ex = self.active
        if ex is not None and ex.t0 is not None:
            self._stop('node shutting down')
            time.sleep(self.p.control_period)
        self._state_listener.close()
        if self.gripper is not None:
            self.gripper.close()
        # Destroy the action servers before the node so their goal-expiry timers cannot fire
        # on a half-destroyed server.
        for goals in self._goals:
            goals.server.destroy()


def _gripper_backend(node, callback_group):
    """The gripper backend, or None where control_msgs is not importable (grip goals then
    end BACKEND_UNAVAILABLE)."""
    try:
        from ...ros.gripper_backend import GripperBackend
        return GripperBackend(node, node.p.gripper_controller_name, node.p.gripper_action_type,
                              callback_group)
    except ImportError:  # pragma: no cover - depends on the machine
        return None


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
