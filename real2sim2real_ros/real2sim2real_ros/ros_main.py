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
    # Python runs signal handlers only between bytecodes of the main thread, so the main
    # thread spins in short slices (spin_once with a timeout) and checks the flag: a node
    # with no timers or traffic still stops promptly on SIGINT/SIGTERM from a launcher.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    node = None
    code = 0
    try:
        node = node_factory()
        executor = MultiThreadedExecutor(num_threads=num_threads)
        executor.add_node(node)
        while not stop.is_set() and rclpy.ok():
            executor.spin_once(timeout_sec=0.1)
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
        if node is not None:
            close = getattr(node, 'close', None)
            if close is not None:
                close()
            node.destroy_node()
        rclpy.try_shutdown()
    return code


class ConfigurationError(Exception):
    """Raised by a node constructor when its parameters or input files are unusable."""
