"""How the robot_executor hands a validated trajectory to a robot (rclpy side).

Three backends, one interface (``send``, ``hold``, ``failure``):

* ``trajectory_topic``: publishes trajectory_msgs/JointTrajectory on
  ``<controller>/joint_trajectory`` (ros2_control JointTrajectoryController's topic
  interface; also what the emulated cell listens to). Fire and forget: the executor watches
  ``/joint_states`` to know what happened.
* ``follow_joint_trajectory``: an action client to ``<controller>/follow_joint_trajectory``
  (control_msgs/action/FollowJointTrajectory), what JTC and most vendor drivers serve. A
  rejected or aborted goal is reported through ``failure()``. Needs control_msgs.
* ``moveit``: MoveIt's move_group ``execute_action`` (moveit_msgs/action/ExecuteTrajectory),
  the same TrajectoryExecutionManager path that moveit_py's ``MoveItPy.execute`` uses, without
  needing a MoveItPy planning configuration in this process. Needs moveit_msgs.

Stopping always goes through ``hold``: a new one-point (or short ramp) trajectory replaces the
running one, which JTC and MoveIt treat as preemption, so the arm never coasts between a
cancel and the next command.
"""
from __future__ import annotations

import threading

import numpy as np
from builtin_interfaces.msg import Duration
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from ..core.execution_safety import INVALID_TRAJECTORY, Trajectory, TrajectoryViolation
from ..core.trajectory_goal import error_name
from .goal_client import GoalClient
from .qos import COMMAND
from .ros_main import ConfigurationError

BACKENDS = ('trajectory_topic', 'follow_joint_trajectory', 'moveit')


class BackendError(Exception):
    """The backend could not take the trajectory (server missing, goal rejected...)."""


def to_duration(seconds: float) -> Duration:
    sec = int(np.floor(seconds))
    nsec = int(round((seconds - sec) * 1e9))
    if nsec >= 1_000_000_000:
        sec, nsec = sec + 1, nsec - 1_000_000_000
    return Duration(sec=sec, nanosec=nsec)


def from_duration(d) -> float:
    return float(d.sec) + float(d.nanosec) * 1e-9


def trajectory_from_msg(msg: JointTrajectory) -> Trajectory:
    """Plain arrays from a JointTrajectory; a point whose positions/velocities/accelerations
    do not match the joint count raises TrajectoryViolation naming that point."""
    names = tuple(msg.joint_names)
    n, j = len(msg.points), len(names)
    times = np.array([from_duration(p.time_from_start) for p in msg.points], dtype=float)

    def field(attr, optional):
        rows = [list(getattr(p, attr)) for p in msg.points]
        if optional and all(len(r) == 0 for r in rows):
            return None
        bad = [i for i, r in enumerate(rows) if len(r) != j]
        if bad:
            raise TrajectoryViolation(
                INVALID_TRAJECTORY,
                f'point {bad[0]} has {len(rows[bad[0]])} {attr}, the trajectory names {j} joints')
        return np.array(rows, dtype=float).reshape(n, j)

    return Trajectory(names, times, field('positions', False), field('velocities', True),
                      field('accelerations', True))


def trajectory_to_msg(traj: Trajectory, frame_id: str = '',
                      start_time: float | None = None) -> JointTrajectory:
    """``start_time`` None / 0: header.stamp = 0, 'start now' for JTC. Otherwise the absolute
    start time (s, the controller's clock = ROS time on one machine or a PTP-synced cell):
    JTC holds the current reference until then, so a recording of the command alone says
    when the motion started on the clock that stamps ``joint_states``."""
    msg = JointTrajectory()
    msg.header.frame_id = frame_id
    if start_time:
        sec = int(np.floor(start_time))
        msg.header.stamp.sec = sec
        msg.header.stamp.nanosec = min(int(round((start_time - sec) * 1e9)), 999_999_999)
    msg.joint_names = list(traj.joint_names)
    for i, t in enumerate(traj.times):
        p = JointTrajectoryPoint()
        p.positions = [float(x) for x in traj.positions[i]]
        if traj.velocities is not None:
            p.velocities = [float(x) for x in traj.velocities[i]]
        if traj.accelerations is not None:
            p.accelerations = [float(x) for x in traj.accelerations[i]]
        p.time_from_start = to_duration(float(t))
        msg.points.append(p)
    return msg


