"""Tests of the XML launch runner (real2sim2real_ros.launch_runner).

Everything runs against a fake ament prefix under tmp_path holding one package, ``fake_pkg``,
whose only executable is test/helpers/launch_fixtures/fake_node.py (stdlib only): no ROS graph, no
built workspace needed. Processes are checked through /proc and marker files each fake node
writes on start.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from real2sim2real_ros.launch_runner import (
    LaunchedGraph,
    LaunchError,
    ParamFile,
    ParamValue,
    launch_plan_commands,
    parse_launch_file,
    prefix_namespace,
)
from real2sim2real_ros.launch_runner import cli as launch_cli
from real2sim2real_ros.launch_runner.substitutions import (
    LaunchContext,
    evaluate_cmdline,
    parse_template,
)

PKG_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / 'helpers' / 'launch_fixtures'
FAKE_NODE = FIXTURES / 'fake_node.py'
ROS_ECHO_NODE = FIXTURES / 'ros_echo_node.py'


class FakeWorkspace:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.prefix = root / 'prefix'
        self.share = self.prefix / 'share' / 'fake_pkg'
        self.exe = self.prefix / 'lib' / 'fake_pkg' / 'fake_node'
        self.markers = root / 'markers'
        self.params = self.share / 'config' / 'params.yaml'

    def write(self, name: str, body: str) -> Path:
        """A launch file ``name`` in tmp_path whose <launch> element holds ``body``."""
        path = self.root / name
        path.write_text('<launch>\n' + textwrap.dedent(body) + '\n</launch>\n')
        return path

    def started(self) -> list[dict]:
        return [json.loads(p.read_text()) for p in sorted(self.markers.glob('*.json'))]

    def wait_started(self, count: int, timeout: float = 10.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            records = self.started()
            if len(records) >= count:
                return records
            time.sleep(0.02)
        raise AssertionError(f'{count} fake nodes did not start within {timeout} s '
                             f'(started: {len(self.started())})')


@pytest.fixture
def ws(tmp_path, monkeypatch) -> FakeWorkspace:
    w = FakeWorkspace(tmp_path)
    index = w.prefix / 'share' / 'ament_index' / 'resource_index' / 'packages'
    index.mkdir(parents=True)
    (index / 'fake_pkg').write_text('')
    (w.share / 'launch').mkdir(parents=True)
    (w.share / 'config').mkdir()
    w.params.write_text('/**:\n  ros__parameters:\n    rate_hz: 5.0\n')
    w.exe.parent.mkdir(parents=True)
    # -S: skip site (the venv's .pth re-exec) - the fake node needs only the stdlib.
    w.exe.write_text(f'#!{sys.executable} -S\n' + FAKE_NODE.read_text())
    w.exe.chmod(0o755)
    w.markers.mkdir()
    monkeypatch.setenv('AMENT_PREFIX_PATH', str(w.prefix))
    monkeypatch.setenv('FAKE_NODE_MARKERS', str(w.markers))
    monkeypatch.setenv('ROS_LOG_DIR', str(tmp_path / 'ros_log'))
    monkeypatch.setenv('R2S2R_LAUNCH_RUNNER', '1')
    monkeypatch.setenv('PYTHONPATH', os.pathsep.join(
        [str(PKG_ROOT)] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]))
    yield w
    for pid in _live_pids_mentioning(str(tmp_path)):  # never leak into other tests
        os.kill(pid, signal.SIGKILL)


def _live_pids_mentioning(token: str) -> list[int]:
    """Pids of live (non-zombie) processes whose command line contains ``token``."""
    found = []
    for entry in os.listdir('/proc'):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f'/proc/{entry}/cmdline').read_bytes().replace(b'\0', b' ')
            state = Path(f'/proc/{entry}/stat').read_text().rsplit(')', 1)[1].split()[0]
        except OSError:
            continue
        if token.encode() in cmdline and state != 'Z':
            found.append(int(entry))
    return found


def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0]
    except OSError:
        return False
    return state != 'Z'


def _wait_dead(pids, timeout: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if _pid_alive(p)]
        if not alive:
            return []
        time.sleep(0.02)
    return alive


def _runner(*args: str) -> list[str]:
    return [sys.executable, '-m', 'real2sim2real_ros.launch_runner', '--runner', *args]


def _run(*args: str, timeout: float = 20.0) -> subprocess.CompletedProcess:
    return subprocess.run(_runner(*args), capture_output=True, text=True, timeout=timeout)


FAKE = 'pkg="fake_pkg" exec="fake_node"'


# --- substitutions and command-line splitting -----------------------------------------

def test_substitutions_resolve_var_env_default_and_pkg_share(ws, monkeypatch):
    monkeypatch.setenv('R2S2R_TEST_CELL', 'cell_a')
    monkeypatch.delenv('R2S2R_UNSET', raising=False)
    path = ws.write('subs.launch.xml', f'''
        <arg name="robot" default="ur5"/>
        <let name="combo" value="$(var robot)_$(env R2S2R_TEST_CELL)"/>
        <node {FAKE} name="n" args="$(var combo) $(env R2S2R_UNSET 'fallback x') \
$(find-pkg-share fake_pkg)/config"/>''')
    (node,) = parse_launch_file(path, {'robot': 'so100'}).nodes
    assert node.args == ['so100_cell_a', 'fallback x', f'{ws.share}/config']


@pytest.mark.parametrize('text, message', [
    ('$(eval 1+1)', 'unknown substitution $(eval'),
    ('$(var)', '$(var) takes 1..1 argument(s), got 0'),
    ('$(env A B C)', '$(env) takes 1..2 argument(s), got 3'),
    ('$(var x', 'unterminated substitution'),
])
def test_bad_substitution_syntax_is_refused(text, message):
    with pytest.raises(LaunchError) as err:
        parse_template(text, 'f.xml:3')
    assert message in str(err.value) and 'f.xml:3' in str(err.value)


def test_unset_var_and_env_name_the_missing_value(ws, monkeypatch):
    monkeypatch.delenv('R2S2R_UNSET', raising=False)
    for body, message in ((f'<node {FAKE} name="$(var nope)"/>', "'nope' is not set"),
                          (f'<node {FAKE} name="$(env R2S2R_UNSET)"/>', "'R2S2R_UNSET' is not")):
        with pytest.raises(LaunchError, match=message):
            parse_launch_file(ws.write('unset.launch.xml', body))


def test_cmdline_split_keeps_substitution_values_whole():
    ctx = LaunchContext(configs={'cell': 'a b', 'n': '3'})
    template = parse_template('--cell $(var cell) --n=$(var n) "two words" x$(var n)y', 'f')
    assert evaluate_cmdline(template, ctx, 'f') == [
        '--cell', 'a b', '--n=3', 'two words', 'x3y']


# --- tags -----------------------------------------------------------------------------

def test_node_command_matches_launch_ros_layout(ws):
    path = ws.write('cmd.launch.xml', f'''
        <node {FAKE} name="sim" namespace="twin" output="screen" args="--exit-after 9"
              ros_args="--enclave /e">
          <param from="{ws.params}"/>
          <param name="rate_hz" value="30"/>
          <param name="frame" value="base_link"/>
          <param name="gains"><param name="kp" value="1.5"/><param name="on" value="true"/>
          </param>
          <param name="joints" value="[a, b]"/>
          <param name="quoted" value="'0.5'"/>
          <remap from="joint_states" to="/cell/joint_states"/>
        </node>''')
    plan = parse_launch_file(path, {})
    (node,) = plan.nodes
    assert node.parameters[0] == ParamFile(ws.params)
    assert node.inline_parameters == {'rate_hz': 30, 'frame': 'base_link', 'gains.kp': 1.5,
                                      'gains.on': True, 'joints': ['a', 'b'], 'quoted': '0.5'}
    assert ParamValue('rate_hz', 30) in node.parameters
    assert launch_plan_commands(plan, log_level='debug') == [[
        str(ws.exe), '--exit-after', '9', '--ros-args', '--enclave', '/e',
        '--ros-args', '-r', '__node:=sim', '-r', '__ns:=/twin',
        '--params-file', str(ws.params), '-p', 'rate_hz:=30', '-p', 'frame:=base_link',
        '-p', 'gains.kp:=1.5', '-p', 'gains.on:=true', '-p', 'joints:=[a, b]',
        '-p', "quoted:='0.5'", '-r', 'joint_states:=/cell/joint_states',
        '--log-level', 'debug']]


def test_node_without_name_or_namespace_gets_no_remaps_and_log_output(ws):
    plan = parse_launch_file(ws.write('bare.launch.xml', f'<node {FAKE}/>'))
    (node,) = plan.nodes
    assert (node.name, node.namespace, node.output, node.label) == (None, None, 'log',
                                                                    'fake_node')
    assert launch_plan_commands(plan) == [[str(ws.exe), '--ros-args']]


def test_args_defaults_let_conditions_and_choices(ws):
    path = ws.write('args.launch.xml', f'''
        <arg name="mode" default="sim" description="sim or real">
          <choice value="sim"/><choice value="real"/>
        </arg>
        <arg name="use_cam" default="true"/>
        <let name="tag" value="$(var mode)_node"/>
        <node {FAKE} name="$(var tag)"/>
        <node {FAKE} name="camera" if="$(var use_cam)"/>
        <node {FAKE} name="no_camera" unless="$(var use_cam)"/>''')
    plan = parse_launch_file(path, {'mode': 'real'})
    assert [n.name for n in plan.nodes] == ['real_node', 'camera']
    assert plan.launch_arguments == {'mode': 'real', 'use_cam': 'true'}
    assert [n.name for n in parse_launch_file(path, {'use_cam': '0'}).nodes] == [
        'sim_node', 'no_camera']
    with pytest.raises(LaunchError, match="'mode' is 'fake', not one of: sim, real"):
        parse_launch_file(path, {'mode': 'fake'})
    with pytest.raises(LaunchError, match="condition 'if' must be true/false/1/0, got 'yes'"):
        parse_launch_file(path, {'use_cam': 'yes'})


def test_include_passes_args_and_groups_scope_namespaces(ws):
    ws.write('sub.launch.xml', f'''
        <arg name="namespace"/>
        <arg name="rate" default="10"/>
        <arg name="params_file" default="{ws.params}"/>
        <push-ros-namespace namespace="$(var namespace)"/>
        <node {FAKE} name="worker"><param name="rate" value="$(var rate)"/>
          <param from="$(var params_file)"/></node>''')
    path = ws.write('top.launch.xml', f'''
        <arg name="cell" default="cell1"/>
        <group>
          <push-ros-namespace namespace="$(var cell)"/>
          <group>
            <include file="{ws.root}/sub.launch.xml">
              <arg name="namespace" value="arm"/>
              <arg name="rate" value="50"/>
            </include>
          </group>
          <node {FAKE} name="relative" namespace="tools"/>
          <node {FAKE} name="absolute" namespace="/abs"/>
        </group>
        <node {FAKE} name="outside"/>
        <group scoped="false"><push_ros_namespace namespace="leaky"/></group>
        <node {FAKE} name="after_unscoped"/>
        <include file="{ws.root}/sub.launch.xml"><arg name="namespace" value="bare"/></include>
        <node {FAKE} name="after_include"/>''')
    nodes = parse_launch_file(path, {'cell': 'c7'}).nodes
    # As in launch, <include> is not scoped: its arguments and pushed namespace stay set
    # after it unless it sits in a <group>.
    assert [(n.name, n.namespace) for n in nodes] == [
        ('worker', '/c7/arm'), ('relative', '/c7/tools'), ('absolute', '/abs'),
        ('outside', None), ('after_unscoped', '/leaky'), ('worker', '/leaky/bare'),
        ('after_include', '/leaky/bare')]
    assert nodes[0].inline_parameters == {'rate': 50} and nodes[5].inline_parameters == {
        'rate': 10}
    assert nodes[0].parameter_files == [ws.params]
    assert [n.label for n in nodes if n.name == 'worker'] == ['c7/arm/worker',
                                                              'leaky/bare/worker']


def test_include_missing_required_argument_is_named(ws):
    ws.write('needs.launch.xml', '<arg name="params_file" description="node params"/>')
    path = ws.write('top.launch.xml', f'<include file="{ws.root}/needs.launch.xml"/>')
    with pytest.raises(LaunchError) as err:
        parse_launch_file(path)
    assert "required launch argument 'params_file' was not provided" in str(err.value)
    assert 'needs.launch.xml:2' in str(err.value)


def test_prefix_namespace_follows_launch_ros():
    assert prefix_namespace(None, None) is None
    assert prefix_namespace(None, '') == '/'
    assert prefix_namespace('/a', '') == '/a'
    assert prefix_namespace('/a', 'b/') == '/a/b'
    assert prefix_namespace('/', 'b') == '/b'
    assert prefix_namespace('/a', '/b') == '/b'


@pytest.mark.parametrize('body, message', [
    ('<node pkg="fake_pkg" exec="fake_node" name="1bad"/>', "invalid node name '1bad'"),
    ('<node pkg="fake_pkg" exec="fake_node" namespace="a//b"/>', "invalid namespace '/a//b'"),
    ('<node pkg="fake_pkg" exec="fake_node" output="tty"/>', "output must be one of"),
    ('<node pkg="fake_pkg" exec="fake_node" on_exit="restart"/>', "only 'shutdown'"),
    ('<node pkg="fake_pkg" exec="fake_node" respawn_delay="-1"/>', 'respawn_delay must be'),
    ('<node pkg="fake_pkg" exec="fake_node" launch-prefix="gdb"/>',
     "unsupported attribute 'launch-prefix' on <node>"),
    ('<node pkg="fake_pkg" exec="fake_node"><env name="A" value="1"/></node>',
     'unsupported tag <env> inside <node>'),
    ('<node pkg="fake_pkg" exec="fake_node"><param name="a"/></node>', "exactly one of"),
    ('<arg name="a" default="1" if="1" unless="1"/>', "both 'if' and 'unless'"),
    ('<group if="false"><timer period="1"/></group>', 'unsupported tag <timer>'),
])
def test_invalid_content_is_refused_with_file_and_line(ws, body, message):
    path = ws.write('bad.launch.xml', body)
    with pytest.raises(LaunchError) as err:
        parse_launch_file(path)
    assert message in str(err.value) and f'{path}:2' in str(err.value)


def test_params_file_must_be_a_yaml_mapping(ws):
    bad = ws.root / 'bad.yaml'
    bad.write_text('- just\n- a list\n')
    with pytest.raises(LaunchError, match='must map node names'):
        parse_launch_file(ws.write('p.launch.xml', f'<node {FAKE}><param from="{bad}"/></node>'))


# --- main(): bad input -> exit 2, one stderr line, nothing started ---------------------

@pytest.mark.parametrize('case', ['unknown_tag', 'missing_params', 'unknown_arg',
                                  'missing_exec', 'missing_required_arg'])
def test_bad_input_exits_2_with_one_line_and_starts_nothing(ws, case):
    ok_node = f'<node {FAKE} name="fine" output="screen"/>'  # would start if checks came late
    bodies = {
        'unknown_tag': (ok_node + '<rosparam file="x.yaml"/>', [], 'unsupported tag <rosparam>'),
        'missing_params': (ok_node + f'<node {FAKE}><param from="{ws.root}/none.yaml"/></node>',
                           [], f'parameters file {ws.root}/none.yaml does not exist'),
        'unknown_arg': ('<arg name="cell" default="a"/>' + ok_node, ['robot:=ur5'],
                        "unknown launch argument 'robot' (declared: cell)"),
        'missing_exec': (ok_node + '<node pkg="fake_pkg" exec="nonexistent_node"/>', [],
                         "executable 'nonexistent_node' of package 'fake_pkg' not found"),
        'missing_required_arg': ('<arg name="cell"/>' + ok_node, [],
                                 "required launch argument 'cell' was not provided"),
    }
    body, extra, message = bodies[case]
    path = ws.write(f'{case}.launch.xml', body)
    result = _run(str(path), *extra)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert result.stdout == ''
    assert ws.started() == [] and _live_pids_mentioning(str(ws.root)) == []


def test_main_rejects_unknown_option_and_log_level(ws, capsys):
    path = ws.write('ok.launch.xml', f'<node {FAKE}/>')
    assert launch_cli.main([str(path), '--log-level', 'loud']) == 2
    assert launch_cli.main([str(path), '--frobnicate']) == 2
    assert launch_cli.main([]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and "unknown log level 'loud'" in err[0]
    assert "unknown option '--frobnicate'" in err[1] and 'expected a launch file' in err[2]


def test_print_resolves_package_file_and_starts_nothing(ws, capsys):
    (ws.share / 'launch' / 'demo.launch.xml').write_text(
        f'<launch><arg name="ns" default="x"/><node {FAKE} name="a" namespace="$(var ns)"/>'
        '</launch>')
    assert launch_cli.main(['fake_pkg', 'demo.launch.xml', 'ns:=cell', '--print',
                            '--log-level', 'WARN']) == 0
    out = capsys.readouterr().out
    assert f'{ws.exe} --ros-args -r __node:=a -r __ns:=/cell --log-level warn' in out
    assert '#   ns:=cell' in out and ws.started() == []
    assert launch_cli.main(['fake_pkg', 'nope.launch.xml', '--print']) == 2
    assert "launch file 'nope.launch.xml' not found in package 'fake_pkg'" in \
        capsys.readouterr().err


def test_main_delegates_to_ros2_launch_where_available(ws, monkeypatch):
    monkeypatch.delenv('R2S2R_LAUNCH_RUNNER')
    calls = []
    monkeypatch.setattr(launch_cli, 'ros2_launch_available', lambda: True)
    monkeypatch.setattr(launch_cli.os, 'execvp', lambda *a: calls.append(a) or sys.exit(0))
    with pytest.raises(SystemExit):
        launch_cli.main(['fake_pkg', 'x.launch.xml', 'cell:=a', '--log-level', 'debug'])
    assert calls == [('ros2', ['ros2', 'launch', 'fake_pkg', 'x.launch.xml', 'cell:=a',
                               'log_level:=debug'])]


# --- supervision ----------------------------------------------------------------------

def test_sigterm_to_runner_stops_every_node_and_grandchild(ws):
    path = ws.write('two.launch.xml', f'''
        <node {FAKE} name="alpha" output="screen" args="--spawn-child"/>
        <node {FAKE} name="beta" output="log"/>''')
    runner = subprocess.Popen(_runner(str(path)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        records = ws.wait_started(2)
        time.sleep(0.2)  # let the output reach the runner
        runner.send_signal(signal.SIGTERM)
        out, err = runner.communicate(timeout=15)
    finally:
        runner.kill()
    assert runner.returncode == 0, err
    pids = [r['pid'] for r in records] + [r['child'] for r in records if r['child']]
    assert len(pids) == 3 and _wait_dead(pids, 1.0) == []
    assert _live_pids_mentioning(str(ws.root)) == []
    assert '[alpha] fake node up' in out and '[beta]' not in out  # beta: output=log
    assert '[beta] fake node stderr line' in err  # launch's log mode shows stderr
    (log_dir,) = (ws.root / 'ros_log').iterdir()
    assert 'fake node up' in (log_dir / 'beta.log').read_text()


def test_required_node_exit_stops_the_rest_and_returns_1(ws):
    path = ws.write('req.launch.xml', f'''
        <node {FAKE} name="long_lived"/>
        <node {FAKE} name="critical" on_exit="shutdown" args="--exit-after 0.5 --exit-code 3"/>
        ''')
    start = time.monotonic()
    result = _run(str(path))
    assert result.returncode == 1, result.stderr
    assert time.monotonic() - start < 10.0
    assert "required node 'critical' exited with code 3" in result.stderr
    records = ws.started()
    assert len(records) == 2 and _wait_dead([r['pid'] for r in records], 1.0) == []


def test_failing_node_returns_1_and_clean_exits_return_0(ws):
    failing = ws.write('fail.launch.xml', f'''
        <node {FAKE} name="ok_forever"/>
        <node {FAKE} name="crashes" args="--exit-after 0.3 --exit-code 7"/>''')
    result = _run(str(failing))
    assert result.returncode == 1 and "node 'crashes' exited with code 7" in result.stderr
    done = ws.write('done.launch.xml', f'<node {FAKE} name="oneshot" args="--exit-after 0.2"/>')
    assert _run(str(done)).returncode == 0
    assert _live_pids_mentioning(str(ws.root)) == []


def test_clean_exit_while_the_graph_runs_takes_it_down_with_the_reason(ws):
    """A node that exits 0 while the others still run (sim_server once did, silently) is not
    ignored: the launch ends with code 1 and logs which node left, with what code."""
    path = ws.write('quiet.launch.xml', f'''
        <node {FAKE} name="long_lived"/>
        <node {FAKE} name="quitter" args="--exit-after 0.5 --exit-code 0"/>''')
    start = time.monotonic()
    result = _run(str(path))
    assert result.returncode == 1, result.stderr
    assert time.monotonic() - start < 10.0
    assert ("node 'quitter' exited with code 0 while the rest of the graph was running "
            "(long_lived); shutting down") in result.stderr
    records = ws.started()
    assert len(records) == 2 and _wait_dead([r['pid'] for r in records], 1.0) == []


def test_required_node_clean_exit_also_stops_the_graph(ws):
    path = ws.write('req0.launch.xml', f'''
        <node {FAKE} name="long_lived"/>
        <node {FAKE} name="critical" on_exit="shutdown" args="--exit-after 0.5 --exit-code 0"/>
        ''')
    result = _run(str(path))
    assert "required node 'critical' exited with code 0; shutting down" in result.stderr
    records = ws.started()
    assert len(records) == 2 and _wait_dead([r['pid'] for r in records], 1.0) == []


def test_respawn_follows_a_clean_exit_too(ws):
    path = ws.write('respawn0.launch.xml', f'''
        <node {FAKE} name="flaky" respawn="true" respawn_delay="0.1"
              args="--exit-after 0.3 --exit-code 0"/>
        <node {FAKE} name="steady"/>''')
    errors = io.StringIO()
    with LaunchedGraph(path, stderr=errors, stdout=io.StringIO()) as graph:
        ws.wait_started(3)
        assert graph.alive('steady')
    assert graph.exit_code == 0
    assert errors.getvalue().count('[flaky] exited with code 0') >= 1
    assert errors.getvalue().count('[flaky] respawning in 0.1 s') >= 1


def test_respawn_restarts_node_after_delay(ws):
    path = ws.write('respawn.launch.xml', f'''
        <node {FAKE} name="flaky" respawn="true" respawn_delay="0.2"
              args="--exit-after 0.3 --exit-code 1"/>
        <node {FAKE} name="steady"/>''')
    errors = io.StringIO()
    with LaunchedGraph(path, stderr=errors, stdout=io.StringIO()) as graph:
        records = ws.wait_started(4)  # steady + flaky started three times
        assert graph.alive('steady')
        steady_pid = graph.pids()['steady']
    assert graph.exit_code == 0
    flaky = [r['pid'] for r in records if '__node:=flaky' in r['argv']]
    assert len(set(flaky)) >= 3 and steady_pid not in flaky
    assert errors.getvalue().count('[flaky] respawning in 0.2 s') >= 2
    assert _wait_dead([r['pid'] for r in ws.started()], 1.0) == []


def test_stop_escalates_to_sigterm_when_sigint_is_ignored(ws):
    path = ws.write('stubborn.launch.xml', f'<node {FAKE} name="stubborn" args="--ignore-sigint"/>')
    graph = LaunchedGraph(path, sigint_timeout=0.3, stderr=io.StringIO()).start()
    (record,) = ws.wait_started(1)
    start = time.monotonic()
    assert graph.stop(timeout=10) == 0
    assert 0.3 <= time.monotonic() - start < 3.0
    assert not _pid_alive(record['pid'])


def test_runner_killed_hard_leaves_no_node(ws):
    path = ws.write('orphan.launch.xml', f'<node {FAKE} name="n"/>')
    runner = subprocess.Popen(_runner(str(path)), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    (record,) = ws.wait_started(1)
    runner.kill()  # SIGKILL: no cleanup in the runner; PR_SET_PDEATHSIG stops the node
    runner.wait()
    assert _wait_dead([record['pid']], 3.0) == []


def test_launched_graph_reports_pids_and_alive(ws):
    path = ws.write('graph.launch.xml', f'''
        <node {FAKE} name="a"/>
        <group><push-ros-namespace namespace="left"/><node {FAKE} name="cam"/></group>
        <group><push-ros-namespace namespace="right"/><node {FAKE} name="cam"/></group>''')
    with LaunchedGraph(path, stderr=io.StringIO()) as graph:
        ws.wait_started(3)
        pids = graph.pids()
        assert sorted(pids) == ['a', 'left/cam', 'right/cam'] and graph.alive()
        os.kill(pids['a'], signal.SIGKILL)  # a node killed from outside counts as a failure
        assert graph.wait(timeout=10) == 1
    assert not graph.alive() and "node 'a' exited with signal SIGKILL" in graph.reason
    assert _wait_dead(list(pids.values()), 1.0) == []


def test_missing_shutil_which_exec_without_package(ws):
    name = 'r2s2r-definitely-not-on-path'
    assert shutil.which(name) is None
    with pytest.raises(LaunchError, match=f"executable '{name}' not found on PATH"):
        parse_launch_file(ws.write('nopkg.launch.xml', f'<node exec="{name}"/>'))


def test_node_that_cannot_start_fails_the_launch_and_stops_the_others(ws):
    broken = ws.exe.parent / 'broken_node'
    broken.write_text('#!/nonexistent/interpreter\n')
    broken.chmod(0o755)
    path = ws.write('broken.launch.xml', f'''
        <node {FAKE} name="first"/>
        <node pkg="fake_pkg" exec="broken_node"/>''')
    graph = LaunchedGraph(path, stderr=io.StringIO())
    with pytest.raises(RuntimeError, match="cannot start node 'broken_node'"):
        graph.start()
    assert graph.exit_code == 1
    assert _wait_dead([r['pid'] for r in ws.started()], 1.0) == []


def test_rcl_reads_the_generated_command_line(ws, tmp_path):
    """End to end with a real rclpy node: names, namespace, params file + -p overrides."""
    import rclpy  # noqa: F401 - rcl parses the file below
    echo = ws.exe.parent / 'ros_echo'
    echo.write_text(f'#!{sys.executable}\n' + ROS_ECHO_NODE.read_text())
    echo.chmod(0o755)
    params = tmp_path / 'echo.yaml'
    params.write_text('/**:\n  ros__parameters:\n    rate_hz: 5.0\n    mode: file\n'
                      '/cell/probe:\n  ros__parameters:\n    only_mine: 7\n'
                      'other:\n  ros__parameters:\n    not_mine: 1\n')
    path = ws.write('echo.launch.xml', f'''
        <group><push-ros-namespace namespace="cell"/>
        <node pkg="fake_pkg" exec="ros_echo" name="probe" output="screen">
          <param from="{params}"/>
          <param name="rate_hz" value="30.0"/>
          <param name="label" value="'0.5'"/>
          <param name="flag" value="true"/>
          <param name="gains"><param name="kp" value="2"/></param>
          <param name="joints" value="[j1, j2]"/>
          <remap from="joint_states" to="/hw/joint_states"/>
        </node></group>''')
    out = io.StringIO()
    with LaunchedGraph(path, stdout=out, stderr=io.StringIO()) as graph:  # inherits the domain
        assert graph.wait(timeout=20) == 0
    line = next(x for x in out.getvalue().splitlines() if x.startswith('[probe] {'))
    report = json.loads(line[len('[probe] '):])
    assert (report['name'], report['namespace']) == ('probe', '/cell')
    assert report['remapped'] == '/hw/joint_states'
    assert report['params'] == {
        'rate_hz': [30.0, 'float'], 'mode': ['file', 'str'], 'only_mine': [7, 'int'],
        'label': ['0.5', 'str'], 'flag': [True, 'bool'], 'gains.kp': [2, 'int'],
        'joints': [['j1', 'j2'], 'list']}
