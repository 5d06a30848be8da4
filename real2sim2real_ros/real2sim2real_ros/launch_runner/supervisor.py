"""Start, watch, respawn and stop the nodes of a LaunchPlan.

Each node runs in its own session/process group, so a signal reaches the node and anything
it started, and a Ctrl-C in the terminal reaches only the runner, which forwards it:
SIGINT first, SIGTERM after ``sigint_timeout``, SIGKILL after ``sigterm_timeout`` more (the
order and defaults of launch). On Linux each child also gets SIGTERM if the runner dies
without cleaning up (PR_SET_PDEATHSIG), so even ``kill -9`` of the runner leaves no node.

Exit code of ``run()``: 0 after a requested stop (signal, ``request_stop``), when the last
running node exited 0, or when a required node (``on_exit="shutdown"``) exited 0; 1 when a
node failed: a non-respawning node exited non-zero or by a signal, a required node exited
non-zero, or a non-respawning node exited at all (even with 0) while other nodes were still
running - the others are then stopped and the reason is logged. A respawning node is started
again whatever its exit code (until ``respawn_max_retries``).
"""
from __future__ import annotations

import ctypes
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .errors import EXIT_NODE_FAILED, EXIT_OK
from .plan import LaunchPlan, NodeSpec, node_command

_PR_SET_PDEATHSIG = 1
try:
    _LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith('linux') else None
except OSError:  # pragma: no cover
    _LIBC = None


def _child_setup(runner_pid: int) -> None:  # runs in the child between fork and exec
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != runner_pid:  # the runner died before prctl took effect
        os._exit(1)


@dataclass
class _NodeState:
    spec: NodeSpec
    popen: subprocess.Popen | None = None
    pgids: set[int] = field(default_factory=set)
    respawn_at: float | None = None
    respawns: int = 0
    done: bool = False  # exited and will not be restarted
    readers: list[threading.Thread] = field(default_factory=list)


