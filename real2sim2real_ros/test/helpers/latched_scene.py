"""A latched message offered from a private rclpy context (the Scene that scene_reconstruction
would publish), and the Scene message of a cell spec's true geometry."""
from __future__ import annotations

import threading
import time


class LatchedPublisher:
    """One latched message, offered from a context of its own for as long as the test runs."""

    def __init__(self, msg_type, topic: str, msg):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        from real2sim2real_ros.ros import qos
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node('test_scene_publisher', context=self.ctx)
        self.pub = self.node.create_publisher(msg_type, topic, qos.LATCHED)
        self.pub.publish(msg)
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def wait_for_subscriber_nodes(self, names, timeout: float) -> bool:
        """True once each named node subscribes and every subscriber in the graph has
        matched this publisher (a count alone is met by whichever nodes matched first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            infos = self.node.get_subscriptions_info_by_topic(self.pub.topic_name)
            if set(names) <= {i.node_name for i in infos} and \
                    self.pub.get_subscription_count() >= len(infos):
                return True
            time.sleep(0.1)
        return False

    def _spin(self):
        try:
            self.executor.spin()
        except Exception:  # noqa: BLE001 - context shut down
            pass

    def close(self):
        import rclpy
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)
        self.thread.join(timeout=2.0)


def scene_message(spec, mjcf_path: str):
    from geometry_msgs.msg import Pose, Vector3

    from real2sim2real_msgs.msg import ObjectEstimate, Scene
    msg = Scene(table_height=float(spec.table.height), mjcf_path=mjcf_path)
    msg.header.frame_id = 'world'
    msg.table_plane = [0.0, 0.0, 1.0, -float(spec.table.height)]
    for o in spec.objects:
        import math
        pose = Pose()
        pose.position.x, pose.position.y = map(float, o.xyz[:2])
        pose.position.z = float(spec.table.height + o.half_height)
        pose.orientation.w, pose.orientation.z = math.cos(o.yaw / 2), math.sin(o.yaw / 2)
        ext = o.extents
        msg.objects.append(ObjectEstimate(
            id=o.id, shape=o.shape, pose=pose,
            extents=Vector3(x=float(ext[0]), y=float(ext[1]), z=float(ext[2])),
            mass=0.1, mass_is_prior=True, mjcf_path=mjcf_path))
    return msg


def publish_scene(spec, folder, timeout: float = 30.0):
    """The cell ``spec``'s scene as reconstruction gives it (bench/object_id_bench.scene_xml,
    written to ``folder/scene.xml``) on the latched ``scene`` topic, once object_tracker and
    system_identification subscribe (AssertionError after ``timeout`` s), and 1 s more for
    the message to reach them (a match is not a delivery). Close the returned
    LatchedPublisher when done."""
    import time

    from real2sim2real_msgs.msg import Scene
    from real2sim2real_ros.bench.object_id_bench import scene_xml
    scene = folder / 'scene.xml'
    scene.write_text(scene_xml(spec))
    publisher = LatchedPublisher(Scene, 'scene', scene_message(spec, str(scene)))
    try:
        assert publisher.wait_for_subscriber_nodes(
            ['object_tracker', 'system_identification'], timeout)
    except BaseException:
        publisher.close()
        raise
    time.sleep(1.0)
    return publisher
