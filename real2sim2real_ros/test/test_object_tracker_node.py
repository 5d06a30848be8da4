"""object_tracker over DDS against the emulated default cell.

The graph: cell_emulated.launch.xml (emulated cell, executor) and capture.launch.xml
(camera_capture and object_tracker on ``camera``) through the runner. The tracker learns its
objects from a Scene latched here (what scene_reconstruction publishes), tracks them in the
cell's depth stream with the cell's published (calibration-error) extrinsics and the arm
masked by its URDF + joint states, and follows a box the cell moves (``~/reset_objects``).
A second tracker takes its objects from parameters instead. Measured: 3.5-4 mm (the cell's
published camera pose is 3.3 mm off in x: its calibration error), < 1 deg; the pose follows
a moved box within 0.1-0.3 s (the next frames at the cell's 5 Hz).
"""
from __future__ import annotations

import math
import os
import subprocess
import time

import numpy as np
import pytest
from conftest import start_graph

pytestmark = pytest.mark.integration

import real2sim2real_msgs.msg as msgs  # noqa: E402

POS_TOL = 0.005
YAW_TOL = math.radians(3.0)


def _yaw(q) -> float:
    return math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))


def _shape_extents(o):
    return ('box', tuple(o.size)) if o.shape == 'box' else (
        'cylinder', (o.size[0], o.size[0], o.size[1]))


class _ScenePublisher:
    """A latched Scene with the spec's objects, as scene_reconstruction would publish it."""

    def __init__(self, spec):
        import rclpy
        from geometry_msgs.msg import Point, Pose, Quaternion, Vector3

        from real2sim2real_ros.ros import qos
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node('test_scene_publisher', context=self.ctx)
        self.pub = self.node.create_publisher(msgs.Scene, 'scene', qos.LATCHED)
        scene = msgs.Scene(table_height=float(spec.table.height), artifact_dir='test')
        scene.header.frame_id = 'world'
        for o in spec.objects:
            shape, ext = _shape_extents(o)
            scene.objects.append(msgs.ObjectEstimate(
                id=o.id, shape=shape, extents=Vector3(x=ext[0], y=ext[1], z=ext[2]),
                pose=Pose(position=Point(x=o.xyz[0], y=o.xyz[1], z=o.xyz[2]),
                          orientation=Quaternion(w=math.cos(o.yaw / 2),
                                                 z=math.sin(o.yaw / 2)))))
        self.pub.publish(scene)

    def close(self):
        import rclpy
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)


@pytest.fixture(scope='module')
def cell(share_dir, tmp_path_factory):
    from real2sim2real_ros.core.cell_spec import load_cell_spec
    from real2sim2real_ros.ros.commander import GRAPH, Commander
    from real2sim2real_ros.ros.topic_listener import TopicListener
    tmp = tmp_path_factory.mktemp('tracker')
    spec = load_cell_spec(share_dir / 'config' / 'cells' / 'default.yaml')
    common = {'run_dir': str(tmp / 'runs')}
    graphs = [start_graph('cell_emulated.launch.xml', common, tmp),
              start_graph('capture.launch.xml', common, tmp)]
    cmd = Commander(node_name='test_tracker_commander', expected={
        k: GRAPH[k] for k in ('emulated_cell', 'object_tracker')})
    scene = listener = None
    try:
        cmd.wait_until_up(timeout=60)
        listener = TopicListener(msgs.TrackedObjects, '/tracked_objects')
        scene = _ScenePublisher(spec)
        yield spec, cmd, listener, tmp
    finally:
        for closeable in (listener, scene, cmd):
            if closeable is not None:
                closeable.close()
        for g in reversed(graphs):
            assert g.stop(timeout=30) is not None


def _wait_pose(listener, match, timeout: float, after: float = 0.0):
    """First (receive time, message) after ``after`` (monotonic) for which ``match`` holds."""
    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        msgs_ = listener.snapshot()
        for t, m in msgs_[seen:]:
            if t >= after and match(m):
                return t, m
        seen = len(msgs_)
        time.sleep(0.02)
    last = listener.snapshot()[-1:]
    raise AssertionError(f'no matching tracked_objects within {timeout} s; last: {last}')


def _errors(msg, truth):
    """{id: (position error, yaw error mod the shape's symmetry)} for the ids in ``truth``."""
    out = {}
    for oid, pose in zip(msg.ids, msg.poses, strict=True):
        if oid not in truth:
            continue
        (x, y, z), yaw, period = truth[oid]
        p = pose.position
        err = math.dist((p.x, p.y, p.z), (x, y, z))
        d = _yaw(pose.orientation) - yaw
        out[oid] = (err, abs(d - period * round(d / period)))
    return out


def _matches(truth):
    def ok(msg):
        errs = _errors(msg, truth)
        return set(errs) == set(truth) and all(
            e <= POS_TOL and y <= YAW_TOL for e, y in errs.values())
    return ok


def _spec_truth(spec):
    out = {}
    for o in spec.objects:
        _, ext = _shape_extents(o)
        out[o.id] = ((o.xyz[0], o.xyz[1], spec.table.height + ext[2] / 2), o.yaw,
                     math.pi if o.shape == 'box' else 2 * math.pi)
    return out


