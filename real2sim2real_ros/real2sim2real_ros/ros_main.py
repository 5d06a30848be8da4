"""The one way every node executable starts and stops.

Explicit ``rclpy.init()`` with try/finally shutdown (the ``with rclpy.init()`` form fails on
Jazzy), a multi-threaded executor so action callbacks and timers run side by side, and a
clean exit on SIGINT/SIGTERM (what the launch runner and ``ros2 launch`` send).
"""
from __future__ import annotations

import signal
import sys
import threading

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor


def run_node(node_factory, args=None, num_threads: int = 4) -> int:
    """Build the node with ``node_factory()`` and spin it until shutdown; return an exit code."""
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
        executor = MultiThreadedExecutor(num_threads=num_threads)
        executor.add_node(node)
        spinner = threading.Thread(target=_spin, args=(executor, stop), daemon=True)
        spinner.start()
        while not stop.wait(0.1) and rclpy.ok():
            pass
        stop.set()
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


def _spin(executor, stop: threading.Event):
    try:
        executor.spin()
    except Exception:  # noqa: BLE001 - shutdown races end the spin; the main thread exits
        pass
    finally:
        stop.set()


class ConfigurationError(Exception):
    """Raised by a node constructor when its parameters or input files are unusable."""
