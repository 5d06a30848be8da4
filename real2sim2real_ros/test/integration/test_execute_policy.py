"""robot_executor ~/execute_policy on the real emulated bringup (private DDS domain): a
slide_to_target policy (behaviour-cloned in the test on scripted demos, saved as a real
checkpoint) strikes the cell's box towards a goal, with the same safety rules as trajectories.

Object poses: the executor observes ``/tracked_objects`` (the object_tracker node's topic).
Until that node is part of the bringup, the ``object_tracker`` fixture stands in for it by
republishing the emulated cell's TRUE poses (``/emulated_cell/true_object_poses``, hidden
truth that only evaluators read). Replace that one fixture by the real tracker (started or
checked for) and every test here stays as it is; only the ``no tracker`` case needs a
tracker that can be absent (it then shows how the executor answers an object the tracker
does not report, which the second OBSERVATION_UNAVAILABLE test covers already).
"""
from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.integration

from helpers.truth_relay import BOX, TruthRelay  # noqa: E402

from real2sim2real_msgs.action import ExecutePolicy  # noqa: E402

PolicyResult = ExecutePolicy.Result
G = 9.81


@pytest.fixture(scope='module')
def graph(emulated_bringup):
    return emulated_bringup


@pytest.fixture(scope='module')
def truth(graph):
    """The evaluator's view of the cell (hidden truth), for the whole module."""
    relay = TruthRelay()
    try:
        relay.pose(timeout=20.0)
        yield relay
    finally:
        relay.close()


@pytest.fixture
def object_tracker(truth):
    """Stand-in for the object_tracker node: /tracked_objects carries the cell's object poses
    for the duration of one test. (With the real node: wait until it publishes instead.)"""
    truth.relaying = True
    try:
        yield truth
    finally:
        truth.relaying = False


@pytest.fixture(scope='module')
def checkpoint(graph, robot):
    """A slide_to_target policy, behaviour-cloned on scripted demonstrations (the task's
    demonstrator: v = sqrt(2 mu g d), here without spread) and saved as a checkpoint."""
    import torch

    from real2sim2real_ros.core.policies import MLPPolicy, save_checkpoint
    from real2sim2real_ros.core.policies.imitation import DemoSet, behaviour_cloning
    from real2sim2real_ros.core.tasks import get_task
    torch.set_num_threads(1)
    task = get_task('slide_to_target', robot, {'demo_friction': 0.55, 'demo_spread': 0.0})
    rng = np.random.default_rng(0)
    obs, act = [], []
    for _ in range(48):
        reset = task.sample_reset(rng)
        o = np.array([rng.uniform(0.07, 0.15), rng.uniform(-0.4, 0.4), rng.uniform(-0.6, 0.6)])
        obs.append(o)
        act.append(task.scripted_demo_policy(reset, rng)(o))
    demos = DemoSet(np.array(obs), np.array(act), len(obs), len(obs))
    t0 = time.monotonic()
    policy = MLPPolicy(task.observation_dim, task.action_low, task.action_high, (32, 32))
    fit = behaviour_cloning(policy, demos, epochs=300, lr=3e-3)
    path = save_checkpoint(policy, graph[2] / 'slide_checkpoint', task.config(),
                           {'trained_by': 'test_execute_policy', **fit})
    print(f'checkpoint: BC on {len(obs)} demos in {time.monotonic() - t0:.2f} s, '
          f'loss {fit["bc_loss"]:.2e}')
    return path


def _q(cmd):
    return np.array(cmd.joint_state().position)


def _armed(cmd):
    resp = cmd.arm(wait=15.0)
    assert resp.success, resp.message


def test_the_graph_offers_execute_policy(graph):
    _, cmd, _ = graph
    status = cmd.graph_status()
    assert status.actions['/robot_executor/execute_policy'], status


def test_disarmed_goal_is_refused_and_nothing_moves(graph, checkpoint, object_tracker):
    _, cmd, _ = graph
    cmd.disarm()
    q0 = _q(cmd)
    xy = object_tracker.pose()[0]
    result = cmd.execute_policy(checkpoint, list(xy + [0.10, 0.0]), timeout=30)
    assert result.error_code == PolicyResult.NOT_ARMED, result.error_msg
    assert 'arm' in result.error_msg.lower() and result.steps == 0
    time.sleep(1.0)
    assert np.max(np.abs(_q(cmd) - q0)) < 0.005


