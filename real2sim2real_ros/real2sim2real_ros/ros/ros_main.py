"""The one way every node executable starts and stops.

Explicit ``rclpy.init()`` with try/finally shutdown (the ``with rclpy.init()`` form fails on
Jazzy), a multi-threaded executor so action callbacks and timers run side by side, and a
clean exit on SIGINT/SIGTERM (what the launch runner and ``ros2 launch`` send).

A bug in one callback never takes the node down silently: :func:`guard_callbacks` wraps every
service, subscription and timer callback the node created in its constructor, so an exception
is logged with its traceback and a service request is answered (``success`` False and
``message`` / ``error_msg`` naming the exception) while the node keeps serving. An exception
that still ends the spin is logged and the process exits with code 1, never 0.

Shutdown is bounded: once the node is told to stop, the process is gone within
:data:`SHUTDOWN_DEADLINE_S`. A callback that never returns (a lock never released, a wait
that nothing will end) would otherwise hold rclpy's worker pool, and with it the process, for
ever: then :mod:`faulthandler` writes every thread's stack to stderr and exits with code 1.
``run_node`` is therefore a process's main, never called inside a longer-lived process.
"""
from __future__ import annotations

import faulthandler
import functools
import inspect
import signal
import sys
import threading
import time
import traceback

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor

# Seconds from the stop signal to the process's end, beyond which a stuck shutdown is
# dumped and ended. ros2 launch escalates SIGTERM to SIGKILL after 5 s by default; the node's
# own close() (bags written, threads joined) fits well inside this.
SHUTDOWN_DEADLINE_S = 10.0


def run_node(node_factory, args=None, num_threads: int = 4) -> int:
    """Build the node with ``node_factory()`` and spin it until shutdown; return an exit code.
    The process's main: from the stop on, a watchdog ends the process after
    SHUTDOWN_DEADLINE_S (see the module docstring)."""
    rclpy.init(args=args)
    stop = threading.Event()
    # The executor spins on a worker thread; the main thread only waits, in short slices, so
    # Python can run the SIGINT/SIGTERM handlers (it runs them between main-thread bytecodes):
    # a node with no timers or traffic still stops promptly when a launcher signals it.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    node = None
    code = 0
    executor = spinner = None
    try:
        node = node_factory()
        guard_callbacks(node)
        executor = MultiThreadedExecutor(num_threads=num_threads)
        executor.add_node(node)
        failure: list[BaseException] = []
        spinner = threading.Thread(target=_spin, args=(executor, stop, failure), daemon=True)
        spinner.start()
        while not stop.wait(0.1) and rclpy.ok():
            pass
        stop.set()
        if failure:
            text = ''.join(traceback.format_exception(failure[0]))
            print(f'[{getattr(node, "get_name", lambda: "node")()}] the executor stopped on an '
                  f'exception; exiting:\n{text}', file=sys.stderr, flush=True)
            code = 1
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except ConfigurationError as exc:
        # A bad parameter or spec: one clear line, a non-zero exit (documented per node).
        print(f'[{getattr(exc, "node_name", "node")}] configuration error: {exc}',
              file=sys.stderr, flush=True)
        code = 2
    except Exception:  # noqa: BLE001 - a shutdown race makes rcl raise 'context is not valid'
        if rclpy.ok() and not stop.is_set():
            raise
    finally:
        # Armed until the process ends (the interpreter's own exit joins the worker pool's
        # threads too); a C thread, so it fires even when a stuck thread holds the GIL.
        faulthandler.dump_traceback_later(SHUTDOWN_DEADLINE_S, exit=True)
        if executor is not None:
            executor.shutdown(timeout_sec=2.0)
        if spinner is not None:
            # Let the spin thread leave rcl's wait before the node and context go, as
            # StateListener.close does for its own (the join there is what ended the
            # "terminate called without an active exception" aborts; this one is the same
            # ordering for the main executor).
            spinner.join(timeout=5.0)
        if node is not None:
            close = getattr(node, 'close', None)
            if close is not None:
                close()
            node.destroy_node()
        rclpy.try_shutdown()
    return code


