"""``LaunchedGraph``: run a launch file in the background of a Python process (test fixtures).

    from real2sim2real_ros.launch_runner import LaunchedGraph

    with LaunchedGraph('/path/bringup.launch.xml', {'cell': 'emulated'},
                       env={'ROS_DOMAIN_ID': '41'}) as graph:
        assert graph.alive()            # every node is running
        graph.pids()                    # {'sim_server': 1234, ...}
        ...                             # talk to the nodes with rclpy
    # leaving the block stops every node (SIGINT, SIGTERM, SIGKILL) and leaves none behind;
    # graph.exit_code holds the runner's code (0 clean, 1 a node failed).

The plan is parsed (and every error raised as LaunchError) in the constructor, before any
process starts. Node output goes to ``stdout``/``stderr`` (default: this process's), so
pytest captures it.
"""
from __future__ import annotations

import os
import threading
from typing import IO

from .parser import parse_launch_file
from .plan import LaunchPlan
from .supervisor import Supervisor


class LaunchedGraph:
    """The nodes of a launch plan, supervised on a background thread."""

    def __init__(self, plan_or_file: LaunchPlan | str | os.PathLike,
                 launch_args: dict[str, str] | None = None, *, log_level: str | None = None,
                 env: dict[str, str] | None = None, sigint_timeout: float = 5.0,
                 sigterm_timeout: float = 5.0, log_dir: str | os.PathLike | None = None,
                 stdout: IO[str] | None = None, stderr: IO[str] | None = None) -> None:
        if isinstance(plan_or_file, LaunchPlan):
            if launch_args:
                raise ValueError('launch_args only apply when a launch file is given')
            self.plan = plan_or_file
        else:
            self.plan = parse_launch_file(plan_or_file, launch_args or {})
        self._supervisor = Supervisor(
            self.plan, log_level=log_level, env=env, sigint_timeout=sigint_timeout,
            sigterm_timeout=sigterm_timeout, log_dir=log_dir, stdout=stdout, stderr=stderr)
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 30.0) -> LaunchedGraph:
        """Start every node; return once all were started.

        Raises RuntimeError (after stopping what did start) when a node cannot be started.
        """
        if self._thread is not None:
            raise RuntimeError('LaunchedGraph already started')
        self._thread = threading.Thread(target=self._supervisor.run, kwargs={
            'handle_signals': False}, name='launched-graph', daemon=True)
        self._thread.start()
        self._supervisor.started.wait(timeout)
        if self._supervisor.start_failed:
            self._thread.join()
            raise RuntimeError(f'launch failed: {self._supervisor.reason}')
        return self

    def stop(self, timeout: float | None = None) -> int | None:
        """Stop every node (SIGINT, then SIGTERM, then SIGKILL); return the exit code
        (None if ``timeout`` ran out first)."""
        if self._thread is None:
            return None
        self._supervisor.request_stop()
        self._thread.join(timeout)
        return self._supervisor.exit_code

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the launch to end on its own (all nodes exited, a failure); exit code."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self._supervisor.exit_code

    def alive(self, label: str | None = None) -> bool:
        """Is node ``label`` running? Without a label: is every node running?"""
        return self._supervisor.alive(label)

    def pids(self) -> dict[str, int]:
        """Label (node name, see NodeSpec.label) -> pid of each running node process."""
        return self._supervisor.pids()

    @property
    def exit_code(self) -> int | None:
        """0 clean, 1 a node failed; None while running."""
        return self._supervisor.exit_code

    @property
    def reason(self) -> str:
        """Why the launch ended (empty while running)."""
        return self._supervisor.reason

    @property
    def log_dir(self):
        return self._supervisor.log_dir

    def __enter__(self) -> LaunchedGraph:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