class Supervisor:
    """Runs a LaunchPlan; ``run()`` blocks until the launch ends and returns the exit code."""

    def __init__(self, plan: LaunchPlan, *, log_level: str | None = None,
                 sigint_timeout: float = 5.0, sigterm_timeout: float = 5.0,
                 stdout: IO[str] | None = None, stderr: IO[str] | None = None,
                 log_dir: str | os.PathLike | None = None, env: dict[str, str] | None = None,
                 poll_interval: float = 0.05) -> None:
        self.plan = plan
        self.log_level = log_level
        self.sigint_timeout = sigint_timeout
        self.sigterm_timeout = sigterm_timeout
        self._stdout = stdout
        self._stderr = stderr
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self._env = {**os.environ, 'PYTHONUNBUFFERED': '1', **(env or {})}
        self._poll = poll_interval
        self._states = [_NodeState(spec) for spec in plan.nodes]
        self._stop = threading.Event()
        self._escalate = threading.Event()
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self.started = threading.Event()  # set once every node was started (or start failed)
        self.finished = threading.Event()
        self.start_failed = False  # a node could not be started (see reason)
        self.exit_code: int | None = None
        self.reason = ''

    # --- public --------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask ``run()`` to shut everything down (thread- and signal-safe); a second call
        skips the remaining grace periods."""
        if self._stop.is_set():
            self._escalate.set()
        self._stop.set()

    def pids(self) -> dict[str, int]:
        """Label -> pid of every node process currently running."""
        with self._lock:
            return {s.spec.label: s.popen.pid for s in self._states
                    if s.popen is not None and s.popen.poll() is None}

    def alive(self, label: str | None = None) -> bool:
        """Is node ``label`` running? Without a label: is every node running?"""
        running = self.pids()
        if label is not None:
            return label in running
        return not self.finished.is_set() and len(running) == len(self._states)

    def run(self, handle_signals: bool = True) -> int:
        """Start every node, supervise until the launch ends, stop everything; exit code."""
        restore = self._install_signal_handlers() if handle_signals else {}
        code = EXIT_NODE_FAILED  # if supervision itself raises
        try:
            code = self._supervise()
        finally:
            self._shutdown()
            for sig, handler in restore.items():
                signal.signal(sig, handler)
            self.exit_code = code
            self.started.set()
            self.finished.set()
        return code

    # --- supervision ---------------------------------------------------------------------

    def _supervise(self) -> int:
        failed = False
        for state in self._states:
            if self._stop.is_set() or not self._spawn(state):
                failed = self.start_failed = not self._stop.is_set()
                break
        self.started.set()
        while not failed and not self._stop.is_set():
            now = time.monotonic()
            for state in self._states:
                if state.popen is not None and state.popen.poll() is not None:
                    verdict = self._on_exit(state, now)
                    if verdict is not None:
                        return verdict
                if state.respawn_at is not None and now >= state.respawn_at:
                    state.respawn_at = None
                    state.respawns += 1
                    if not self._spawn(state):
                        failed = True
                        break
            if all(s.done for s in self._states):
                self.reason = 'every node exited'
                return EXIT_OK
            self._stop.wait(self._poll)
        if failed:
            return EXIT_NODE_FAILED
        self.reason = self.reason or 'stop requested'
        return EXIT_OK

    def _on_exit(self, state: _NodeState, now: float) -> int | None:
        """Handle one node exit; return an exit code when the launch must end."""
        spec, code = state.spec, state.popen.returncode
        with self._lock:
            pgid = state.popen.pid
            state.popen = None
        self._signal_group(pgid, signal.SIGTERM)  # anything the node left behind
        self._info(f'[{spec.label}] exited with {_describe(code)}')
        if spec.required:
            self.reason = f"required node '{spec.label}' exited with {_describe(code)}"
            state.done = True
            self._info(f'{self.reason}; shutting down')
            return EXIT_OK if code == 0 else EXIT_NODE_FAILED
        retries_left = spec.respawn_max_retries < 0 or state.respawns < spec.respawn_max_retries
        if spec.respawn and retries_left:
            state.respawn_at = now + spec.respawn_delay
            self._info(f'[{spec.label}] respawning in {spec.respawn_delay:g} s')
            return None
        state.done = True
        others = [s.spec.label for s in self._states if not s.done]
        if code != 0 or others:
            # A node never leaves silently: a crash, or a clean exit while the rest of the
            # graph still runs (a graph without it is not the graph that was launched), ends
            # the launch with the reason, whatever the exit code.
            self.reason = f"node '{spec.label}' exited with {_describe(code)}"
            if code == 0:
                self.reason += (' while the rest of the graph was running (' +
                                ', '.join(others) + ')')
            self._info(f'{self.reason}; shutting down')
            return EXIT_NODE_FAILED
        return None

    def _spawn(self, state: _NodeState) -> bool:
        spec = state.spec
        cmd = node_command(spec, self.log_level)
        to_log = spec.output in ('log', 'both')
        log_file = None
        try:
            if to_log:
                log_file = open(self._log_path(spec), 'a', encoding='utf-8')  # noqa: SIM115
            popen = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=self._env, start_new_session=True,
                preexec_fn=functools.partial(_child_setup, os.getpid()))
        except OSError as exc:
            self.reason = f"cannot start node '{spec.label}' ({cmd[0]}): {exc.strerror or exc}"
            self._info(self.reason)
            if log_file is not None:
                log_file.close()
            return False
        with self._lock:
            state.popen = popen
            state.pgids.add(popen.pid)
        self._info(f'[{spec.label}] started, pid {popen.pid}')
        screen_out = spec.output in ('screen', 'both')
        # launch's 'log' mode: stdout to the log only, stderr to the log and the screen.
        targets = ((popen.stdout, self._stdout_stream() if screen_out else None),
                   (popen.stderr, self._stderr_stream()))
        state.readers = [r for r in state.readers if r.is_alive()]
        for pipe, stream in targets:
            reader = threading.Thread(target=self._pump, args=(pipe, spec.label, stream, log_file),
                                      daemon=True, name=f'launch-output-{spec.label}')
            reader.start()
            state.readers.append(reader)
        if log_file is not None:
            # The file stays open while any reader writes; close it when both are done.
            closer = threading.Thread(target=_close_after, args=(state.readers[-2:], log_file),
                                      daemon=True)
            closer.start()
        return True

    def _pump(self, pipe, label: str, stream: IO[str] | None, log_file: IO[str] | None) -> None:
        for raw in iter(pipe.readline, b''):
            line = raw.decode('utf-8', 'replace').rstrip('\n')
            with self._write_lock:
                # Keep draining even when a stream is gone (e.g. stdout piped to `head`):
                # a node blocked on a full pipe would hang.
                if stream is not None:
                    try:
                        stream.write(f'[{label}] {line}\n')
                        stream.flush()
                    except (OSError, ValueError):
                        stream = None
                if log_file is not None:
                    try:
                        log_file.write(line + '\n')
                        log_file.flush()
                    except (OSError, ValueError):
                        log_file = None
        pipe.close()

    # --- shutdown ------------------------------------------------------------------------

    def _shutdown(self) -> None:
        """SIGINT every running node, then SIGTERM, then SIGKILL; then sweep the groups."""
        for state in self._states:
            state.respawn_at = None
        stopping = [s for s in self._states if s.popen is not None and s.popen.poll() is None]
        for sig, timeout in ((signal.SIGINT, self.sigint_timeout),
                             (signal.SIGTERM, self.sigterm_timeout),
                             (signal.SIGKILL, 5.0)):
            running = [s for s in self._states if s.popen is not None and s.popen.poll() is None]
            if not running:
                break
            if sig != signal.SIGINT:
                self._info(f'sending {sig.name} to: ' + ', '.join(s.spec.label for s in running))
            for state in running:
                self._signal_group(state.popen.pid, sig)
            self._escalate.clear()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and not self._escalate.is_set() and any(
                    s.popen.poll() is None for s in running):
                time.sleep(0.02)
        for state in self._states:
            for pgid in state.pgids:  # orphans a node left in its group
                self._signal_group(pgid, signal.SIGKILL)
            if state.popen is not None:
                state.popen.wait()
            for reader in state.readers:
                reader.join(timeout=2.0)
        for state in stopping:
            self._info(f'[{state.spec.label}] stopped ({_describe(state.popen.returncode)})')

    @staticmethod
    def _signal_group(pgid: int, sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _install_signal_handlers(self) -> dict:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, lambda *_: self.request_stop())
        return previous

    # --- output helpers ------------------------------------------------------------------

    def _stdout_stream(self) -> IO[str]:
        return self._stdout if self._stdout is not None else sys.stdout

    def _stderr_stream(self) -> IO[str]:
        return self._stderr if self._stderr is not None else sys.stderr

    def _info(self, message: str) -> None:
        with self._write_lock:
            try:
                stream = self._stderr_stream()
                stream.write(f'[INFO] [launch]: {message}\n')
                stream.flush()
            except (OSError, ValueError):
                pass

    def _log_path(self, spec: NodeSpec) -> Path:
        if self._log_dir is None:
            base = os.environ.get('ROS_LOG_DIR') or os.path.join(
                os.environ.get('ROS_HOME') or os.path.expanduser('~/.ros'), 'log')
            stamp = time.strftime('%Y-%m-%d-%H-%M-%S')
            self._log_dir = Path(base) / f'r2s2r_launch_{stamp}_{os.getpid()}'
        self._log_dir.mkdir(parents=True, exist_ok=True)
        return self._log_dir / (spec.label.replace('/', '.') + '.log')

    @property
    def log_dir(self) -> Path | None:
        """Where nodes with output=log|both write (created on first use)."""
        return self._log_dir


def _close_after(readers: list[threading.Thread], log_file: IO[str]) -> None:
    for reader in readers:
        reader.join()
    log_file.close()


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f'signal {signal.Signals(-code).name}'
        except ValueError:
            return f'signal {-code}'
    return f'code {code}'


def run_plan(plan: LaunchPlan, **kwargs) -> int:
    """Run ``plan`` in the foreground (signals handled); return the exit code."""
    return Supervisor(plan, **kwargs).run()
