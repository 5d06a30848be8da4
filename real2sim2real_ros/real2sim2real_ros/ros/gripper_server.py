"""The emulated cell's ``<gripper_controller>/gripper_cmd`` action server (rclpy side).

A thin shell over core/grasping/gripper_goal.py (ros2_control's gripper action controllers'
goal check and success / stall rule) and the cell's jaw (core/grasping/jaw.py: a force-limited
servo that stalls on an object at the commanded effort). The action type is
control_msgs/action/ParallelGripperCommand (ros2_control's parallel_gripper_action_controller,
Jazzy and later) or control_msgs/action/GripperCommand (gripper_action_controller), as
``gripper.action_type`` says; the real control_msgs or the wire-compatible stand-in.

Parameters it declares on the cell node (the controllers' names under ``gripper.``; read at
each goal): ``gripper.goal_tolerance`` (m), ``gripper.allow_stalling``,
``gripper.stall_velocity_threshold`` (m/s), ``gripper.stall_timeout`` (s),
``gripper.action_monitor_rate`` (Hz), ``gripper.max_effort`` (N, a goal without one; 0 = the
joint's effort limit).

Semantics: one goal at a time; a newer goal preempts the active one (aborted, "preempted");
cancel holds the jaw where its reference is (a loaded jaw keeps squeezing) and ends canceled;
the result carries the jaw's state, ``stalled`` and ``reached_goal``; feedback the state at
``gripper.action_monitor_rate``.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from sensor_msgs.msg import JointState

from ..core.grasping import gripper_goal as gg
from ..core.grasping.jaw import GripperError
from .params import declare


@dataclass
class _Active:
    monitor: gg.GripperMonitor
    done: threading.Event = field(default_factory=threading.Event)
    outcome: gg.GripperOutcome | None = None


class GripperActionServer:
    """Serves ``<controller>/gripper_cmd`` for ``world``'s jaw on ``node``. ``action_type``
    is the control_msgs action class named by ``kind`` (ParallelGripperCommand or
    GripperCommand: core/grasping/gripper_goal.ACTION_TYPES' first two). Call
    :meth:`update` at every controller update (the physics thread)."""

    def __init__(self, node, world, controller: str, action_type, kind: str):
        self.node, self.world, self.action_type, self.kind = node, world, action_type, kind
        self._jaw = world.gripper_joints()
        self.joint = self._jaw.joint
        self._lock = threading.Lock()
        self._active: _Active | None = None
        self._started: dict[bytes, _Active | str] = {}
        self._declare_parameters()
        self._server = ActionServer(
            node, action_type, f'{controller}/gripper_cmd',
            execute_callback=self._execute, goal_callback=self._on_goal,
            handle_accepted_callback=self._on_accepted,
            cancel_callback=lambda _h: CancelResponse.ACCEPT,
            callback_group=ReentrantCallbackGroup())

    def _declare_parameters(self):
        n, d = self.node, gg.MonitorSettings()
        declare(n, 'gripper.goal_tolerance', d.goal_tolerance, 'gripper goal position '
                'tolerance, m', lo=0.0, hi=1.0)
        declare(n, 'gripper.allow_stalling', d.allow_stalling, 'a stalled jaw (a grasp) '
                'succeeds; false aborts it (ros2_control\'s default)')
        declare(n, 'gripper.stall_velocity_threshold', d.stall_velocity_threshold,
                'jaw speed below which it is not moving, m/s', lo=0.0, hi=1.0)
        declare(n, 'gripper.stall_timeout', d.stall_timeout, 's without motion that make a '
                'stall', lo=0.0, hi=60.0)
        declare(n, 'gripper.action_monitor_rate', 20.0, 'gripper_cmd feedback rate, Hz',
                lo=1.0, hi=500.0)
        declare(n, 'gripper.max_effort', 0.0, 'effort of a goal that gives none, N; 0 = the '
                "jaw joint's effort limit", lo=0.0, hi=1e4)

    def _param(self, name):
        return self.node.get_parameter(f'gripper.{name}').value

    def _settings(self) -> gg.MonitorSettings:
        return gg.MonitorSettings(float(self._param('goal_tolerance')),
                                  float(self._param('stall_velocity_threshold')),
                                  float(self._param('stall_timeout')),
                                  bool(self._param('allow_stalling')))

    def _check(self, request) -> gg.GripperGoal:
        c = request.command
        if self.kind == 'parallel_gripper_command':
            goal = gg.parallel_goal(c.name, c.position, c.velocity, c.effort, self._jaw)
        else:
            goal = gg.single_goal(c.position, c.max_effort, self._jaw)
        if goal.max_effort is None and self._param('max_effort') > 0:
            goal = gg.GripperGoal(goal.position, float(self._param('max_effort')),
                                  goal.max_speed)
        return goal

    def _on_goal(self, request):
        try:
            self._check(request)
        except gg.GripperGoalRefused as exc:
            self.node.get_logger().error(f'gripper_cmd: goal rejected: {exc}')
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def _on_accepted(self, handle):
        key = bytes(handle.goal_id.uuid)
        try:
            goal = self._check(handle.request)
            with self._lock:
                self.world.command_gripper(goal.position, goal.max_effort, goal.max_speed)
                self._preempt_locked('preempted by a newer gripper_cmd goal')
                self._active = _Active(gg.GripperMonitor(goal, self._settings(),
                                                         self.world.time))
                self._started[key] = self._active
        except (gg.GripperGoalRefused, GripperError) as exc:
            self._started[key] = str(exc)
        handle.execute()

    def _with_state(self, msg):
        """``msg`` (the action's Result or Feedback: the same state fields) with the jaw's
        state: a JointState (ParallelGripperCommand) or position and effort
        (GripperCommand)."""
        pos, vel, eff = self.world.gripper_state()
        if self.kind == 'parallel_gripper_command':
            msg.state = JointState(name=[self.joint], position=[pos], velocity=[vel],
                                   effort=[eff])
        else:
            msg.position, msg.effort = pos, eff
        return msg

    def _result(self, outcome: gg.GripperOutcome | None):
        r = self._with_state(self.action_type.Result())
        if outcome is not None:
            r.stalled, r.reached_goal = outcome.stalled, outcome.reached_goal
        return r

    def _execute(self, handle):
        active = self._started.pop(bytes(handle.goal_id.uuid))
        log = self.node.get_logger()
        if isinstance(active, str):
            handle.abort()
            log.warning(f'gripper_cmd: aborted: {active}')
            return self._result(None)
        period = 1.0 / float(self._param('action_monitor_rate'))
        while not active.done.wait(period):
            if handle.is_cancel_requested:
                with self._lock:
                    if self._active is active:
                        self._active = None
                        self.world.hold_gripper()
                if active.outcome is None:
                    handle.canceled()
                    log.info('gripper_cmd: canceled; the jaw holds where it is')
                    return self._result(None)
            if not self.node.context.ok():
                handle.abort()
                return self._result(None)
            handle.publish_feedback(self._with_state(self.action_type.Feedback()))
        out = active.outcome
        if out.succeeded:
            handle.succeed()
            how = 'reached goal' if out.reached_goal else out.message
            log.info(f'gripper_cmd: succeeded ({how})')
        else:
            handle.abort()
            log.warning(f'gripper_cmd: aborted: {out.message}')
        return self._result(out)

    def _preempt_locked(self, reason: str):
        old = self._active
        if old is not None and old.outcome is None:
            old.outcome = gg.GripperOutcome(False, False, False, reason)
            old.done.set()
        self._active = None

    def update(self, t: float, state: tuple[float, float, float]):
        """One controller update: the jaw's (position, velocity, effort) at world time t."""
        with self._lock:
            active = self._active
            if active is None:
                return
            out = active.monitor.update(t, state[0], state[1])
            if out is None:
                return
            active.outcome = out
            self._active = None
        active.done.set()

    def destroy(self):
        """End the active goal and the server."""
        with self._lock:
            self._preempt_locked('controller shutting down')
        self._server.destroy()


def gripper_server_for(node, world, params):
    """The jaw's action server for ``world`` (``params``: the node's, with
    ``gripper_controller_name`` and ``gripper_action_type``): a GripperActionServer, or for
    ``follow_joint_trajectory`` the finger under a JTC (ros/gripper_jtc_server.py); None when
    the robot has no gripper or control_msgs (the real package or its stand-in) is not
    importable."""
    controller, kind = params.gripper_controller_name, params.gripper_action_type
    if not world.has_gripper:
        return None
    try:
        from control_msgs.action import (
            FollowJointTrajectory,
            GripperCommand,
            ParallelGripperCommand,
        )
    except ImportError:  # pragma: no cover - depends on the machine
        return None
    if kind == 'follow_joint_trajectory':
        from .gripper_jtc_server import FingerTrajectoryServer
        return FingerTrajectoryServer(node, world, controller, FollowJointTrajectory,
                                      lambda: node.t0)
    action = ParallelGripperCommand if kind == 'parallel_gripper_command' else GripperCommand
    return GripperActionServer(node, world, controller, action, kind)
