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

The same double registration also raised out of ``send_goal_async`` itself: when the response
landed on the second future before its done callback was added, the callback ran at once
and removed a future not yet added (``ValueError: list.remove(x): x not in list``, two CI
failures in one run, the goal already sent and accepted). :meth:`GoalClient.send_goal_async`
therefore sends the goal as upstream's fix does: one future, registered with the client and
its executor before the lock that ``take_data`` needs is released, so no response can be
taken before it is registered. Where the client lacks the private members that needs (another
rclpy), it falls back to the stock method.
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
# The ActionClient members GoalClient._send_goal_registered uses (rclpy 9.1.2's names).
_SEND_MEMBERS = ('_action_type', '_client_handle', '_lock', '_pending_goal_requests',
                 '_goal_sequence_number_to_goal_id', '_feedback_callbacks',
                 '_remove_pending_goal_request', 'add_future')


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
        if all(hasattr(self, a) for a in _SEND_MEMBERS):
            inner = self._send_goal_registered(goal, feedback_callback, goal_uuid)
        else:
            inner = super().send_goal_async(goal, feedback_callback, goal_uuid)
        inner.add_done_callback(lambda f: self._finish(key, future=f))
        return outer

    def _send_goal_registered(self, goal, feedback_callback, goal_uuid) -> Future:
        """Send the goal request with its one response future registered under the client's
        lock (``take_data`` takes the response under it): the future the response lands on
        is the one returned, its done callback added before any response can set it."""
        if not isinstance(goal, self._action_type.Goal):
            raise TypeError(f'Expected goal type ({type(self._action_type.Goal)}) but received '
                            f'({type(goal)})')
        request = self._action_type.Impl.SendGoalService.Request()
        request.goal_id = goal_uuid
        request.goal = goal
        future: Future = Future()
        if feedback_callback is not None:
            self._feedback_callbacks[bytes(goal_uuid.uuid)] = feedback_callback
        with self._lock:
            sequence_number = self._client_handle.send_goal_request(request)
            if sequence_number in self._pending_goal_requests:
                raise RuntimeError(f'Sequence ({sequence_number}) conflicts with pending goal '
                                   f'request')
            self._pending_goal_requests[sequence_number] = future
            self._goal_sequence_number_to_goal_id[sequence_number] = request.goal_id
            self.add_future(future)
            future.add_done_callback(self._remove_pending_goal_request)
        return future

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