def test_policy_strikes_the_box_towards_the_goal_and_records_it(graph, checkpoint,
                                                                object_tracker):
    from real2sim2real_ros.core.bag_io import BagReader
    _, cmd, _ = graph
    resp = cmd.reset_objects([BOX])
    assert resp.success, resp.message
    time.sleep(0.3)
    _armed(cmd)
    xy0, _, yaw0, _, _ = object_tracker.pose()
    goal = xy0 + 0.10 * np.array([math.cos(0.1), math.sin(0.1)])
    feedback = []
    t_send = time.time()
    t0 = time.monotonic()
    result = cmd.execute_policy(checkpoint, list(goal), task='slide_to_target', max_duration=30,
                                feedback=feedback.append, timeout=90)
    wall = time.monotonic() - t0
    assert result.error_code == PolicyResult.NONE, result.error_msg
    xy1, z1, _, up1, _ = object_tracker.pose()
    moved = float(np.linalg.norm(xy1 - xy0))
    err0, err1 = float(np.linalg.norm(goal - xy0)), float(np.linalg.norm(goal - xy1))
    # The bag: joint states, every commanded trajectory, the tracked objects.
    reader = BagReader(result.bag_path)
    topics = reader.topics
    js = [t for t in topics if t.endswith('joint_states')][0]
    cmd_topic = [t for t in topics if t.endswith('joint_trajectory')][0]
    tracked = [t for t in topics if t.endswith('tracked_objects')][0]
    first = {}
    for topic, _, t_ns, _ in reader.messages([cmd_topic, tracked]):
        first.setdefault(topic, t_ns * 1e-9)
    manifest = json.loads((Path(result.bag_path).parent / 'manifest.json').read_text())
    res = manifest['results']
    print(f'execute_policy slide: box moved {moved * 1e3:.1f} mm, goal error '
          f'{err0 * 1e3:.1f} -> {err1 * 1e3:.1f} mm, task_success {result.task_success}; '
          f'action {res["episode"]["actions"][0]}; goal -> first command '
          f'{1e3 * (first[cmd_topic] - t_send):.0f} ms (first tracked pose in the bag -> '
          f'first command {1e3 * (first[cmd_topic] - first[tracked]):.0f} ms); episode '
          f'{result.duration:.2f} s, goal round trip {wall:.2f} s; tracking max '
          f'{res["max_tracking_error"] * 1e3:.1f} mrad, rms '
          f'{res["rms_tracking_error"] * 1e3:.1f} mrad; bag: {topics[js].count} joint states, '
          f'{topics[cmd_topic].count} commands, {topics[tracked].count} tracked poses')
    # The box went towards the goal: it moved along the goal line and ended closer to it.
    # The policy was cloned from a demonstrator that assumes the prior friction (0.55) and an
    # ideal release; on this cell the same action (~0.855) slides the box 136-154 mm for the
    # 100 mm goal, a goal error of 36.8-54.2 mm in 5 runs (idle, 2026-12-02: 37.0, 54.2,
    # 36.8, 44.5 and CI's 54.1), so 0.5 x err0 failed 2 in 5. 0.7 x err0 keeps 16 mm
    # above the worst; the line (lateral error) is what the policy's aim decides.
    line = (goal - xy0) / err0
    d = xy1 - xy0
    lateral = float(abs(line[0] * d[1] - line[1] * d[0]))
    print(f'lateral error {lateral * 1e3:.1f} mm')
    assert moved > 0.05
    assert err1 < 0.7 * err0
    assert lateral < 0.025, 'the box went along the goal line'
    assert abs(z1 - 0.025) < 0.01 and up1 > 0.95, 'the box slid, it did not tip'
    # task_success is the task's rule (within success_radius, upright) on the last tracked pose.
    from real2sim2real_ros.core.tasks.slide_to_target import SlideConfig
    radius = SlideConfig().success_radius
    if abs(err1 - radius) > 0.005:
        assert result.task_success == (err1 <= radius)
    # One observation, one action; approach (~1.6 s) + strike + settle (1.2 s) + retreat.
    assert result.steps == 1
    assert 2.5 < result.duration < 15.0
    assert feedback and feedback[-1].step == 1
    elapsed = [f.elapsed for f in feedback]
    assert elapsed == sorted(elapsed) and elapsed[-1] > 2.0
    assert topics[cmd_topic].count == 3, 'approach + strike + retreat'
    # Every joint state that reached the executor is in the bag; the manifest counts those
    # the stream lost on the way (measured at load 5: 46 of 453); >= 90% of the cell's 100 Hz
    # together (as test_cell_integration).
    assert res['joint_states_recorded'] == topics[js].count
    published = topics[js].count + res['joint_states_lost']
    assert published >= 0.9 * 100 * reader.duration_ns / 1e9, res['joint_states_lost']
    assert res['joint_states_lost'] <= 0.25 * published
    assert topics[tracked].count >= 10
    assert res['task_success'] == result.task_success and res['steps'] == 1
    assert [m['label'] for m in res['motions']] == ['approach', 'strike', 'retreat']
    assert Path(result.bag_path).parent.name.startswith('execute_policy_')
    assert res['max_tracking_error'] < 0.15


