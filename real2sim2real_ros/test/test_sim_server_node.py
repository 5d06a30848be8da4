"""sim_server over DDS: twin.launch.xml through the runner, the robot from a latched
robot_description published here; services, the batched rollout action, bad input."""
from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import TopicListener, start_graph

pytestmark = pytest.mark.integration

from real2sim2real_msgs.action import Rollout  # noqa: E402

RR = Rollout.Result
NAMES = ['shoulder_pan_joint', 'shoulder_lift_joint', 'elbow_joint', 'wrist_1_joint',
         'wrist_2_joint', 'wrist_3_joint']
READY = [0.0, -1.5708, 1.5708, 1.5708, 0.0, 0.0]


class _Description:
    """Publishes the cell arm's URDF on the latched robot_description (what a cell does)."""

    def __init__(self):
        import rclpy
        from std_msgs.msg import String

        from real2sim2real_ros.core.robot_description import default_cell_urdf
        from real2sim2real_ros.ros import qos
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node('test_description', context=self.ctx)
        self.pub = self.node.create_publisher(String, 'robot_description', qos.LATCHED)
        self.pub.publish(String(data=default_cell_urdf().read_text()))

    def close(self):
        import rclpy
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)


@pytest.fixture(scope='module')
def sim(share_dir, tmp_path_factory):
    from real2sim2real_ros.ros.commander import GRAPH, Commander
    tmp = tmp_path_factory.mktemp('twin')
    desc = _Description()
    graph = start_graph('twin.launch.xml', {'run_dir': str(tmp / 'runs')}, tmp)
    cmd = Commander(node_name='test_sim_commander',
                    expected={k: GRAPH[k] for k in ('sim_server', 'system_identification')})
    try:
        cmd.wait_until_up(timeout=60)
        # The twin is built once robot_description arrives.
        for _ in range(100):
            if cmd.get_physical_parameters(['global/command_latency']).success:
                break
            import time
            time.sleep(0.1)
        yield cmd
    finally:
        cmd.close()
        desc.close()
        assert graph.stop(timeout=30) is not None


def test_starts_from_the_identification_config(sim):
    resp = sim.get_physical_parameters()
    assert resp.success, resp.message
    got = {p.name: p for p in resp.parameters}
    assert len(got) > 50    # every body, joint, actuator and global parameter
    assert got['actuator/elbow_joint/kp'].value == pytest.approx(2000.0)   # known gains
    assert got['actuator/wrist_3_joint/kv'].value == pytest.approx(8.0)
    assert got['joint/elbow_joint/damping'].value == pytest.approx(0.5)    # priors
    assert got['global/command_latency'].value == pytest.approx(0.01)
    assert got['joint/elbow_joint/damping'].unit == 'N m s/rad'


def test_set_and_get_parameters_and_bad_names(sim):
    from real2sim2real_msgs.msg import PhysicalParameter
    p = PhysicalParameter(name='joint/elbow_joint/damping', value=0.62, lower_95=0.55,
                          upper_95=0.7, prior=0.5, identified=True)
    resp = sim.set_physical_parameters([p])
    assert resp.success, resp.message
    (back,) = sim.get_physical_parameters(['joint/elbow_joint/damping']).parameters
    assert (back.value, back.lower_95, back.upper_95, back.identified) == \
        pytest.approx((0.62, 0.55, 0.7, True))
    bad = sim.set_physical_parameters({'joint/no_such_joint/damping': 1.0,
                                       'joint/elbow_joint/damping': 9.0})
    assert not bad.success and 'no_such_joint' in bad.message
    neg = sim.set_physical_parameters({'joint/elbow_joint/damping': -1.0})
    assert not neg.success and '>= 0' in neg.message
    # Nothing changed by the refused requests.
    (back,) = sim.get_physical_parameters(['joint/elbow_joint/damping']).parameters
    assert back.value == pytest.approx(0.62)
    unknown = sim.get_physical_parameters(['body/nothing/mass'])
    assert not unknown.success and 'nothing' in unknown.message
    sim.set_physical_parameters({'joint/elbow_joint/damping': 0.5})


def test_pause_step_reset_and_joint_states(sim):
    from sensor_msgs.msg import JointState
    assert sim.sim_pause(True).success
    t0 = sim.sim_step(1).sim_time
    resp = sim.sim_step(1000)
    assert resp.success and resp.sim_time - t0 == pytest.approx(1.0, abs=1e-9)
    bad = sim.sim_reset(qpos=[0.0, 1.0])
    assert not bad.success and '6 joints' in bad.message
    listener = TopicListener(JointState, '/sim_server/joint_states')
    try:
        # Each step publishes the state: step until the listener is matched and hears it.
        deadline = time.monotonic() + 10
        while not listener.snapshot() and time.monotonic() < deadline:
            assert sim.sim_step(1).success
            time.sleep(0.1)
        n = len(listener.snapshot())
        assert n, 'no state on ~/joint_states'
        assert sim.sim_reset(qpos=READY).success
        assert listener.wait_for(n + 1, 10)
        msg = listener.snapshot()[-1][1]
        assert list(msg.name) == NAMES
        np.testing.assert_allclose(msg.position, READY, atol=1e-9)
        assert sim.sim_step(500).success     # holds the pose under (compensated) gravity
        np.testing.assert_allclose(listener.snapshot()[-1][1].position, READY, atol=2e-3)
        assert sim.sim_pause(False).success
        running = sim.sim_step(10)
        assert not running.success and 'set_pause' in running.message
        n = len(listener.snapshot())
        assert listener.wait_for(n + 20, 10)   # the live loop publishes on its own
    finally:
        listener.close()
        sim.sim_pause(True)