class ExecutionBackend:
    """Base: ``send`` starts a trajectory, ``hold`` replaces it with a stop/hold trajectory,
    ``failure`` returns a controller-reported problem with the current goal (or None)."""

    name = 'base'

    def __init__(self, node, controller_name: str, callback_group=None):
        self.node = node
        self.controller_name = controller_name.strip('/') or 'joint_trajectory_controller'
        self.callback_group = callback_group
        self._failure: str | None = None
        self._lock = threading.Lock()

    # Topic name and type under which the executor records what was commanded.
    record_topic = ''
    record_type = 'trajectory_msgs/msg/JointTrajectory'

    def ready(self) -> str | None:
        """None when commands can be sent now, else the reason they cannot."""
        return None

    def send(self, msg: JointTrajectory) -> None:
        raise NotImplementedError

    def hold(self, msg: JointTrajectory) -> None:
        raise NotImplementedError

    def failure(self) -> str | None:
        with self._lock:
            return self._failure

    def close(self) -> None:
        pass


class TrajectoryTopicBackend(ExecutionBackend):
    name = 'trajectory_topic'

    def __init__(self, node, controller_name, callback_group=None):
        super().__init__(node, controller_name, callback_group)
        self._pub = node.create_publisher(
            JointTrajectory, f'{self.controller_name}/joint_trajectory', COMMAND)
        self.record_topic = self._pub.topic_name

    def ready(self):
        if self._pub.get_subscription_count() == 0:
            return f'no controller subscribes to {self._pub.topic_name}'
        return None

    def send(self, msg):
        with self._lock:
            self._failure = None
        self._pub.publish(msg)

    def hold(self, msg):
        self._pub.publish(msg)

    def close(self):
        self.node.destroy_publisher(self._pub)


class _ActionBackend(ExecutionBackend):
    """Shared goal bookkeeping for the two action-client backends."""

    action_suffix = ''
    action_type = None

    def __init__(self, node, controller_name, callback_group=None):
        super().__init__(node, controller_name, callback_group)
        self._client = GoalClient(node, self.action_type, self._action_name(),
                                  callback_group=callback_group)
        self.record_topic = self._resolved_action_name() + '/trajectory'
        self._generation = 0      # goals older than the newest are expected to be preempted
        self._in_flight = False   # the newest goal was accepted and has no result yet

    def _action_name(self) -> str:
        return f'{self.controller_name}/{self.action_suffix}'

    def _resolved_action_name(self) -> str:
        ns = self.node.get_namespace().rstrip('/')
        return f'{ns}/{self._action_name()}'

    def ready(self):
        if not self._client.server_is_ready():
            return f'action server {self._resolved_action_name()} is not available'
        return None

    def _make_goal(self, msg):
        raise NotImplementedError

    def _result_failure(self, result) -> str | None:
        raise NotImplementedError

    def _dispatch(self, msg, report: bool):
        if not self._client.server_is_ready():
            raise BackendError(f'action server {self._resolved_action_name()} is not available')
        with self._lock:
            self._generation += 1
            gen = self._generation
            if report:
                self._failure = None
        future = self._client.send_goal_async(self._make_goal(msg))
        future.add_done_callback(lambda f: self._on_goal_response(f, gen))

    def _set_failure(self, gen, text):
        with self._lock:
            if gen == self._generation and self._failure is None:
                self._failure = text

    def _on_goal_response(self, future, gen):
        try:
            handle = future.result()
        except Exception as exc:  # noqa: BLE001 - transport errors become a failure, not a crash
            self._set_failure(gen, f'sending the goal failed: {exc}')
            return
        if not handle.accepted:
            self._set_failure(gen, (
                f'{self._resolved_action_name()} rejected the goal (a rejection carries no '
                f'reason: the controller\'s log says why, e.g. it is not active or refuses '
                f'the joints, timing or tolerances)'))
            return
        with self._lock:
            if gen == self._generation:
                self._in_flight = True
        handle.get_result_async().add_done_callback(lambda f: self._on_result(f, gen))

    def _on_result(self, future, gen):
        with self._lock:
            if gen == self._generation:
                self._in_flight = False
        try:
            wrapped = future.result()
        except Exception as exc:  # noqa: BLE001
            self._set_failure(gen, f'getting the result failed: {exc}')
            return
        problem = self._result_failure(wrapped.result)
        if problem:
            self._set_failure(gen, f'{self._resolved_action_name()}: {problem}')

    def failure(self):
        with self._lock:
            if self._failure is not None or not self._in_flight:
                return self._failure
        if not self._client.server_is_ready():
            return (f'action server {self._resolved_action_name()} went away while its goal '
                    f'was running')
        return None

    def send(self, msg):
        self._dispatch(msg, report=True)

    def hold(self, msg):
        self._dispatch(msg, report=False)

    def close(self):
        self._client.destroy()