def _constant_push_checkpoint(robot, folder, velocity, max_steps):
    """A push_to_pose 'policy' that always commands the same tip velocity (an MLP whose last
    layer is a bias only), saved as a checkpoint with a shorter episode."""
    import torch

    from real2sim2real_ros.core.policies import MLPPolicy, save_checkpoint
    from real2sim2real_ros.core.tasks import get_task
    task = get_task('push_to_pose', robot, {'max_steps': max_steps})
    policy = MLPPolicy(task.observation_dim, task.action_low, task.action_high, (8,))
    lo, hi = task.action_low, task.action_high
    u = 2 * (np.asarray(velocity, float) - lo) / (hi - lo) - 1
    with torch.no_grad():
        policy.net[-1].weight.zero_()
        policy.net[-1].bias.copy_(torch.as_tensor(np.arctanh(u), dtype=torch.float32))
    return save_checkpoint(policy, folder, task.config(), {'trained_by': 'constant push'})


def test_closed_loop_push_steps_at_the_control_rate_and_busy_is_refused(
        graph, robot, checkpoint, object_tracker, tmp_path):
    """push_to_pose through the node: approach behind the box, then one validated segment
    per 0.1 s from the latest tracked pose until the task's success or max_steps. A second
    goal meanwhile gets BUSY."""
    from real2sim2real_ros.core.bag_io import BagReader
    _, cmd, _ = graph
    _armed(cmd)
    ckpt = _constant_push_checkpoint(robot, tmp_path / 'push', [0.08, 0.0], max_steps=30)
    xy0, _, yaw0, _, _ = object_tracker.pose()
    goal = xy0 + [0.08, 0.0]
    out, feedback = {}, []
    worker = threading.Thread(target=lambda: out.setdefault('result', cmd.execute_policy(
        ckpt, list(goal), max_duration=30, feedback=feedback.append, timeout=90)))
    worker.start()
    deadline = time.monotonic() + 20
    while not (feedback and feedback[-1].step >= 1) and time.monotonic() < deadline:
        time.sleep(0.05)
    busy = cmd.execute_policy(checkpoint, list(goal), timeout=30)
    worker.join(timeout=60)
    result = out['result']
    assert busy.error_code == PolicyResult.BUSY, busy.error_msg
    assert result.error_code == PolicyResult.NONE, result.error_msg
    xy1, _, yaw1, _, _ = object_tracker.pose()
    reader = BagReader(result.bag_path)
    cmd_topic = [t for t in reader.topics if t.endswith('joint_trajectory')][0]
    stamps = np.array([t_ns * 1e-9 for _, _, t_ns, _ in reader.messages([cmd_topic])])
    period = np.diff(stamps[1:])          # the segments, after the approach
    manifest = json.loads((Path(result.bag_path).parent / 'manifest.json').read_text())
    res = manifest['results']
    err1 = float(np.linalg.norm(xy1 - goal))
    print(f'execute_policy push: {result.steps} steps ({res["episode"]["done_reason"]}) in '
          f'{result.duration:.2f} s, box moved {(xy1 - xy0)[0] * 1e3:+.1f} mm along x, goal '
          f'error {float(np.linalg.norm(goal - xy0)) * 1e3:.1f} -> {err1 * 1e3:.1f} mm, yaw '
          f'{yaw1 - yaw0:+.3f} rad, task_success {result.task_success}; segment period '
          f'median {np.median(period) * 1e3:.0f} ms, max {period.max() * 1e3:.0f} ms; '
          f'tracking max {res["max_tracking_error"] * 1e3:.1f} mrad')
    assert 5 <= result.steps <= 30
    assert len(stamps) == result.steps + 1, 'approach + one segment per step'
    assert abs(np.median(period) - 0.1) < 0.02 and period.max() < 0.5
    assert (xy1 - xy0)[0] > 0.03, 'the tool pushed the box along +x'
    assert res['episode']['done_reason'] in ('success', 'max_steps (30) reached')
    assert result.task_success == (res['episode']['done_reason'] == 'success')
    assert feedback[-1].step == result.steps


