"""The executor's gripper backend: a client of the gripper controller's action.

As the executor's ``gripper_action_type`` says: ``<gripper_controller_name>/gripper_cmd`` as
control_msgs/action/ParallelGripperCommand (ros2_control's parallel_gripper_action_controller,
Jazzy+) or GripperCommand (gripper_action_controller), or
``<gripper_controller_name>/follow_joint_trajectory`` (FollowJointTrajectory: a
joint_trajectory_controller on the finger joint). :meth:`send` returns a :class:`GripperRun`
that finishes with the controller's outcome; :meth:`cancel` cancels it (every one of these
controllers then holds the jaw: a cancel never opens it). The goal client is
ros/goal_client.GoalClient (a goal response lost on a busy machine still finishes).

Under a JTC the goal is one point (core/grasping/finger_trajectory.one_point: timed so the jaw
moves at the goal's speed from its position in ``joint_states``; no joint state yet: the run
fails before anything is sent) and carries no effort: the jaw squeezes with what the
hardware gives. Its result has no jaw state: the position and effort are the latest
``joint_states``; ``reached_goal`` is within ``JTC_REACHED`` of the target, ``stalled`` a
success short of it (a grasp).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from action_msgs.msg import GoalStatus

from ..core.grasping.finger_trajectory import one_point
from .goal_client import GoalClient

JTC_REACHED = 0.002     # m


@dataclass
class GripperRun:
    """One gripper goal: ``done`` once ``outcome`` ('succeeded', 'aborted', 'canceled',
    'rejected', 'failed') and the result fields are set."""

    done: threading.Event = field(default_factory=threading.Event)
    outcome: str = ''
    message: str = ''
    position: float = float('nan')
    effort: float = float('nan')
    stalled: bool = False
    reached_goal: bool = False
    handle: object = None


class GripperBackend:
    """Sends jaw goals for the executor ``node``; ``kind`` is one of ACTION_TYPES."""

    def __init__(self, node, controller_name: str, kind: str, callback_group=None):
        from control_msgs.action import (
            FollowJointTrajectory,
            GripperCommand,
            ParallelGripperCommand,
        )
        self.node, self.kind = node, kind
        self.action = {'parallel_gripper_command': ParallelGripperCommand,
                       'follow_joint_trajectory': FollowJointTrajectory}.get(kind,
                                                                            GripperCommand)
        action = 'follow_joint_trajectory' if kind == 'follow_joint_trajectory' \
            else 'gripper_cmd'
        self.name = f'{controller_name.strip("/")}/{action}'
        self._client = GoalClient(node, self.action, self.name, callback_group=callback_group)

    def resolved_name(self) -> str:
        """The action's full name."""
        return f'{self.node.get_namespace().rstrip("/")}/{self.name}'

    def ready(self) -> str | None:
        """None when goals can be sent, else why not."""
        if not self._client.server_is_ready():
            return f'gripper action server {self.resolved_name()} is not available'
        return None

    def _goal(self, joint: str, position: float, effort: float, speed: float):
        from sensor_msgs.msg import JointState
        goal = self.action.Goal()
        if self.kind == 'follow_joint_trajectory':
            from builtin_interfaces.msg import Duration
            from trajectory_msgs.msg import JointTrajectoryPoint
            t = one_point(position, speed, self.node.jaw_state(joint)[0])
            goal.trajectory.joint_names = [joint]
            goal.trajectory.points = [JointTrajectoryPoint(
                positions=[float(position)], time_from_start=Duration(
                    sec=int(t), nanosec=int(round((t - int(t)) * 1e9)) % 1_000_000_000))]
        elif self.kind == 'parallel_gripper_command':
            goal.command = JointState(name=[joint], position=[float(position)],
                                      velocity=[float(speed)], effort=[float(effort)])
        else:
            goal.command.position, goal.command.max_effort = float(position), float(effort)
        return goal

    def send(self, joint: str, position: float, effort: float, speed: float) -> GripperRun:
        """Send the jaw to ``position`` (m) with at most ``effort`` (N) at ``speed`` (m/s;
        GripperCommand has no speed: the controller's)."""
        run = GripperRun()
        try:
            goal = self._goal(joint, position, effort, speed)
        except ValueError as exc:
            self._end(run, 'failed', str(exc))
            return run
        future = self._client.send_goal_async(goal)
        future.add_done_callback(lambda f: self._on_response(f, run, joint, position))
        return run

    def _on_response(self, future, run: GripperRun, joint: str, position: float):
        try:
            handle = future.result()
        except Exception as exc:  # noqa: BLE001 - a transport error ends the run, not the node
            self._end(run, 'failed', f'sending the goal failed: {exc}')
            return
        if not handle.accepted:
            self._end(run, 'rejected', f'{self.resolved_name()} rejected the goal (its log '
                      'says why: outside the jaw, unknown joint)')
            return
        run.handle = handle
        handle.get_result_async().add_done_callback(
            lambda f: self._on_result(f, run, joint, position))

    def _on_result(self, future, run: GripperRun, joint: str, position: float):
        try:
            wrapped = future.result()
        except Exception as exc:  # noqa: BLE001
            self._end(run, 'failed', f'getting the result failed: {exc}')
            return
        r = wrapped.result
        if self.kind == 'follow_joint_trajectory':
            self._jtc_result(run, wrapped, joint, position)
            return
        if self.kind == 'parallel_gripper_command':
            run.position = r.state.position[0] if r.state.position else float('nan')
            run.effort = r.state.effort[0] if r.state.effort else float('nan')
        else:
            run.position, run.effort = r.position, r.effort
        run.stalled, run.reached_goal = bool(r.stalled), bool(r.reached_goal)
        outcome = {GoalStatus.STATUS_SUCCEEDED: 'succeeded',
                   GoalStatus.STATUS_CANCELED: 'canceled'}.get(wrapped.status, 'aborted')
        self._end(run, outcome, '')

    def _jtc_result(self, run: GripperRun, wrapped, joint: str, target: float):
        r = wrapped.result
        run.position, run.effort = self.node.jaw_state(joint)
        ok = wrapped.status == GoalStatus.STATUS_SUCCEEDED and r.error_code == 0
        run.reached_goal = bool(ok and abs(run.position - target) <= JTC_REACHED)
        run.stalled = bool(ok and not run.reached_goal)
        outcome = 'succeeded' if ok else {GoalStatus.STATUS_CANCELED: 'canceled'}.get(
            wrapped.status, 'aborted')
        self._end(run, outcome, '' if ok else f'(error_code {r.error_code}: '
                  f'{r.error_string})')

    @staticmethod
    def _end(run: GripperRun, outcome: str, message: str):
        run.outcome, run.message = outcome, message
        run.done.set()

    def cancel(self, run: GripperRun) -> None:
        """Cancel ``run`` if it is still going (the controller holds the jaw)."""
        if run.handle is not None and not run.done.is_set():
            run.handle.cancel_goal_async()

    def close(self) -> None:
        """Destroy the client."""
        self._client.destroy()