def test_bad_counts_and_parameter_batches_leave_the_node_serving(sim):
    """A huge step count is refused (it used to raise in the callback and end the node), a
    negative one never leaves the commander, a batch with one bad value changes nothing and
    friction 1e9 is above its bound."""
    from real2sim2real_ros.nodes.sim_server_node import MAX_STEPS_PER_CALL
    assert sim.sim_pause(True).success
    t0 = sim.sim_step(1).sim_time
    from real2sim2real_msgs.srv import StepSim
    huge = sim.call(StepSim, 'sim_server/step', StepSim.Request(steps=2**32 - 1), timeout=30)
    assert not huge.success and f'more than the {MAX_STEPS_PER_CALL}' in huge.message
    with pytest.raises(ValueError, match='steps'):
        sim.sim_step(-1)
    after = sim.sim_step(10)                       # still serving, time moved by 10 steps only
    assert after.success and after.sim_time - t0 == pytest.approx(0.01, abs=1e-9)
    name = 'joint/elbow_joint/damping'
    (before,) = sim.get_physical_parameters([name]).parameters
    batch = sim.set_physical_parameters({name: before.value + 0.3,
                                         'joint/wrist_1_joint/damping': -1.0})
    assert not batch.success and 'wrist_1_joint' in batch.message
    assert sim.get_physical_parameters([name]).parameters[0].value == pytest.approx(before.value)
    absurd = sim.set_physical_parameters({'joint/wrist_2_joint/damping': 1e9})
    assert not absurd.success and 'above the bound' in absurd.message


def _move(delta=0.2, duration=1.0):
    q1 = np.array(READY)
    q1[2] += delta
    return [(duration, list(q1))]


def test_batched_rollout_round_trip(sim):
    samples = [{'global/command_latency': 0.0}, {'global/command_latency': 0.05},
               {'joint/elbow_joint/damping': 1.5, 'global/command_latency': 0.0}]
    fb = []
    res = sim.rollout(NAMES, _move(), initial_qpos=READY, parameter_samples=samples,
                      sample_period=0.01, feedback=fb.append, timeout=60)
    assert res.error_code == RR.NONE, res.error_msg
    assert res.num_rollouts == 3 and list(res.joint_names) == NAMES
    pos = np.array(res.positions).reshape(res.num_rollouts, res.num_samples, 6)
    times = np.array(res.times)
    assert res.num_samples == len(times) and times[1] - times[0] == pytest.approx(0.01)
    assert times[-1] == pytest.approx(1.2, abs=0.011)     # trajectory end + 0.2 s
    np.testing.assert_allclose(pos[:, -1, 2], READY[2] + 0.2, atol=5e-3)   # all arrive
    k = int(np.argmin(np.abs(times - 0.5)))
    lag = pos[0, k, 2] - pos[1, k, 2]      # 50 ms later at 0.2 rad/s: ~0.01 rad behind
    assert 0.006 < lag < 0.014
    assert fb and fb[-1].progress == pytest.approx(1.0)


def test_rollout_bad_input_and_cancel(sim):
    res = sim.rollout(NAMES, _move(), parameter_samples=[{'joint/nope/damping': 1.0}])
    assert res.error_code == RR.UNKNOWN_PARAMETER and 'nope' in res.error_msg
    res = sim.rollout(NAMES, _move(), initial_qpos=[0.0] * 3)
    assert res.error_code == RR.INVALID_GOAL and '6 values' in res.error_msg
    res = sim.rollout(NAMES[:5], [(1.0, [0.0] * 5)])
    assert res.error_code == RR.INVALID_GOAL and 'wrist_3_joint' in res.error_msg
    # A state the twin cannot integrate sanely (5000 rad/s) is reported, not returned.
    res = sim.rollout(NAMES, _move(), initial_qpos=READY, initial_qvel=[0.0] * 5 + [5000.0])
    assert res.error_code == RR.UNSTABLE and 'velocity' in res.error_msg, res.error_msg
    many = [{'joint/elbow_joint/damping': 0.5 + 0.01 * i} for i in range(400)]
    res = sim.rollout(NAMES, _move(), initial_qpos=READY, parameter_samples=many,
                      cancel_after=0.3, timeout=60)
    assert res.error_code == RR.CANCELED and 'canceled after' in res.error_msg
    # Still serving after all of that.
    assert sim.get_physical_parameters(['global/command_latency']).success
