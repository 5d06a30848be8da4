"""Shared fixtures: a private DDS domain per test session, and the package's real launch files.

Every process a test starts inherits ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST and a
ROS_DOMAIN_ID that no other concurrent run holds (real2sim2real_ros.ros.dds_isolation), so
parallel runs on one machine never see each other and no DDS traffic leaves the machine.

Skips are visible: a run with a skip that is not on ALLOWED_SKIPS ends with a failing exit
status and lists it. Everything in requirements.txt and the package's own built interfaces
must import; only what no registry carries may be skipped.
"""
from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest
from helpers.graph import package_share, start_graph

# Skips expected on a machine built from requirements.txt: (node id pattern, fnmatch, relative
# to the test folder) -> why. Anything else that skips fails the run.
ALLOWED_SKIPS = {
    'test_launch_pytest_lab.py':
        'launch_pytest / launch / launch_xml are on no package registry: lab machines only '
        '(test_cell_integration.py runs the same graph through the launch runner)',
    'test_object_identification.py::test_probe_bags_round_trip_and_refit[[]303]':
        'the strike bag format holds one cell: the round trip runs for the default cell only',
}

_skipped: list[tuple[str, str]] = []


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _record_skip(report):
    if report.skipped and not hasattr(report, 'wasxfail'):
        _skipped.append((report.nodeid, _skip_reason(report)))


# A deadlock that holds the GIL (seen: Fast DDS's unregister_timer under the garbage
# collector) stops pytest-timeout too, whose handler is Python; faulthandler's watchdog is a C
# thread: it prints every thread's stack and ends the run, instead of a silent hang.
# Its limit is the test's own pytest-timeout plus a margin: a ``@pytest.mark.timeout(900)``
# test gets 900 s + margin, never the ini's 300 s + margin (which ended such tests' xdist
# workers as "node down: Not properly terminated" on a loaded machine, stop 44).
WATCHDOG_MARGIN_S = 120


def timeout_of(item) -> float:
    """The pytest-timeout limit of ``item``: its ``timeout`` mark's if it has one, else the
    ini's (300 s when unset)."""
    mark = item.get_closest_marker('timeout')
    if mark is not None:
        value = mark.args[0] if mark.args else mark.kwargs.get('timeout')
        if value is not None:
            return float(value)
    return float(item.config.getini('timeout') or 300)


# Where it writes: pytest's capture holds a test's stderr, and an xdist worker's never reaches
# the terminal, so each test process writes to a file of its own in a folder of the run (made
# by the controller, inherited by its workers); the controller's summary prints every file
# the watchdog wrote (`watchdog_reports`), naming the test it ended.
WATCHDOG_DIR_ENV = 'R2S2R_WATCHDOG_DIR'
_watchdog_out = None


def _watchdog_file():
    global _watchdog_out
    if _watchdog_out is None:
        worker = os.environ.get('PYTEST_XDIST_WORKER', 'main')
        path = Path(os.environ[WATCHDOG_DIR_ENV]) / f'{worker}-{os.getpid()}.txt'
        _watchdog_out = open(path, 'w')        # kept open for the process's life
    return _watchdog_out


def watchdog_reports(folder: Path) -> list[str]:
    """The texts the watchdog wrote in ``folder`` (one per test process it ended)."""
    return [p.read_text() for p in sorted(folder.glob('*.txt')) if p.stat().st_size]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    import faulthandler
    timeout = timeout_of(item)
    limit = timeout + WATCHDOG_MARGIN_S
    out = _watchdog_file()
    out.write(f'watchdog: {item.nodeid} ran past {limit:.0f} s (its timeout '
              f'{timeout:.0f} s + {WATCHDOG_MARGIN_S} s); every thread:\n')
    out.flush()
    faulthandler.dump_traceback_later(limit, exit=True, file=out)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        out.seek(0)
        out.truncate()


def pytest_runtest_logreport(report):
    _record_skip(report)


def pytest_collectreport(report):
    _record_skip(report)


def unexpected_skips(skipped, allowed=ALLOWED_SKIPS) -> list[tuple[str, str]]:
    """The (node id, reason) pairs of ``skipped`` that no pattern of ``allowed`` matches."""
    out = []
    for nodeid, reason in skipped:
        name = nodeid.split('/')[-1]
        if not any(fnmatch.fnmatchcase(name, pattern) for pattern in allowed):
            out.append((nodeid, reason))
    return out


