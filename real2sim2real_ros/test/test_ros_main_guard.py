"""ros_main.guard_callbacks: a handler that raises answers with an error and the node keeps
serving; a subscription callback that raises does not end the executor."""
import threading
import time

import rclpy
from rclpy.executors import MultiThreadedExecutor
from std_msgs.msg import String
from std_srvs.srv import Trigger

from real2sim2real_ros.ros.ros_main import guard_callbacks


def test_a_raising_service_answers_with_an_error_and_keeps_serving():
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    server = rclpy.create_node('guard_server', context=ctx)
    client_node = rclpy.create_node('guard_client', context=ctx)
    calls, heard = [], []

    def handler(req, resp):
        calls.append(1)
        if len(calls) == 1:
            raise OverflowError('steps 4294967295 does not fit in int')
        resp.success, resp.message = True, f'call {len(calls)}'
        return resp

    def on_msg(msg):
        heard.append(msg.data)
        if msg.data == 'bad':
            raise ValueError('a message the node cannot handle')

    server.create_service(Trigger, 'guarded', handler)
    server.create_subscription(String, 'guarded_topic', on_msg, 10)
    assert guard_callbacks(server) >= 2        # ours and rclpy's parameter services
    assert guard_callbacks(server) == 0          # idempotent
    executor = MultiThreadedExecutor(num_threads=2, context=ctx)
    executor.add_node(server)
    executor.add_node(client_node)
    failed = []

    def spin():
        try:
            executor.spin()
        except Exception as exc:  # noqa: BLE001 - what the guard must prevent
            failed.append(exc)
    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    try:
        cli = client_node.create_client(Trigger, 'guarded')
        assert cli.wait_for_service(timeout_sec=10)

        def call():
            future = cli.call_async(Trigger.Request())
            deadline = time.monotonic() + 10
            while not future.done() and time.monotonic() < deadline:
                time.sleep(0.02)
            return future.result()
        first = call()
        assert first is not None and not first.success
        assert 'internal error in /guarded: OverflowError' in first.message
        assert '4294967295' in first.message
        second = call()
        assert second.success and second.message == 'call 2'
        pub = client_node.create_publisher(String, 'guarded_topic', 10)
        deadline = time.monotonic() + 10
        while 'good' not in heard and time.monotonic() < deadline:
            pub.publish(String(data='bad'))
            pub.publish(String(data='good'))
            time.sleep(0.1)
        assert 'bad' in heard and 'good' in heard
        assert thread.is_alive() and not failed
    finally:
        executor.shutdown(timeout_sec=2.0)
        thread.join(timeout=5)
        server.destroy_node()
        client_node.destroy_node()
        rclpy.try_shutdown(context=ctx)


class _FlakyExecutor:
    """An executor whose spin raises rclpy's InvalidHandle ``n`` times, then returns (or
    raises forever with n < 0)."""

    def __init__(self, n: int):
        self.n, self.calls = n, 0

    def spin(self):
        from rclpy.exceptions import InvalidHandle
        self.calls += 1
        if self.n < 0 or self.calls <= self.n:
            raise InvalidHandle('cannot use Destroyable because destruction was requested')


def test_spin_survives_an_entity_destroyed_while_the_wait_set_is_built():
    """camera_capture once died when its per-goal subscription was destroyed while the
    executor built a wait set (rclpy raised InvalidHandle out of spin): spinning resumes."""
    from real2sim2real_ros.ros.ros_main import _spin
    rclpy.init()
    try:
        executor, stop, failure = _FlakyExecutor(3), threading.Event(), []
        _spin(executor, stop, failure)
        assert executor.calls == 4 and failure == []
        executor, stop, failure = _FlakyExecutor(-1), threading.Event(), []
        _spin(executor, stop, failure)   # something that stays broken still ends the node
        assert len(failure) == 1 and 'destruction was requested' in str(failure[0])
    finally:
        rclpy.try_shutdown()
