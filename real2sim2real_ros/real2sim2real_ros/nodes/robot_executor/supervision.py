"""What both of the executor's goals check while the arm moves, and the types they share.

:func:`check_motion` is the one supervision rule set, called once per supervision tick by
``~/execute_trajectory`` and ``~/execute_policy``: a stop or disarm request, a cancel, a
controller failure, a tracking error (judged at each state's measurement time), joint states
that stopped arriving, or states that arrive too old (STALE_STATE). It returns a
:class:`Fault` (and has disarmed where the fault disarms); each goal maps the fault's kind to
its own action's error code and sends the hold.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

import numpy as np
from rclpy.action import ActionServer, CancelResponse, GoalResponse

from ...core import execution_safety as es

FEEDBACK_PERIOD = 0.05      # s: ~20 Hz feedback and supervision
MAX_EXTRAPOLATION = 0.1     # s: stop points are extrapolated from a state at most this old
TRACKING_STAMP_WINDOW = 2.0  # s: older tracked-object stamps are implausible (other clock)
OTHER_CLOCK_AGE = 60.0      # s: a joint_states stamp this old is on another clock, not late
# s: a state older than this when it arrives is STALE_STATE. Tracking used to accept stamps up
# to 2 s old; with one busy process per core beside the bringup states arrived up to 1.2 s old
# (the executor's own queue under load), which is still judged at its stamp.
MAX_STATE_AGE = 2.0


class Abort(Exception):
    """Ends a goal with ``code`` and ``message`` (the hold, if any, is already sent)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Execution:
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
    stage: object = None               # core.artifacts stage of the goal, once made
    state_stamps: list = field(default_factory=list)   # recorded joint_states' header stamps


@dataclass
class Fault:
    """Why a motion must end. ``kind``: STOPPED (the stop ramp is already sent), CANCELED,
    CONTROLLER, TRACKING_ERROR, STATES_STOPPED or STALE_STATE (the last three disarm)."""
    kind: str
    message: str


def check_motion(node, ex: Execution, goal_handle, now: float, during: str,
                 elapsed: float) -> Fault | None:
    """The supervision rules for one tick of a goal (``elapsed`` s since it started); before
    its first motion is sent (``ex.t0`` None) only stop and cancel. Disarms
    (``node.disarm_on_fault``) for the faults that do."""
    p = node.p
    with node.lock:
        moving = ex.t0 is not None
        sample = ex.monitor.last if ex.monitor is not None else None
        stale = now - ex.last_state_time > p.state_timeout
        # How old the latest state already was when it arrived (a clock or a queue behind
        # ours); states that stop arriving are the check above.
        old = ex.last_state_time - ex.last_measured
        stop_reason = ex.stop_reason
    if stop_reason:
        return Fault('STOPPED', stop_reason)
    if goal_handle.is_cancel_requested:
        return Fault('CANCELED', f'canceled after {elapsed:.2f} s of {during}')
    if not moving:
        return None
    failure = node.backend.failure()
    if failure:
        node.disarm_on_fault(failure)
        return Fault('CONTROLLER', f'controller failure: {failure}; disarmed')
    if sample is not None and sample.exceeded:
        j = int(np.argmax(sample.error))
        return Fault('TRACKING_ERROR', (
            f'tracking error {sample.max_error:.4f} rad on joint '
            f'{ex.monitor.joint_names[j]!r} at t = {sample.time:.3f} s exceeds '
            f'max_tracking_error {p.max_tracking_error} rad (state measured '
            f'{now - ex.t0 - sample.time:.3f} s before it was judged)'))
    if stale:
        node.disarm_on_fault('joint_states stopped arriving')
        return Fault('STATES_STOPPED', (
            f'joint_states stopped arriving for {now - ex.last_state_time:.2f} s during '
            f'{during}; disarmed'))
    if old > MAX_STATE_AGE:
        node.disarm_on_fault('joint_states too old')
        return Fault('STALE_STATE', (
            f'joint_states arrive but the latest was {old:.2f} s old when it arrived '
            f'(> {MAX_STATE_AGE} s; measured {now - ex.last_measured:.2f} s ago) during '
            f"{during}: the executor's state is old, which says nothing about the arm; "
            f'disarmed'))
    return None


def finish_goal(node, goal_handle, result, code: int, message: str, names: dict,
                action: str, ok: int, canceled: int, extra: str = ''):
    """Set ``result``'s error fields, end the goal (succeed / canceled / abort) and log it."""
    result.error_code = code
    result.error_msg = message
    if code == ok:
        goal_handle.succeed()
    elif code == canceled and goal_handle.is_cancel_requested:
        goal_handle.canceled()
    else:
        goal_handle.abort()
    text = f'{action}: {names.get(code, code)}' + (f': {message}' if message else '') + extra
    # rclpy forbids one logging call site with two severities: two calls.
    if code == ok:
        node.get_logger().info(text)
    else:
        node.get_logger().warning(text)
    return result


def goal_server(node, action_type, name: str, execute, callback_group):
    """An executor action server: every goal accepted (a refused one is then aborted with its
    code, so the client learns why) and every cancel accepted."""
    return ActionServer(node, action_type, name, execute,
                        goal_callback=lambda _goal: GoalResponse.ACCEPT,
                        cancel_callback=lambda _goal: CancelResponse.ACCEPT,
                        callback_group=callback_group)


def finite_or(value: float, default: float) -> float:
    """``value`` when finite and positive, else ``default`` (a goal field left at 0 / NaN)."""
    return value if math.isfinite(value) and value > 0 else default


def run_guarded(node, ex: Execution, what: str, internal_code: int, body):
    """``body()`` -> (code, message) for a claimed goal: an :class:`Abort` ends it with its
    code; any other exception (bad input must never kill the node) holds the arm if something
    moved and ends it with ``internal_code``; the goal is released either way."""
    try:
        return body()
    except Abort as exc:
        return exc.code, exc.message
    except Exception as exc:  # noqa: BLE001 - bad input must never kill the node
        node.get_logger().error(f'{what} failed unexpectedly: {exc!r}')
        if ex.t0 is not None:
            node.send_stop(ex)
        return internal_code, f'internal error: {exc}; holding position'
    finally:
        node.release()


def run_goal(node, goal_handle, result, what: str, internal_code: int, body, manifest, finish,
             after=None):
    """The frame every executor goal runs in: claimed (NOT_ARMED / BUSY otherwise, ended
    through ``finish``), ``body(ex)`` -> (code, message) under :func:`run_guarded`, the bag
    closed into ``result``, ``after(ex)`` (the result's own figures), the manifest
    ``manifest(ex, code, message)`` of the stage the goal opened (if it opened one), then
    ``finish(goal_handle, result, code, message)``."""
    ex, refused = node.claim(goal_handle, type(result))
    if ex is None:
        return finish(goal_handle, result, *refused)
    code, message = run_guarded(node, ex, what, internal_code, lambda: body(ex))
    stage = ex.stage
    node.recorder.close_bag(ex, result)
    if after is not None:
        after(ex)
    if stage is not None:
        node.recorder.finish(stage, manifest(ex, code, message), result.bag_path)
    return finish(goal_handle, result, code, message)