def pytest_sessionfinish(session, exitstatus):
    if unexpected_skips(_skipped) and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    ended = watchdog_reports(Path(os.environ[WATCHDOG_DIR_ENV]))
    if ended:
        terminalreporter.section('tests the watchdog ended (their process exited)', red=True)
        for text in ended:
            terminalreporter.write(text)
    bad = unexpected_skips(_skipped)
    if bad:
        terminalreporter.section('unexpected skips (not on conftest.ALLOWED_SKIPS)', red=True)
        for nodeid, reason in bad:
            terminalreporter.line(f'{nodeid}: {reason}', red=True)
        terminalreporter.line(f'{len(bad)} unexpected skip(s): the run fails', red=True)


# The tier whose modules launch several node processes: one graph at a time. test/node modules
# (one node process, or in-process rclpy nodes) run beside it on the other worker, as a
# lab's RViz or driver runs beside the graph (each worker has its own ROS domain).
GRAPH_TIERS = ('integration',)
# Modules of that tier that start no node process: whole-loop runs in the test process
# (CPU-bound, no real-time cell), scheduled like unit modules.
IN_PROCESS = ('integration/test_evaluation_harness.py',
              'integration/test_far_cells_harness.py',
              'integration/test_object_identification.py')


def xdist_group(path: Path) -> str:
    """The xdist group of a test module: 'graph' for every module that launches a graph of
    node processes (test/integration but IN_PROCESS), else the module's own."""
    module = f'{path.parent.name}/{path.name}'
    return ('graph' if path.parent.name in GRAPH_TIERS and module not in IN_PROCESS
            else module)


def pytest_xdist_make_scheduler(config, log):
    """``make test`` runs two xdist workers (``--dist loadgroup``): the tests that launch
    graphs of node processes are one group, so one worker runs them in order, one graph at
    a time on its own domain, as a serial run does; every other module (single-node tests
    included) is a group of its own (its module fixtures built once), run by whichever worker
    is free. The graph tests then share the 2 cores with CPU-bound tests on the other worker:
    the busy machine they must pass on.

    The groups are this scheduler's, not ``xdist_group`` marks: pytest-xdist 3.8 writes a
    mark's group into ``item._nodeid``, which pytest 9 no longer reads, so marks group
    nothing (measured: a marked module's tests ran on both workers).

    Groups go out in collection order (integration, node, unit), not xdist's default of most
    tests first: that put the one-test in-process module `test_far_cells_harness.py` last,
    alone at the end of a busy fresh-clone run for 259 s (stop 45); in collection order the
    in-process integration modules start at once beside the graph worker."""
    if config.getoption('dist') != 'loadgroup':
        return None
    config.option.loadscopereorder = False
    from xdist.scheduler import LoadScopeScheduling

    class GraphGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(Path(nodeid.split('::', 1)[0]))

    return GraphGroupScheduling(config, log)


def pytest_configure(config):
    # Set before any test imports rclpy, so in-process clients join the same private domain.
    # An xdist worker inherits the controller's domain: each worker takes its own, so the
    # graph worker's graph never sees what the other worker creates.
    from real2sim2real_ros.ros.dds_isolation import isolate
    if os.environ.get('PYTEST_XDIST_WORKER'):
        os.environ.pop('R2S2R_DOMAIN_ID', None)
    isolate()
    os.environ.setdefault('MUJOCO_GL', 'egl')
    if not hasattr(config, 'workerinput'):      # the controller (or a run without xdist)
        import tempfile
        os.environ[WATCHDOG_DIR_ENV] = tempfile.mkdtemp(prefix='r2s2r_watchdog_')


def pytest_unconfigure(config):
    folder = os.environ.get(WATCHDOG_DIR_ENV)
    if folder and not hasattr(config, 'workerinput') and not watchdog_reports(Path(folder)):
        import shutil
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope='session')
def ros_domain_id() -> int:
    return int(os.environ['ROS_DOMAIN_ID'])


