"""camera_capture against the emulated multi-view cell, then the capture bag replayed offline
into a second DDS domain and captured again with source=topics: the same views come back."""
import os
import threading
import time

import numpy as np
import pytest
from helpers.graph import launch_file, start_graph

CAMERAS = ['camera', 'camera_left', 'camera_front', 'camera_back']


@pytest.fixture(scope='module')
def multiview(share_dir, tmp_path_factory):
    from real2sim2real_ros.core.cell_spec import load_cell_spec
    tmp = tmp_path_factory.mktemp('capture')
    spec_path = share_dir / 'config' / 'cells' / 'multiview.yaml'
    params = tmp / 'params.yaml'   # camera_rate 0 = the spec's 2 Hz (params.yaml says 5)
    params.write_text('/**/emulated_cell:\n  ros__parameters:\n    camera_rate: 0.0\n')
    cell = start_graph('cell_emulated.launch.xml', {
        'cell_spec': str(spec_path), 'params_file': str(params),
        'run_dir': str(tmp / 'runs')}, tmp)
    cap = start_graph('capture.launch.xml', {
        'params_file': str(params), 'run_dir': str(tmp / 'runs'),
        'cameras': str(CAMERAS)}, tmp)
    try:
        yield load_cell_spec(spec_path), tmp
    finally:
        cap.stop(timeout=20)
        cell.stop(timeout=30)


def _rotation_angle(a, b) -> float:
    cos = (np.trace(a.T @ b) - 1.0) / 2.0
    return float(np.arccos(np.clip(cos, -1.0, 1.0)))


def test_capture_and_offline_replay(multiview, share_dir, tmp_path):
    from real2sim2real_ros.cli.capture_cli import capture
    from real2sim2real_ros.core.capture_set import load_capture_set
    spec, tmp = multiview
    feedback = []
    t0 = time.monotonic()
    result = capture(num_views=4, feedback=feedback.append, timeout=60.0)
    capture_s = time.monotonic() - t0
    # Counts: refused before sending when negative; bounded by the node when huge.
    with pytest.raises(ValueError, match='num_views'):
        capture(num_views=-1, timeout=10.0)
    huge = capture(num_views=2**32 - 1, timeout=30.0)
    assert huge.error_code == 7 and '4294967295' in huge.error_msg     # INVALID_GOAL
    assert result.error_code == 0, result.error_msg
    assert result.capture_set.num_views == 4
    assert [(f.views_done, f.views_total) for f in feedback][-1] == (4, 4)
    views = load_capture_set(result.capture_set.manifest_path)
    assert [v.name.split('@')[0] for v in views] == CAMERAS
    for view in views:
        cam = spec.camera(view.name.split('@')[0])
        assert view.rgb.shape == (480, 640, 3) and view.depth.shape == (480, 640)
        intr = view.intrinsics
        assert (intr.fx, intr.fy, intr.cx, intr.cy, intr.width, intr.height) == (
            cam.fx, cam.fy, cam.cx, cam.cy, cam.width, cam.height)
        # Published extrinsics carry the spec's calibration error (1-sigma 2 mm / 2 mrad).
        pose = view.T_world_camera
        assert np.linalg.norm(pose[:3, 3] - cam.position) < 5 * np.sqrt(3) * 0.002
        assert _rotation_angle(pose[:3, :3], cam.rotation_matrix) < 5 * np.sqrt(3) * 0.002
        # Depth at the table centre's pixel ~ its distance along the optical axis.
        centre = np.array([spec.table.center[0], spec.table.center[1], spec.table.height])
        p_cam = cam.rotation_matrix.T @ (centre - cam.position)
        u = int(round(cam.fx * p_cam[0] / p_cam[2] + cam.cx))
        v = int(round(cam.fy * p_cam[1] / p_cam[2] + cam.cy))
        patch = view.depth[v - 2:v + 3, u - 2:u + 3]
        assert abs(np.nanmedian(patch) - p_cam[2]) < 0.01, (view.name, p_cam[2])
        view.validate()
    print(f'capture of 4 views took {capture_s:.2f} s')

    # Offline: play the capture bag into another domain; a source=topics node captures it.
    from real2sim2real_ros.launch_runner import LaunchedGraph
    from real2sim2real_ros.ros.bag_tools import BagPlayer
    from real2sim2real_ros.ros.dds_isolation import allocate_domain_id
    domain = allocate_domain_id()
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), R2S2R_DOMAIN_ID=str(domain),
               R2S2R_RUN_DIR=str(tmp_path / 'runs'))
    # The bringup's parameters, and 30 s per view (default 10): the player is a thread of
    # this process, and a loaded fresh-clone run had 0 frames from camera_back in 10 s.
    params = tmp_path / 'params.yaml'
    params.write_text((share_dir / 'config' / 'params.yaml').read_text()
                      + '\n/**/camera_capture:\n  ros__parameters:\n    timeout: 30.0\n')
    replay_node = LaunchedGraph(launch_file('capture.launch.xml'), {
        'capture_source': 'topics', 'run_dir': str(tmp_path / 'runs'),
        'params_file': str(params),
        'cameras': str([f'/capture/{c}' for c in CAMERAS])},
        env=env, log_dir=tmp_path / 'logs').start()
    import rclpy
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=domain)
    node = rclpy.create_node('capture_replayer', context=ctx)
    # The topics the node subscribes to (it needs no depth/camera_info: depth is registered).
    topics = [f'/capture/{c}/{t}' for c in CAMERAS for t in (
        'color/image_raw', 'depth/image_rect_raw', 'color/camera_info', 'extrinsics')]
    player = BagPlayer(node, result.capture_set.bag_path, topics=topics, loop=True,
                       wait_for_subscribers_s=8.0)
    playing = threading.Thread(target=player.play, daemon=True)
    try:
        playing.start()
        replayed = capture(num_views=4, timeout=150.0, domain_id=domain)
        assert replayed.error_code == 0, replayed.error_msg
        again = load_capture_set(replayed.capture_set.manifest_path)
    finally:
        player.stop()
        playing.join(timeout=5)
        player.close()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
        replay_node.stop(timeout=20)
    assert [v.name for v in again] == [v.name for v in views]   # same cameras, same stamps
    for a, b in zip(views, again, strict=True):
        assert a.depth.tobytes() == b.depth.tobytes()            # bit for bit
        np.testing.assert_array_equal(a.rgb, b.rgb)
        assert a.intrinsics == b.intrinsics
        np.testing.assert_allclose(a.T_world_camera, b.T_world_camera, atol=1e-9)