# rclpy builds each wait set from a copy of the nodes' waitables; a subscription destroyed
# meanwhile by another thread (a per-goal subscription ending, ros/subscriptions.py) leaves
# its destroyed QoS event handler in that copy, and add_to_wait_set raises InvalidHandle
# ("cannot use Destroyable because destruction was requested"): once, camera_capture died of
# it. The next wait set no longer holds the entity, so spinning resumes; only a burst of them
# (something that stays broken) ends the node.
INVALID_HANDLE_BURST = (50, 5.0)      # this many InvalidHandle errors within this many s


def _spin(executor, stop: threading.Event, failure: list):
    from rclpy.exceptions import InvalidHandle
    recent: list[float] = []
    try:
        while True:
            try:
                executor.spin()
                return
            except InvalidHandle:
                if stop.is_set() or not rclpy.ok():
                    return
                now = time.monotonic()
                recent = [t for t in recent if now - t < INVALID_HANDLE_BURST[1]] + [now]
                if len(recent) >= INVALID_HANDLE_BURST[0]:
                    raise
    except Exception as exc:  # noqa: BLE001 - reported by run_node unless shutting down
        if not stop.is_set() and rclpy.ok():
            failure.append(exc)
    finally:
        stop.set()


_ERROR_FIELDS = ('message', 'error_msg', 'error_message')


def guard_callbacks(node) -> int:
    """Wrap the callbacks of ``node``'s services, subscriptions and timers so an exception is
    logged (with its traceback) instead of ending the executor; a service then answers with
    ``success = False`` and the exception in its message field. Returns how many were wrapped.
    Idempotent; coroutine callbacks are left as they are. Action servers need no wrapping:
    rclpy aborts a goal whose execute callback raises."""
    count = 0
    for srv in node.services:
        if not (getattr(srv.callback, '_r2s2r_guarded', False)
                or inspect.iscoroutinefunction(srv.callback)):
            srv.callback = _guard_service(node, srv)
            count += 1
    for what, items, label in (('subscription', node.subscriptions, 'topic_name'),
                               ('timer', node.timers, None)):
        for item in items:
            cb = getattr(item, 'callback', None)
            if (cb is None or getattr(cb, '_r2s2r_guarded', False)
                    or inspect.iscoroutinefunction(cb)):
                continue
            name = f'{what} {getattr(item, label, "")}'.strip() if label else what
            item.callback = _guard_plain(node, name, cb)
            count += 1
    return count


def _guard_service(node, srv):
    callback, name = srv.callback, srv.service_name

    @functools.wraps(callback)
    def guarded(request, response):
        try:
            return callback(request, response)
        except Exception as exc:  # noqa: BLE001 - any bug in a handler: answer and keep serving
            node.get_logger().error(f'service {name}: the handler raised; answered with an '
                                    f'error:\n{traceback.format_exc()}')
            response = srv.srv_type.Response()
            text = f'internal error in {name}: {type(exc).__name__}: {exc}'
            if hasattr(response, 'success'):
                response.success = False
            for field in _ERROR_FIELDS:
                if hasattr(response, field):
                    setattr(response, field, text)
            return response
    guarded._r2s2r_guarded = True
    return guarded


def _guard_plain(node, name, callback):
    @functools.wraps(callback)
    def guarded(*args, **kwargs):
        try:
            return callback(*args, **kwargs)
        except Exception:  # noqa: BLE001 - one bad message or tick must not end the node
            node.get_logger().error(f'{name}: the callback raised (the node keeps running):\n'
                                    f'{traceback.format_exc()}')
            return None
    guarded._r2s2r_guarded = True
    return guarded


class ConfigurationError(Exception):
    """Raised by a node constructor when its parameters or input files are unusable;
    ``node_name`` (optional) names the node in run_node's one-line message."""

    def __init__(self, message: str = '', node_name: str | None = None):
        super().__init__(message)
        if node_name is not None:
            self.node_name = node_name
