"""An action client whose goal futures always finish once the server has the goal.

``rclpy.action.ActionClient.send_goal_async`` in the pinned rclpy (9.1.2, Kilted) registers
the goal's future twice, the second time after its lock is released. When the server's
response arrives between the two (a busy machine: the server answered, the client thread was
descheduled), the response lands on the first future and the returned one never finishes
(ros2/rclpy#1123 has the race; the shipped backport left the second registration in). CI hit
it about once in three runs: the capture node logged "captured 4 views" while the commander
reported "goal: no answer within 15 s". A service response lost before DDS matched the
client's reader would look the same.

The server also publishes every goal it accepts on ``<action>/_action/status`` (reliable,
transient local, so a late reader still gets it). :class:`GoalClient` watches that topic:
whichever comes first, the goal response or the goal's id in the status array, finishes the
returned future. The status can arrive before the response's future finishes (its callbacks
run as a later executor task), so the status path waits ``RESPONSE_GRACE_S`` first. The rest is
the plain ActionClient (result, feedback, cancel).
"""
from __future__ import annotations

import threading
import uuid

from action_msgs.msg import GoalStatus, GoalStatusArray
from rclpy.action import ActionClient
from rclpy.action.client import ClientGoalHandle
from rclpy.task import Future
from unique_identifier_msgs.msg import UUID

from . import qos


def error_codes(result_cls) -> dict[int, str]:
    """``{value: NAME}`` of an action result's error-code constants, read from the generated
    interface (the ``.action`` file is their one source): ``error_codes(Capture.Result)``."""
    names = (n for n in dir(result_cls) if n.isupper() and not n.startswith('_'))
    return {getattr(result_cls, n): n for n in names if isinstance(getattr(result_cls, n), int)}


def code_name(result_cls, code: int) -> str:
    """The constant name of ``code`` in ``result_cls`` (``'TRAINING_FAILED'``), or the number."""
    return error_codes(result_cls).get(code, str(code))

# Every state a server reports only for a goal it has accepted.
ACCEPTED_STATES = frozenset((
    GoalStatus.STATUS_ACCEPTED, GoalStatus.STATUS_EXECUTING, GoalStatus.STATUS_CANCELING,
    GoalStatus.STATUS_SUCCEEDED, GoalStatus.STATUS_CANCELED, GoalStatus.STATUS_ABORTED))
# How long the goal response may trail the status array that lists the goal. The server sends
# the response first and the status right after, from the same callback.
RESPONSE_GRACE_S = 1.0


class GoalClient(ActionClient):
    """Drop-in ActionClient; ``recovered`` counts goals whose acceptance came from status."""

    def __init__(self, node, action_type, action_name, **kwargs):
        super().__init__(node, action_type, action_name, **kwargs)
        self._owner, self._name, self._type = node, action_name, action_type
        self._waiting: dict[bytes, tuple[Future, UUID]] = {}
        # Goals the status topic listed, with the timer that finishes them from it. The
        # normal path cancels its timer: no idle thread per goal at a command rate.
        self._seen: dict[bytes, threading.Timer] = {}
        self._waiting_lock = threading.Lock()
        self.recovered = 0
        self._status_sub = node.create_subscription(
            GoalStatusArray, f'{action_name}/_action/status', self._on_status,
            qos.ACTION_STATUS, callback_group=kwargs.get('callback_group'))

    def send_goal_async(self, goal, feedback_callback=None, goal_uuid=None):
        goal_uuid = goal_uuid or UUID(uuid=list(uuid.uuid4().bytes))
        key = bytes(goal_uuid.uuid)
        outer: Future = Future()
        with self._waiting_lock:
            self._waiting[key] = (outer, goal_uuid)
        inner = super().send_goal_async(goal, feedback_callback, goal_uuid)
        inner.add_done_callback(lambda f: self._finish(key, future=f))
        return outer

    def _on_status(self, msg: GoalStatusArray) -> None:
        for status in msg.status_list:
            key = bytes(status.goal_info.goal_id.uuid)
            if status.status not in ACCEPTED_STATES:
                continue
            with self._waiting_lock:
                if key not in self._waiting or key in self._seen:
                    continue
                timer = self._seen[key] = threading.Timer(
                    RESPONSE_GRACE_S, self._finish, (key,),
                    {'accepted_at': status.goal_info.stamp})
            timer.daemon = True
            timer.start()   # a cancel() that beat start() still holds: run() sees it set

    def _finish(self, key: bytes, future: Future | None = None, accepted_at=None) -> None:
        with self._waiting_lock:
            entry = self._waiting.pop(key, None)
            timer = self._seen.pop(key, None)
        if timer is not None:
            timer.cancel()
        if entry is None:
            return  # the other path finished it first
        outer, goal_uuid = entry
        if future is not None:
            if future.exception() is not None:
                outer.set_exception(future.exception())
            else:
                outer.set_result(future.result())
            return
        self.recovered += 1
        response = self._type.Impl.SendGoalService.Response(accepted=True, stamp=accepted_at)
        outer.set_result(ClientGoalHandle(self, goal_uuid, response))
        # After the result: a first log call from a thread of its own took seconds here.
        self._owner.get_logger().warning(
            f'{self._name}: the goal response never reached this client; the server lists '
            f'the goal as accepted, so it goes on from the status topic')

    def destroy(self):
        self._owner.destroy_subscription(self._status_sub)
        super().destroy()