def test_tracks_the_scene_objects_and_follows_a_moved_box(cell):
    from geometry_msgs.msg import Point, Pose, Quaternion
    from std_srvs.srv import Trigger

    from real2sim2real_msgs.srv import ResetObjects
    spec, cmd, listener, _ = cell
    truth = _spec_truth(spec)
    t0 = time.monotonic()
    _, msg = _wait_pose(listener, _matches(truth), timeout=20.0)
    errs = _errors(msg, truth)
    print(f'first match {time.monotonic() - t0:.1f} s after the scene: ' + ', '.join(
        f'{k} {e * 1e3:.2f} mm {math.degrees(y):.2f} deg' for k, (e, y) in errs.items()))
    assert msg.header.frame_id == 'world' and msg.header.stamp.sec > 0
    assert all(n > 500 for n in msg.num_points)
    assert all(0.0 < r < 0.006 for r in msg.fit_residual)
    # Stamps are the depth images' (the cell's clock), in order, at the camera's rate.
    stamps = [m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec
              for _, m in listener.snapshot()[-6:]]
    assert np.all(np.diff(stamps) > 0)

    # The person at the table moves the box: the tracked pose follows within 1 s.
    x, y, yaw = 0.72, 0.22, -0.5
    request = ResetObjects.Request(object_ids=['box_0'], poses=[Pose(
        position=Point(x=x, y=y, z=0.025),
        orientation=Quaternion(w=math.cos(yaw / 2), z=math.sin(yaw / 2)))])
    resp = cmd.call(ResetObjects, 'emulated_cell/reset_objects', request)
    t_moved = time.monotonic()
    assert resp.success, resp.message
    moved = dict(truth, box_0=((x, y, 0.025), yaw, math.pi))
    t_seen, msg = _wait_pose(listener, _matches(moved), timeout=5.0, after=t_moved)
    errs = _errors(msg, moved)
    print(f'moved box tracked {t_seen - t_moved:.2f} s after the move: '
          f'{errs["box_0"][0] * 1e3:.2f} mm {math.degrees(errs["box_0"][1]):.2f} deg')
    assert t_seen - t_moved <= 1.0

    # ~/reset forgets the history; tracking goes on. Then put everything back.
    reset = cmd.call(Trigger, 'object_tracker/reset', Trigger.Request())
    assert reset.success and '2 objects' in reset.message
    _wait_pose(listener, _matches(moved), timeout=5.0, after=time.monotonic())
    assert cmd.reset_objects().success
    _wait_pose(listener, _matches(truth), timeout=5.0, after=time.monotonic())


def test_objects_from_parameters_and_bad_input(cell, tmp_path):
    """A second tracker, objects from parameters (no scene); and a camera that publishes an
    encoding it cannot read: a warning, the node keeps tracking the other camera."""
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from sensor_msgs.msg import CameraInfo, Image

    from real2sim2real_ros.ros import qos
    from real2sim2real_ros.ros.topic_listener import TopicListener
    spec, _, _, _ = cell
    box = spec.object('box_0')
    log = open(tmp_path / 'tracker_params.log', 'w')  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        ['object_tracker', '--ros-args', '-r', '__node:=tracker_params',
         '-r', 'tracked_objects:=tracked_objects_params', '-p', 'use_scene:=false',
         '-p', "cameras:=['camera', 'bad_camera']", '-p', 'robot_mask:=false',
         '-p', 'object_ids:=[box_0]', '-p', 'object_shapes:=[box]',
         '-p', f'object_extents:={list(box.size)}',
         '-p', f'object_poses:=[{box.xyz[0]}, {box.xyz[1]}, {box.yaw}]',
         '-p', 'table_height:=0.0'],
        env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT)
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node('test_bad_camera', context=ctx)
    bad = node.create_publisher(Image, 'bad_camera/depth/image_rect_raw', qos.IMAGES)
    info = node.create_publisher(CameraInfo, 'bad_camera/depth/camera_info', qos.IMAGES)
    pose = node.create_publisher(PoseStamped, 'bad_camera/extrinsics', qos.LATCHED)
    extrinsics = PoseStamped()
    extrinsics.header.frame_id = 'world'
    extrinsics.pose.position.z = 1.0
    extrinsics.pose.orientation.x = 1.0                # looking down
    pose.publish(extrinsics)

    def publish_bad():
        info.publish(CameraInfo(height=2, width=2, k=[500.0, 0.0, 1.0, 0.0, 500.0, 1.0, 0.0,
                                                      0.0, 1.0]))
        bad.publish(Image(height=2, width=2, encoding='rgb8', step=6, data=bytes(12)))
    listener = TopicListener(msgs.TrackedObjects, '/tracked_objects_params')
    try:
        truth = {'box_0': _spec_truth(spec)['box_0']}
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline and not listener.snapshot():
            publish_bad()
            time.sleep(0.2)
        # The bad camera's frames only count once the tracker has matched this process's
        # publishers and holds their camera_info and extrinsics; under load (CI, 2 cores)
        # that took longer than a fixed 1.25 s of frames. Publish until the node says it.
        warning = "unsupported depth encoding 'rgb8'"
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline and warning not in (
                tmp_path / 'tracker_params.log').read_text():
            publish_bad()
            time.sleep(0.25)
        _, msg = _wait_pose(listener, _matches(truth), timeout=20.0)
        assert list(msg.ids) == ['box_0']
        _wait_pose(listener, _matches(truth), timeout=5.0, after=time.monotonic())
        assert proc.poll() is None                         # still running
    finally:
        listener.close()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
    text = (tmp_path / 'tracker_params.log').read_text()
    assert "tracking ['box_0']" in text and 'from parameters' in text, text
    assert warning in text, text


def test_malformed_object_parameters_exit_2():
    out = subprocess.run(
        ['object_tracker', '--ros-args', '-p', 'object_ids:=[a, b]',
         '-p', 'object_extents:=[0.1, 0.1, 0.1]'],
        capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert out.returncode == 2, out.stderr
    assert 'object_extents' in out.stderr