def _import_control_msgs():
    try:
        from control_msgs.action import FollowJointTrajectory
    except ImportError as exc:
        raise ConfigurationError(
            "backend 'follow_joint_trajectory' needs the control_msgs package "
            f'(control_msgs.action.FollowJointTrajectory), which is not installed ({exc}); '
            "install ros-<distro>-control-msgs or use backend 'trajectory_topic'") from None
    return FollowJointTrajectory


def _import_moveit_msgs():
    try:
        from moveit_msgs.action import ExecuteTrajectory
        from moveit_msgs.msg import RobotTrajectory
    except ImportError as exc:
        raise ConfigurationError(
            "backend 'moveit' needs MoveIt's moveit_msgs (moveit_msgs.action.ExecuteTrajectory, "
            f'served by move_group, the same path moveit_py executes through) ({exc}); '
            "install MoveIt or use backend 'trajectory_topic'") from None
    return ExecuteTrajectory, RobotTrajectory


class FollowJointTrajectoryBackend(_ActionBackend):
    name = 'follow_joint_trajectory'
    action_suffix = 'follow_joint_trajectory'

    def __init__(self, node, controller_name, callback_group=None, goal_time_tolerance=0.0):
        self.action_type = _import_control_msgs()
        self._goal_time_tolerance = goal_time_tolerance
        super().__init__(node, controller_name, callback_group)

    def _make_goal(self, msg):
        goal = self.action_type.Goal()
        goal.trajectory = msg
        # Tolerances stay the controller's configured ones; the executor monitors on its own.
        goal.goal_time_tolerance = to_duration(self._goal_time_tolerance)
        return goal

    def _result_failure(self, result):
        # FollowJointTrajectory.Result: SUCCESSFUL = 0; the others are failures.
        if result.error_code == 0:
            return None
        return (f'{error_name(result.error_code)} ({result.error_code}): '
                f'{result.error_string or "(no message)"}')


class MoveItBackend(_ActionBackend):
    name = 'moveit'

    def __init__(self, node, controller_name, callback_group=None,
                 action_name='execute_trajectory'):
        self.action_type, self._robot_trajectory = _import_moveit_msgs()
        self._moveit_action = action_name.strip('/')
        super().__init__(node, controller_name, callback_group)

    def _action_name(self):
        # move_group serves its execute action at a fixed name; the controller goes in the goal.
        return self._moveit_action

    def _make_goal(self, msg):
        goal = self.action_type.Goal()
        goal.trajectory = self._robot_trajectory(joint_trajectory=msg)
        if hasattr(goal, 'controller_names'):
            goal.controller_names = [self.controller_name]
        return goal

    def _result_failure(self, result):
        # moveit_msgs/MoveItErrorCodes: SUCCESS = 1.
        code = result.error_code
        if code.val == 1:
            return None
        # rosidl keeps a message's constants in its metaclass's (name-mangled) __constants.
        table = next((v for k, v in vars(type(type(code))).items()
                      if k.endswith('__constants')), {})
        names = {v: k for k, v in table.items()}
        text = getattr(code, 'message', '')
        return (f'MoveIt error code {names.get(code.val, code.val)} ({code.val})'
                + (f': {text}' if text else ''))


def make_backend(kind: str, node, controller_name: str, callback_group=None) -> ExecutionBackend:
    """The backend named ``kind``; ConfigurationError when unknown or its packages are missing."""
    if kind == 'trajectory_topic':
        return TrajectoryTopicBackend(node, controller_name, callback_group)
    if kind == 'follow_joint_trajectory':
        return FollowJointTrajectoryBackend(node, controller_name, callback_group)
    if kind == 'moveit':
        return MoveItBackend(node, controller_name, callback_group)
    raise ConfigurationError(f'backend {kind!r} is not one of {list(BACKENDS)}')