def test_no_tracked_poses_is_observation_unavailable_and_nothing_moves(graph, checkpoint,
                                                                      truth):
    _, cmd, _ = graph
    _armed(cmd)
    assert not truth.relaying
    q0 = _q(cmd)
    xy = truth.pose()[0]
    t0 = time.monotonic()
    result = cmd.execute_policy(checkpoint, list(xy + [0.10, 0.0]), timeout=30)
    took = time.monotonic() - t0
    assert result.error_code == PolicyResult.OBSERVATION_UNAVAILABLE, result.error_msg
    assert 'tracked_objects' in result.error_msg and result.steps == 0
    print(f'no tracker: OBSERVATION_UNAVAILABLE after {took:.2f} s (observation_wait 5 s)')
    assert took >= 4.9, 'the executor waits observation_wait for the first pose'
    assert 'within 5.00 s' in result.error_msg, result.error_msg
    time.sleep(0.5)
    assert np.max(np.abs(_q(cmd) - q0)) < 0.005
    assert cmd.executor_status().armed


def test_an_object_the_tracker_does_not_report_is_observation_unavailable(
        graph, checkpoint, object_tracker, tmp_path):
    _, cmd, _ = graph
    _armed(cmd)
    ghost = tmp_path / 'ghost'
    ghost.mkdir()
    (ghost / 'policy.pt').write_bytes((Path(checkpoint) / 'policy.pt').read_bytes())
    cfg = json.loads((Path(checkpoint) / 'policy.json').read_text())
    cfg['task']['object_id'] = 'ghost_box'
    (ghost / 'policy.json').write_text(json.dumps(cfg))
    q0 = _q(cmd)
    result = cmd.execute_policy(ghost, [0.65, 0.1], timeout=30)
    assert result.error_code == PolicyResult.OBSERVATION_UNAVAILABLE, result.error_msg
    assert 'ghost_box' in result.error_msg and BOX in result.error_msg
    assert np.max(np.abs(_q(cmd) - q0)) < 0.005


def test_bad_checkpoints_are_refused_naming_the_file(graph, checkpoint, tmp_path):
    _, cmd, _ = graph
    _armed(cmd)
    missing = tmp_path / 'no_such_checkpoint'
    result = cmd.execute_policy(missing, [0.65, 0.1], timeout=30)
    assert result.error_code == PolicyResult.INVALID_CHECKPOINT and str(missing) in result.error_msg
    result = cmd.execute_policy(checkpoint, [0.65, 0.1], task='push_to_pose', timeout=30)
    assert result.error_code == PolicyResult.INVALID_CHECKPOINT, result.error_msg
    assert 'task mismatch' in result.error_msg and str(checkpoint) in result.error_msg


def _set_workspace_max(cmd, values):
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters
    req = SetParameters.Request(parameters=[Parameter(
        name='workspace_max', value=ParameterValue(
            type=ParameterType.PARAMETER_DOUBLE_ARRAY, double_array_value=list(values)))])
    resp = cmd.call(SetParameters, 'robot_executor/set_parameters', req)
    assert resp.results[0].successful, resp.results[0].reason


