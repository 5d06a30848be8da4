"""An unexpected skip fails the run (conftest.ALLOWED_SKIPS): checked on a scratch test folder
that uses this folder's conftest."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import conftest

TEST_DIR = Path(__file__).resolve().parents[1]   # conftest.py and helpers/


def test_only_allowed_patterns_pass():
    skipped = [('real2sim2real_ros/test/integration/test_launch_pytest_lab.py', 'no launch_pytest'),
               ('real2sim2real_ros/test/integration/test_object_identification.py::'
                'test_probe_bags_round_trip_and_refit[303]', 'one cell'),
               ('real2sim2real_ros/test/integration/test_object_identification.py::'
                'test_probe_bags_round_trip_and_refit[default]', 'should run'),
               ('real2sim2real_ros/test/integration/test_cell_integration.py::test_x', 'not built')]
    bad = conftest.unexpected_skips(skipped)
    assert [n.split('::')[-1] for n, _ in bad] == [
        'test_probe_bags_round_trip_and_refit[default]', 'test_x']


def _run(tmp_path, files: dict, args=()) -> subprocess.CompletedProcess:
    shutil.copy(TEST_DIR / 'conftest.py', tmp_path / 'conftest.py')
    (tmp_path / 'pytest.ini').write_text('[pytest]\n')
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join([str(TEST_DIR.parent), str(TEST_DIR),
                                         env.get('PYTHONPATH', '')])
    env['TMPDIR'] = str(tmp_path)           # the scratch run's watchdog folder, among others
    return subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
                           *args, str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


def test_an_unexpected_skip_fails_the_run_and_is_named(tmp_path):
    out = _run(tmp_path, {
        'test_fine.py': 'def test_ok():\n    assert 1 + 1 == 2\n',
        'test_launch_pytest_lab.py': 'import pytest\npytest.importorskip("no_such_mod_x")\n',
        'test_hidden.py': 'import pytest\n\ndef test_h():\n    pytest.skip("broken build")\n',
    })
    assert out.returncode == 1, out.stdout + out.stderr
    assert 'unexpected skip' in out.stdout and 'test_hidden.py::test_h: ' in out.stdout
    assert 'broken build' in out.stdout and 'test_launch_pytest_lab' not in out.stdout.split(
        'unexpected skips')[-1]


def test_allowed_skips_alone_pass(tmp_path):
    out = _run(tmp_path, {
        'test_fine.py': 'def test_ok():\n    assert 1 + 1 == 2\n',
        'test_launch_pytest_lab.py': 'import pytest\npytest.importorskip("no_such_mod_x")\n',
    })
    assert out.returncode == 0, out.stdout + out.stderr
    assert '1 passed, 1 skipped' in out.stdout


def test_the_watchdog_waits_for_a_tests_own_timeout_mark(tmp_path):
    """The faulthandler watchdog ends the worker only after the test's own pytest-timeout
    (mark, else ini) plus its margin: a test marked longer than the ini's limit runs to its end
    (stop 44: a 900 s mark was ended at the ini's 300 + 120 s). Margin 0 here; ini 1 s, the
    marked test sleeps 2.5 s under a 10 s mark; unmarked, it is ended at the ini's 1 s."""
    body = ('import time\nimport conftest\nimport pytest\n\n'
            'conftest.WATCHDOG_MARGIN_S = 0\n\n'
            '@pytest.mark.timeout(10)\ndef test_long():\n    time.sleep(2.5)\n')
    out = _run(tmp_path, {'test_marked.py': body}, args=('-o', 'timeout=1'))
    assert out.returncode == 0, out.stdout + out.stderr
    assert '1 passed' in out.stdout
    unmarked = body.replace('@pytest.mark.timeout(10)\n', '')
    out = _run(tmp_path, {'test_marked.py': unmarked}, args=('-o', 'timeout=1'))
    assert out.returncode != 0 and 'passed' not in out.stdout, out.stdout


def test_a_worker_the_watchdog_ends_is_named_with_its_stacks(tmp_path):
    """Under xdist (as CI runs) the controller's summary prints what the watchdog wrote: the
    test it ended, its limit, and every thread's stack. The test holds the GIL in one C call
    (as the Fast DDS deadlock did), so pytest-timeout's signal handler never runs."""
    body = ('import conftest\n\nconftest.WATCHDOG_MARGIN_S = 0\n\n'
            'def test_stuck():\n    sum(range(10 ** 13))\n')
    out = _run(tmp_path, {'test_stuck.py': body}, args=('-n', '1', '-o', 'timeout=2'))
    text = out.stdout
    assert out.returncode != 0, text
    assert 'tests the watchdog ended' in text, text
    assert 'watchdog: test_stuck.py::test_stuck ran past 2 s' in text, text
    assert 'in test_stuck' in text.split('every thread:')[1], text


def test_graph_modules_share_one_xdist_group_and_in_process_ones_start_no_node():
    """make test never runs two graphs at once: every test/integration module is in the
    'graph' group but the IN_PROCESS ones; no module outside it launches a graph (no launch
    file, no bringup fixture), and only test/node modules (one node process, or in-process
    rclpy nodes beside the graph) make a Commander."""
    modules = sorted(TEST_DIR.glob('*/test_*.py'))
    groups = {f'{p.parent.name}/{p.name}': conftest.xdist_group(p) for p in modules}
    assert set(conftest.IN_PROCESS) <= set(groups)
    for name, group in groups.items():
        tier = name.split('/')[0]
        assert (group == 'graph') == (tier in conftest.GRAPH_TIERS
                                      and name not in conftest.IN_PROCESS), name
        if group != 'graph' and name != f'unit/{Path(__file__).name}':
            text = (TEST_DIR / name).read_text()
            starters = ('start_graph(', 'emulated_bringup', 'LaunchedGraph') + (
                () if tier == 'node' else ('Commander(',))
            assert not any(w in text for w in starters), name
    assert sum(g == 'graph' for g in groups.values()) >= 15   # 19 integration modules


def test_two_workers_run_the_graph_modules_on_one_worker_in_order(tmp_path, monkeypatch):
    """The scheduler, not just the rule: with `-n 2 --dist loadgroup` (make test), the
    tests of two graph-tier modules all run on one worker, in collection order, and unit and
    node modules' on the other worker meanwhile, an in-process integration module first
    though it has the fewest tests (xdist's default order, most tests first, put CI's
    one-test far-cells module last, alone for 259 s at the end of a busy run)."""
    test = ('import os, time\n\ndef test_{i}():\n    time.sleep(0.3)\n'
            '    with open(os.environ["LOG"], "a") as f:\n'
            '        f.write(f"{{os.environ[\'PYTEST_XDIST_WORKER\']}} {name} {i}\\n")\n')
    far = 'integration/test_far_cells_harness.py'
    files = {far: test.format(i=0, name=far)}
    for name in ('integration/test_a.py', 'integration/test_b.py', 'node/test_c.py',
                 'unit/test_d.py'):
        files[name] = ''.join(test.format(i=i, name=name) for i in range(3))
    monkeypatch.setenv('LOG', str(tmp_path / 'log.txt'))
    out = _run(tmp_path, files, ('-n', '2', '--dist', 'loadgroup'))
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [line.split() for line in (tmp_path / 'log.txt').read_text().splitlines()]
    graph = [(w, n, i) for w, n, i in rows if n.startswith('integration/') and n != far]
    assert len({w for w, _, _ in graph}) == 1, rows
    assert [(n, i) for _, n, i in graph] == [
        (n, str(i)) for n in ('integration/test_a.py', 'integration/test_b.py') for i in range(3)]
    others = [(w, n) for w, n, _ in rows if not n.startswith('integration/') or n == far]
    assert {w for w, _ in others} != {graph[0][0]}, rows
    assert [n for w, n in others if w != graph[0][0]][0] == far, rows