@pytest.fixture(scope='session')
def robot():
    """The default cell arm (urdf/cell_arm.urdf), loaded once per session. Consumers attach
    copies of its spec (Twin, EmulatedWorld), never modify it."""
    from real2sim2real_ros.core.robot_description import default_cell_urdf, load_robot
    return load_robot(default_cell_urdf())


@pytest.fixture(scope='module')
def slide(robot):
    """The slide_to_target task on the default arm, default config."""
    from real2sim2real_ros.core.tasks import get_task
    return get_task('slide_to_target', robot)




@pytest.fixture(scope='session')
def share_dir() -> Path:
    """The installed package share (a missing build fails: run via `make test`)."""
    return package_share()



@pytest.fixture(scope='module')
def emulated_bringup(share_dir, tmp_path_factory):
    """bringup.launch.xml with the emulated cell, up until the module's tests finish."""
    from real2sim2real_ros.ros.commander import Commander
    tmp = tmp_path_factory.mktemp('bringup')
    graph = start_graph('bringup.launch.xml', {
        'cell': 'emulated', 'cell_real_time': 'true',
        'run_dir': str(tmp / 'runs')}, tmp)
    cmd = Commander(node_name='test_commander')
    try:
        cmd.wait_until_up(timeout=60)
        yield graph, cmd, tmp
    finally:
        cmd.close()
        code = graph.stop(timeout=30)
        assert code is not None, 'launch did not stop within 30 s'






@pytest.fixture
def capture_server():
    """An in-process action server of the Capture type on ``/capture`` (feedback per view, then
    success; rejects num_views 0) and a client node, in one private context. Yields
    (client_node, Capture)."""
    import threading
    import time

    import rclpy
    from rclpy.action import ActionClient, ActionServer, GoalResponse
    from rclpy.callback_groups import ReentrantCallbackGroup
    from rclpy.executors import MultiThreadedExecutor

    from real2sim2real_msgs.action import Capture
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    server_node = rclpy.create_node('goal_client_server', context=ctx)
    client_node = rclpy.create_node('goal_client_client', context=ctx)

    def execute(handle):
        for i in range(handle.request.num_views):
            handle.publish_feedback(Capture.Feedback(views_done=i + 1,
                                                     views_total=handle.request.num_views))
            time.sleep(0.05)
        handle.succeed()
        return Capture.Result(error_msg=f'captured {handle.request.num_views}')

    server = ActionServer(
        server_node, Capture, 'capture', execute_callback=execute,
        goal_callback=lambda req: (GoalResponse.ACCEPT if req.num_views else
                                   GoalResponse.REJECT),
        callback_group=ReentrantCallbackGroup())
    executor = MultiThreadedExecutor(num_threads=4, context=ctx)
    executor.add_node(server_node)
    executor.add_node(client_node)
    spin = threading.Thread(target=executor.spin, daemon=True)
    spin.start()
    try:
        yield client_node, Capture
    finally:
        server.destroy()
        executor.shutdown(timeout_sec=2.0)
        # The tests' action clients: destroyed here, not by the garbage collector at some
        # later moment (a Fast DDS deadlock there hung a CI run; ros/commander.py).
        for waitable in list(client_node.waitables):
            if isinstance(waitable, ActionClient):
                waitable.destroy()
        for node in (client_node, server_node):
            node.destroy_node()
        rclpy.try_shutdown(context=ctx)
        spin.join(timeout=2.0)


@pytest.fixture
def lost_goal_responses(monkeypatch):
    """The goal request reaches the server, but the future the caller gets never finishes:
    what the pinned rclpy's send_goal_async does when the response wins its race."""
    from rclpy.action import ActionClient
    from rclpy.task import Future
    original = ActionClient.send_goal_async

    def send_and_lose(self, *args, **kwargs):
        original(self, *args, **kwargs)
        return Future()
    monkeypatch.setattr(ActionClient, 'send_goal_async', send_and_lose)
    # GoalClient sends through its own registration (goal_client.py); lose its response too.
    from real2sim2real_ros.ros.goal_client import GoalClient
    registered = GoalClient._send_goal_registered

    def register_and_lose(self, *args, **kwargs):
        registered(self, *args, **kwargs)
        return Future()
    monkeypatch.setattr(GoalClient, '_send_goal_registered', register_and_lose)