def test_a_goal_that_puts_the_tool_outside_the_workspace_is_refused(graph, checkpoint,
                                                                    object_tracker):
    _, cmd, _ = graph
    _armed(cmd)
    q0 = _q(cmd)
    xy = object_tracker.pose()[0]
    # A goal outside the workspace box (config/params.yaml: x <= 1.1 m).
    result = cmd.execute_policy(checkpoint, [1.5, float(xy[1])], timeout=30)
    assert result.error_code == PolicyResult.WORKSPACE_VIOLATION, result.error_msg
    assert 'outside the workspace' in result.error_msg
    # A goal behind the box puts the tool in front of it (x ~ box + 0.11 m): with the
    # workspace ending 5 cm past the box, the planned approach leaves it; nothing is sent.
    _set_workspace_max(cmd, [float(xy[0]) + 0.05, 0.9, 1.3])
    try:
        result = cmd.execute_policy(checkpoint, list(xy - [0.10, 0.0]), timeout=30)
    finally:
        _set_workspace_max(cmd, [1.1, 0.9, 1.3])
    assert result.error_code == PolicyResult.WORKSPACE_VIOLATION, result.error_msg
    # Refused either by the workspace check of the approach or because the tool cannot reach
    # the strike's start at all (the box may sit far out after the earlier tests' strikes).
    assert ('approach' in result.error_msg and 'out on x' in result.error_msg) or \
        'cannot get there' in result.error_msg, result.error_msg
    assert result.steps == 1, 'one observation, one action, refused plan'
    time.sleep(0.5)
    assert np.max(np.abs(_q(cmd) - q0)) < 0.005
    assert cmd.executor_status().armed, 'a refused goal leaves the executor armed'


