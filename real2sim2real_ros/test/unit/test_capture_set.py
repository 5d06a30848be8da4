"""Capture sets without ROS: MCAP bag + manifest round trip, and the specific error codes."""
import json

import numpy as np
import pytest

from real2sim2real_ros.core import capture_set as cs
from real2sim2real_ros.core.bag_io import BagReader, BagWriter
from real2sim2real_ros.core.reconstruction.views import CameraIntrinsics, CaptureView


def _view(seed: int, w=32, h=24, holes=True) -> CaptureView:
    rng = np.random.default_rng(seed)
    depth = rng.uniform(0.3, 2.0, (h, w)).astype(np.float32)
    if holes:
        depth[0, :5] = np.nan
        depth[3, 3] = 0.0
    rot = cs.quat_xyzw_to_matrix(rng.normal(size=4))
    pose = np.eye(4)
    pose[:3, :3] = rot
    pose[:3, 3] = rng.normal(size=3)
    return CaptureView(rgb=rng.integers(0, 256, (h, w, 3), dtype=np.uint8), depth=depth,
                       intrinsics=CameraIntrinsics(fx=30.5, fy=31.0, cx=15.5, cy=11.25,
                                                   width=w, height=h),
                       T_world_camera=pose, name=f'v{seed}')


def _records():
    return [cs.ViewRecord('cam0', 1_700_000_000_100_000_000),
            cs.ViewRecord('cam1', 1_700_000_000_100_000_000),
            cs.ViewRecord('cam0', 1_700_000_000_600_000_123)]


def test_round_trip_is_exact(tmp_path):
    views = [_view(i) for i in range(3)]
    bag, manifest = cs.write_capture_set(tmp_path / 'capture_000', views, _records(),
                                         {'source': 'test'})
    assert bag.is_dir() and manifest.is_file()
    data = json.loads(manifest.read_text())
    assert data['stage'] == 'capture' and data['results']['num_views'] == 3
    assert data['results']['cameras'] == ['cam0', 'cam1']
    assert data['parameters'] == {'source': 'test'}
    assert data['outputs']['bag']['path'] == str(bag.resolve())
    for source in (manifest, manifest.parent, bag):   # manifest, folder or bare bag
        loaded = cs.load_capture_set(source)
        assert len(loaded) == 3
        order = [0, 1, 2]   # stamp order = capture order, with or without manifest
        for got, i in zip(loaded, order, strict=True):
            want = views[i]
            np.testing.assert_array_equal(got.rgb, want.rgb)
            # bit-for-bit depth, NaN and 0 holes included
            assert got.depth.dtype == np.float32
            assert got.depth.tobytes() == want.depth.tobytes()
            assert got.intrinsics == want.intrinsics
            np.testing.assert_allclose(got.T_world_camera, want.T_world_camera, atol=1e-12)
            got.validate(i)   # helper-6's own check passes
    assert loaded[2].name == f'cam0@{_records()[2].stamp_ns}'
    with BagReader(bag) as reader:
        topics = reader.topics
    assert topics['/capture/cam0/color/image_raw'].count == 2
    assert topics['/capture/cam1/depth/image_rect_raw'].msgtype == 'sensor_msgs/msg/Image'
    assert topics['/capture/cam0/extrinsics'].offered_qos[0]['durability'] == 'transient_local'


def test_missing_intrinsics_on_write_has_its_code(tmp_path):
    view = _view(0)
    view.intrinsics = None
    with pytest.raises(cs.CaptureSetError) as err:
        cs.write_capture_set(tmp_path / 'c', [view], _records()[:1])
    assert err.value.code == cs.CaptureErrorCode.MISSING_INTRINSICS == 3
    assert 'cam0' in str(err.value)
    assert not (tmp_path / 'c' / cs.BAG_NAME).exists()


def test_missing_pose_and_no_views_have_their_codes(tmp_path):
    view = _view(0)
    view.T_world_camera = np.full((4, 4), np.nan)
    with pytest.raises(cs.CaptureSetError) as err:
        cs.write_capture_set(tmp_path / 'c', [view], _records()[:1])
    assert err.value.code == cs.CaptureErrorCode.MISSING_POSE
    with pytest.raises(cs.CaptureSetError) as err:
        cs.write_capture_set(tmp_path / 'c', [], [])
    assert err.value.code == cs.CaptureErrorCode.NO_FRAMES
    with pytest.raises(cs.CaptureSetError) as err:
        cs.load_capture_set(tmp_path / 'nope')
    assert err.value.code == cs.CaptureErrorCode.NO_FRAMES


def _bag_without(tmp_path, skip: str):
    """A bag of one 16UC1 view recorded from a driver, lacking the topic ``skip``."""
    path = tmp_path / 'recorded'
    stamp = {'sec': 5, 'nanosec': 7}
    k = [30.0, 0, 15.5, 0, 30.0, 11.5, 0, 0, 1]
    mm = np.arange(24 * 32, dtype=np.uint16).reshape(24, 32)
    with BagWriter(path) as bag:
        msgs = {
            '/cam/color/image_raw': (cs.IMAGE, {
                'header': {'stamp': stamp}, 'height': 24, 'width': 32, 'encoding': 'bgr8',
                'step': 96, 'data': np.arange(24 * 32 * 3, dtype=np.uint8)}),
            '/cam/depth/image_rect_raw': (cs.IMAGE, {
                'header': {'stamp': stamp}, 'height': 24, 'width': 32, 'encoding': '16UC1',
                'step': 64, 'data': mm.view(np.uint8).reshape(-1)}),
            '/cam/color/camera_info': (cs.CAMERA_INFO, {
                'header': {'stamp': stamp}, 'height': 24, 'width': 32, 'k': k}),
            '/cam/extrinsics': (cs.POSE, {
                'header': {'stamp': {'sec': 1}}, 'pose': {'position': {'x': 1.0},
                                                          'orientation': {'w': 1.0}}}),
        }
        for topic, (msgtype, msg) in msgs.items():
            if topic == skip:
                continue
            bag.add_topic(topic, msgtype)
            bag.write(topic, 5_000_000_007, msg)
    return path, mm


def test_recorded_driver_bag_loads_and_converts_16uc1(tmp_path):
    path, mm = _bag_without(tmp_path, skip='')
    (view,) = cs.load_capture_set(path)
    assert np.isnan(view.depth[0, 0])                  # 0 mm = hole
    assert view.depth[10, 3] == np.float32(mm[10, 3]) * np.float32(0.001)
    assert view.rgb[0, 0].tolist() == [2, 1, 0]         # bgr8 -> rgb
    assert view.T_world_camera[0, 3] == 1.0             # latched extrinsics stamped earlier
    assert view.intrinsics.cy == 11.5


def test_missing_intrinsics_on_load_has_its_code(tmp_path):
    path, _ = _bag_without(tmp_path, skip='/cam/color/camera_info')
    with pytest.raises(cs.CaptureSetError) as err:
        cs.load_capture_set(path)
    assert err.value.code == cs.CaptureErrorCode.MISSING_INTRINSICS
    assert '/cam/color/camera_info' in err.value.message


def test_missing_pose_on_load_has_its_code(tmp_path):
    path, _ = _bag_without(tmp_path, skip='/cam/extrinsics')
    with pytest.raises(cs.CaptureSetError) as err:
        cs.load_capture_set(path)
    assert err.value.code == cs.CaptureErrorCode.MISSING_POSE


def test_camera_label():
    assert cs.camera_label('/capture/cam0') == 'cam0'
    assert cs.camera_label('camera') == 'camera'
    with pytest.raises(ValueError):
        cs.camera_label('/')
