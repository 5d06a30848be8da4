"""The Commander over DDS against an in-process action server: a goal whose response is lost
still runs to its result, and a callback that raises does not stop the commander's answers."""
from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.integration
import rclpy  # noqa: E402,F401 - the ROS client library must import


def test_run_action_gets_the_result_when_the_goal_response_is_lost(
        capture_server, lost_goal_responses):
    from real2sim2real_ros.ros.commander import Commander
    _, Capture = capture_server
    feedback = []
    with Commander(node_name='lost_response_commander', expected={}) as cmd:
        t0 = time.monotonic()
        result = cmd.run_action(Capture, 'capture', Capture.Goal(num_views=2),
                                feedback=feedback.append, timeout=20.0)
        took = time.monotonic() - t0
    assert result.error_msg == 'captured 2'
    assert [f.views_done for f in feedback] == [1, 2]
    assert took < 10.0, f'{took:.1f} s'


def test_a_raising_callback_does_not_stop_the_commander(capture_server):
    from std_msgs.msg import String

    from real2sim2real_ros.ros.commander import Commander
    node, Capture = capture_server
    raised = []

    def boom(msg):
        raised.append(msg.data)
        raise ValueError('a callback bug')
    pub = node.create_publisher(String, 'boom', 10)
    with Commander(node_name='raising_commander', expected={}) as cmd:
        cmd.node.create_subscription(String, 'boom', boom, 10)
        deadline = time.monotonic() + 10.0
        while not raised and time.monotonic() < deadline:
            pub.publish(String(data='x'))
            time.sleep(0.1)
        assert raised, 'the raising callback never ran'
        result = cmd.run_action(Capture, 'capture', Capture.Goal(num_views=1), timeout=20.0)
    assert result.error_msg == 'captured 1'


@pytest.fixture
def slow_first_trigger():
    """An in-process Trigger service on ``/slow_first`` whose FIRST call answers only after
    1.5 s (a response the caller gives up on, as a lost one), every later call at once; one
    executor thread, so requests are served in turn. Yields the list of calls served."""
    import threading

    from rclpy.executors import SingleThreadedExecutor
    from std_srvs.srv import Trigger
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node('slow_first_server', context=ctx)
    served = []

    def answer(_req, resp):
        served.append(time.monotonic())
        if len(served) == 1:
            time.sleep(1.5)
        resp.success, resp.message = True, f'call {len(served)}'
        return resp
    node.create_service(Trigger, 'slow_first', answer)
    executor = SingleThreadedExecutor(context=ctx)
    executor.add_node(node)
    spin = threading.Thread(target=executor.spin, daemon=True)
    spin.start()
    try:
        yield served
    finally:
        executor.shutdown(timeout_sec=2.0)
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
        spin.join(timeout=2.0)


def test_call_resends_once_when_no_answer_comes(slow_first_trigger):
    from std_srvs.srv import Trigger

    from real2sim2real_ros.ros.commander import Commander, CommanderError
    served = slow_first_trigger
    with Commander(node_name='resend_commander', expected={}) as cmd:
        with pytest.raises(CommanderError, match='no answer within 1.0 s'):
            cmd.call(Trigger, 'slow_first', timeout=1.0)      # not resent: the caller's error
        time.sleep(1.0)                                       # the late answer goes nowhere
        assert len(served) == 1
        served.clear()
        resp = cmd.call(Trigger, 'slow_first', timeout=1.0, resend=True)
    # Served twice: the first answer came after the caller's 1.0 s, the second in time.
    assert len(served) == 2 and resp.success
    assert resp.message == 'call 2'
