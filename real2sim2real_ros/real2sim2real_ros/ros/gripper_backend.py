"""The executor's gripper backend: a client of the gripper controller's ``gripper_cmd``.

``<gripper_controller_name>/gripper_cmd`` is control_msgs/action/ParallelGripperCommand
(ros2_control's parallel_gripper_action_controller, Jazzy+) or GripperCommand
(gripper_action_controller), as the executor's ``gripper_action_type`` says. :meth:`send`
returns a :class:`GripperRun` that finishes with the controller's outcome; :meth:`cancel`
cancels it (both controllers then hold the jaw: a cancel never opens it). The goal client is
ros/goal_client.GoalClient (a goal response lost on a busy machine still finishes).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from action_msgs.msg import GoalStatus

from .goal_client import GoalClient

ACTION_TYPES = ('parallel_gripper_command', 'gripper_command')


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
        from control_msgs.action import GripperCommand, ParallelGripperCommand
        self.node, self.kind = node, kind
        self.action = ParallelGripperCommand if kind == 'parallel_gripper_command' \
            else GripperCommand
        self.name = f'{controller_name.strip("/")}/gripper_cmd'
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
        if self.kind == 'parallel_gripper_command':
            goal.command = JointState(name=[joint], position=[float(position)],
                                      velocity=[float(speed)], effort=[float(effort)])
        else:
            goal.command.position, goal.command.max_effort = float(position), float(effort)
        return goal

    def send(self, joint: str, position: float, effort: float, speed: float) -> GripperRun:
        """Send the jaw to ``position`` (m) with at most ``effort`` (N) at ``speed`` (m/s;
        GripperCommand has no speed: the controller's)."""
        run = GripperRun()
        future = self._client.send_goal_async(self._goal(joint, position, effort, speed))
        future.add_done_callback(lambda f: self._on_response(f, run))
        return run

    def _on_response(self, future, run: GripperRun):
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
        handle.get_result_async().add_done_callback(lambda f: self._on_result(f, run))

    def _on_result(self, future, run: GripperRun):
        try:
            wrapped = future.result()
        except Exception as exc:  # noqa: BLE001
            self._end(run, 'failed', f'getting the result failed: {exc}')
            return
        r = wrapped.result
        if self.kind == 'parallel_gripper_command':
            run.position = r.state.position[0] if r.state.position else float('nan')
            run.effort = r.state.effort[0] if r.state.effort else float('nan')
        else:
            run.position, run.effort = r.position, r.effort
        run.stalled, run.reached_goal = bool(r.stalled), bool(r.reached_goal)
        outcome = {GoalStatus.STATUS_SUCCEEDED: 'succeeded',
                   GoalStatus.STATUS_CANCELED: 'canceled'}.get(wrapped.status, 'aborted')
        self._end(run, outcome, '')

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