def test_cli_execute_policy_reports_the_refusal(graph, checkpoint):
    """`r2s2r execute-policy` in a subprocess (same private domain): a goal outside the
    workspace is refused with the node's message and exit code 1; a malformed --goal is a
    usage error (2) before anything is contacted."""
    import os
    import subprocess
    import sys
    _, cmd, _ = graph
    _armed(cmd)
    base = [sys.executable, '-m', 'real2sim2real_ros.cli.main', 'execute-policy',
            str(checkpoint), '--max-duration', '10']
    proc = subprocess.run(base + ['--goal', '1'], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ))
    assert proc.returncode == 2 and 'X Y [YAW]' in proc.stderr
    proc = subprocess.run(base + ['--goal', '1.5', '0.1'], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert 'FAILED' in proc.stdout and 'outside the workspace' in proc.stdout, proc.stdout


def _still(cmd, window=0.5, tol=0.003, settle=0.5):
    """At rest: after ``settle`` s (the hold ramp, the servo and a box it may still be
    touching come to rest), joints move less than ``tol`` rad over ``window`` s."""
    time.sleep(settle)
    q_a = _q(cmd)
    time.sleep(window)
    return float(np.max(np.abs(_q(cmd) - q_a))) < tol


def test_max_duration_and_stop_end_an_episode_holding_the_arm(graph, robot, object_tracker,
                                                              tmp_path):
    """As for trajectories: the goal's max_duration -> TIMEOUT, ~/stop -> STOPPED (and
    disarmed), the arm held at rest both times."""
    _, cmd, _ = graph
    _armed(cmd)
    assert cmd.reset_objects([BOX]).success    # back where the cell spec puts it
    time.sleep(0.5)
    ckpt = _constant_push_checkpoint(robot, tmp_path / 'slow_push', [0.03, 0.0], max_steps=60)
    xy = object_tracker.pose()[0]
    t0 = time.monotonic()
    timed_out = cmd.execute_policy(ckpt, list(xy + [0.05, 0.0]), max_duration=2.5, timeout=60)
    took = time.monotonic() - t0
    assert timed_out.error_code == PolicyResult.TIMEOUT, timed_out.error_msg
    assert 'max_duration' in timed_out.error_msg and 2.4 < timed_out.duration < 4.0
    assert _still(cmd), 'held after TIMEOUT'
    xy = object_tracker.pose()[0]
    out, feedback = {}, []
    worker = threading.Thread(target=lambda: out.setdefault('result', cmd.execute_policy(
        ckpt, list(xy + [0.05, 0.0]), max_duration=30, feedback=feedback.append, timeout=60)))
    worker.start()
    deadline = time.monotonic() + 20
    while not (feedback and feedback[-1].step >= 3) and time.monotonic() < deadline:
        time.sleep(0.02)
    resp = cmd.stop()
    worker.join(timeout=30)
    assert resp.success, resp.message
    result = out['result']
    assert result.error_code == PolicyResult.STOPPED, result.error_msg
    assert result.steps >= 3
    assert not cmd.executor_status().armed, 'stop disarms'
    assert _still(cmd), 'held after STOPPED'
    print(f'max_duration 2.5 s -> TIMEOUT (episode {timed_out.duration:.2f} s, goal round trip '
          f'{took:.2f} s); stop at step {result.steps} -> STOPPED')


ESTOP_RUNS = 3
# Measured (2026-12-01, 15 runs on the shared 2-core machine at load 6-17): stop call -> stop
# ramp on the controller topic 2-136 ms (the long ones: the executor's service callback
# scheduled late under load; at load ~6 2-31 ms), -> joint speeds < 0.05 rad/s 31-218 ms
# (ramp -> at rest 16-123 ms: servo, the cell's 12 ms latency, 3-sample smoothing). Bounds:
# about twice the loaded maxima.
ESTOP_HOLD_BOUND = 0.3       # s, stop call -> stop ramp published
ESTOP_STILL_BOUND = 0.5      # s, stop call -> measured joint speeds < 0.05 rad/s


def _pushing(cmd, ckpt, object_tracker, states, run: int, attempts: int = 3):
    """Start the push policy (armed, the box reset) and return (worker, {'result'}) once it
    pushes (past the approach) with the arm measured moving (> 0.1 rad/s). An episode the
    executor ended before that for a step over a joint's speed limit (its path check,
    working: once in a loaded suite run, 3.23 rad/s asked of the elbow at step 14) is started
    again, at most ``attempts`` times in all; any other early end fails."""
    for attempt in range(attempts):
        _armed(cmd)
        assert cmd.reset_objects([BOX]).success
        time.sleep(0.5)
        xy = object_tracker.pose()[0]
        out, feedback = {}, []
        worker = threading.Thread(target=lambda out=out, feedback=feedback, xy=xy:
                                  out.setdefault('result', cmd.execute_policy(
                                      ckpt, list(xy + [0.1, 0.0]), max_duration=30,
                                      feedback=feedback.append, timeout=60)))
        worker.start()
        deadline = time.monotonic() + 30
        while not (feedback and feedback[-1].step >= 3 and max(_smoothed_speeds(
                states.snapshot()[-3:])) > 0.1):
            if not worker.is_alive():
                break
            assert time.monotonic() < deadline, \
                f'run {run}: the policy never moved the arm at > 0.1 rad/s: {out}'
            time.sleep(0.01)
        else:
            return worker, out
        worker.join(timeout=5)
        msg = out['result'].error_msg if 'result' in out else ''
        assert 'over the limit' in msg and attempt < attempts - 1, \
            f'run {run}: the policy ended before it moved the arm at > 0.1 rad/s: {out}'
        print(f'run {run}, attempt {attempt}: {msg}; started again')
    raise AssertionError('unreachable')


def test_estop_mid_policy_holds_within_the_measured_bound_and_disarms(
        graph, robot, object_tracker, tmp_path):
    """Issue 17 fault: ~/stop while execute_policy pushes the box (a constant 8 cm/s tip
    push, a new segment every 0.1 s). Over ESTOP_RUNS runs, each stopped while the
    arm moves at > 0.1 rad/s: stop call -> the executor's
    stop ramp on the controller topic, and -> measured joint speeds < 0.05 rad/s; the
    episode ends STOPPED, the executor is disarmed, and the next goal without ~/arm is
    NOT_ARMED and moves nothing."""
    from helpers.graph import TopicListener
    from sensor_msgs.msg import JointState
    from trajectory_msgs.msg import JointTrajectory

    from real2sim2real_ros.ros import qos
    _, cmd, _ = graph
    ckpt = _constant_push_checkpoint(robot, tmp_path / 'estop_push', [0.08, 0.0],
                                     max_steps=60)
    states = TopicListener(JointState, '/joint_states')
    commands = TopicListener(JointTrajectory, '/joint_trajectory_controller/joint_trajectory',
                             qos=qos.COMMAND)
    measured = []
    try:
        assert states.wait_for(20, timeout=10)
        assert commands.wait_for_publishers(1, timeout=10)
        for run in range(ESTOP_RUNS):
            worker, out = _pushing(cmd, ckpt, object_tracker, states, run)
            t_call = time.monotonic()
            resp = cmd.stop()
            worker.join(timeout=30)
            assert resp.success, resp.message
            result = out['result']
            assert result.error_code == PolicyResult.STOPPED, result.error_msg
            assert not cmd.executor_status().armed, 'stop disarms'
            # Until the speeds are measured at rest (or 3 s: then the assert below fails).
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                if _speed_at_rest_since(states.snapshot(), t_call) is not None:
                    break
                time.sleep(0.05)
            time.sleep(0.1)
            # The stop ramp is the last command after the call (the episode froze at it;
            # a policy segment may have gone out just after the call).
            after = [(t, m) for t, m in commands.snapshot() if t >= t_call]
            assert after, f'run {run}: no stop trajectory reached the controller topic'
            t_hold, ramp = after[-1]
            assert max(abs(v) for v in ramp.points[-1].velocities) == 0.0, 'not a ramp to rest'
            msgs = [(t, m) for t, m in states.snapshot() if t >= t_call - 1.0]
            moving = _smoothed_speeds(msgs)
            before = [s for (t, _), s in zip(msgs, moving) if t < t_call]
            still = _speed_at_rest_since(msgs, t_hold)
            assert still is not None, f'run {run}: joint speeds never below 0.05 rad/s'
            measured.append((t_hold - t_call, still - t_call, max(before[-10:])))
    finally:
        states.close()
        commands.close()
    hold_ms = [1e3 * h for h, _, _ in measured]
    still_ms = [1e3 * s for _, s, _ in measured]
    print(f'e-stop mid-policy ({ESTOP_RUNS} runs): stop call -> stop ramp on the controller '
          f'topic {", ".join(f"{v:.0f}" for v in hold_ms)} ms; -> joint speeds < 0.05 rad/s '
          f'{", ".join(f"{v:.0f}" for v in still_ms)} ms; speed before the call '
          f'{", ".join(f"{v:.2f}" for _, _, v in measured)} rad/s')
    for hold, still, speed in measured:
        assert speed > 0.1, 'the arm was not moving when stopped: nothing was measured'
        assert hold < ESTOP_HOLD_BOUND and still < ESTOP_STILL_BOUND, measured
    # Disarmed: the next goal without ~/arm is refused by name, and nothing moves.
    q0 = _q(cmd)
    refused = cmd.execute_policy(ckpt, list(object_tracker.pose()[0] + [0.1, 0.0]),
                                 max_duration=5, timeout=30)
    assert refused.error_code == PolicyResult.NOT_ARMED, refused.error_msg
    assert refused.steps == 0 and np.max(np.abs(_q(cmd) - q0)) < 0.01


def _smoothed_speeds(msgs):
    """Per sample: the largest joint speed of the mean of three consecutive /joint_states
    velocities (their sensor noise is ~0.02 rad/s), as test_cell_integration judges it."""
    vel = np.array([m.velocity for _, m in msgs])
    return [float(np.abs(vel[max(0, i - 2):i + 1].mean(axis=0)).max())
            for i in range(len(vel))]


def _speed_at_rest_since(msgs, t0):
    """The first receive time >= t0 with smoothed joint speeds < 0.05 rad/s, else None."""
    msgs = [(t, m) for t, m in msgs if t >= t0 - 0.05]
    for (t, _), s in zip(msgs, _smoothed_speeds(msgs)):
        if t >= t0 and s < 0.05:
            return t
    return None
