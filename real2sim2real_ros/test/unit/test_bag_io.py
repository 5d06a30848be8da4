"""core.bag_io: rosbag2 MCAP/sqlite3 bags written and read without ROS (no rclpy here)."""
import json
import signal
import subprocess
import sys
import textwrap
from argparse import Namespace

import numpy as np
import pytest
import yaml
from rosbags.rosbag2 import Writer
from rosbags.typesys import Stores, get_typestore

from real2sim2real_ros.core.bag_io import (
    BagError,
    BagReader,
    BagWriter,
    MessageTypeError,
    MessageTypes,
    bag_info,
    package_share_directory,
    to_dict,
)

JS = 'sensor_msgs/msg/JointState'
IMG = 'sensor_msgs/msg/Image'
PPS = 'real2sim2real_msgs/msg/PhysicalParameterSet'
T0 = 1_700_000_000_123_456_789
RELIABLE_LATCHED = [{
    'history': 'keep_last', 'depth': 1, 'reliability': 'reliable',
    'durability': 'transient_local', 'deadline': {'sec': 0, 'nsec': 0},
    'lifespan': {'sec': 0, 'nsec': 0}, 'liveliness': 'automatic',
    'liveliness_lease_duration': {'sec': 0, 'nsec': 0},
    'avoid_ros_namespace_conventions': False}]



def joint_state(i):
    return {'header': {'stamp': {'sec': 1000 + i, 'nanosec': 7 * i}, 'frame_id': 'base_link'},
            'name': ['shoulder', 'elbow', 'wrist'],
            'position': [0.1 * i, -0.25, 1e-9 * i], 'velocity': [1.5, 0.0, -2.0 * i],
            'effort': []}


def image(i, rng):
    h, w = 48, 64
    return {'header': {'stamp': {'sec': 2000, 'nanosec': i}, 'frame_id': 'camera_optical'},
            'height': h, 'width': w, 'encoding': 'rgb8', 'is_bigendian': 0, 'step': 3 * w,
            'data': rng.integers(0, 256, size=h * w * 3, dtype=np.uint8).tolist()}


def parameter_set(i):
    return {'header': {'stamp': {'sec': 3000, 'nanosec': 0}, 'frame_id': ''},
            'parameters': [
                {'name': 'body/box_0/mass', 'value': 0.5 + i, 'lower_95': 0.45, 'upper_95': 0.55,
                 'prior': 0.4, 'unit': 'kg', 'identified': True},
                {'name': 'geom/box_0/friction', 'value': 0.8, 'lower_95': 0.8, 'upper_95': 0.8,
                 'prior': 0.8, 'unit': '', 'identified': False}],
            'artifact_dir': f'/runs/identification_{i:03d}'}


def expected_stream(rng):
    """(topic, type, stamp, dict) interleaved as a recorder would see them."""
    out = []
    for i in range(20):
        out.append(('/joint_states', JS, T0 + i * 10_000_000, joint_state(i)))
        if i % 5 == 0:
            out.append(('/camera/color/image_raw', IMG, T0 + i * 10_000_000 + 1, image(i, rng)))
    for i in range(2):
        out.append(('/physical_parameters', PPS, T0 + 300_000_000 + i, parameter_set(i)))
    return out


@pytest.mark.parametrize('compress', [False, True])
def test_round_trip_is_exact(tmp_path, compress):
    stream = expected_stream(np.random.default_rng(0))
    path = tmp_path / 'run_1'
    with BagWriter(path, compress=compress) as bag:
        bag.add_topic('/joint_states', JS)
        bag.add_topic('/camera/color/image_raw', IMG)
        bag.add_topic('/physical_parameters', PPS, qos_profiles=RELIABLE_LATCHED)
        for topic, _t, stamp, msg in stream:
            bag.write(topic, stamp, msg)
        assert not path.exists(), 'the bag must not appear under its name before close()'

    assert sorted(p.name for p in path.iterdir()) == ['metadata.yaml', 'run_1_0.mcap']
    meta = yaml.safe_load((path / 'metadata.yaml').read_text())['rosbag2_bagfile_information']
    assert meta['version'] == 9 and meta['storage_identifier'] == 'mcap'
    assert meta['relative_file_paths'] == ['run_1_0.mcap']

    with BagReader(path) as reader:
        got = [(t, ty, ts, to_dict(reader.deserialize(raw, ty)))
               for t, ty, ts, raw in reader.messages()]
        assert reader.topics['/physical_parameters'].offered_qos == RELIABLE_LATCHED
    assert len(got) == len(stream) == 26
    for (t, ty, ts, msg), (et, ety, ets, emsg) in zip(got, stream):
        assert (t, ty, ts) == (et, ety, ets)
        assert msg == emsg     # every field, every float bit, every image byte

    info = bag_info(path)
    assert info['storage'] == 'mcap' and info['message_count'] == 26
    assert {k: v['count'] for k, v in info['topics'].items()} == {
        '/joint_states': 20, '/camera/color/image_raw': 4, '/physical_parameters': 2}
    assert info['duration_s'] == pytest.approx(0.300000001, abs=1e-12)
    assert info['start_ns'] == T0 and info['end_ns'] == T0 + 300_000_001


def test_custom_type_hash_matches_rosidl(tmp_path):
    """The schema hash we compute from the .msg equals the one rosidl generated at build."""
    share = package_share_directory('real2sim2real_msgs')
    rosidl = json.loads((share / 'msg' / 'PhysicalParameterSet.json').read_text())
    want = next(h['hash_string'] for h in rosidl['type_hashes'] if h['type_name'] == PPS)
    _text, rihs01 = MessageTypes().definition(PPS)
    assert rihs01 == want


def test_topic_filter_and_order(tmp_path):
    with BagWriter(tmp_path / 'b') as bag:
        bag.add_topic('/a', 'std_msgs/msg/Float64')
        bag.add_topic('/b', 'std_msgs/msg/String')
        for i in range(10):
            bag.write('/a', 100 + 2 * i, {'data': float(i)})
            bag.write('/b', 101 + 2 * i, {'data': f'm{i}'})
    with BagReader(tmp_path / 'b') as reader:
        stamps = [ts for _t, _ty, ts, _r in reader.messages()]
        assert stamps == list(range(100, 120))
        only_b = [to_dict(reader.deserialize(r, ty))['data']
                  for _t, ty, _ts, r in reader.messages(['/b'])]
        assert only_b == [f'm{i}' for i in range(10)]
        with pytest.raises(BagError, match='no topic'):
            list(reader.messages(['/nope']))


def test_reads_sqlite3_bags_written_by_others(tmp_path):
    """A rosbag2 v8 sqlite3 bag (QoS as a YAML string) written by plain rosbags."""
    store = get_typestore(Stores.ROS2_HUMBLE)
    Float64 = store.types['std_msgs/msg/Float64']
    path = tmp_path / 'their_bag'
    qos_yaml = yaml.safe_dump([{
        'history': 1, 'depth': 10, 'reliability': 1, 'durability': 2,
        'deadline': {'sec': 0, 'nsec': 0}, 'lifespan': {'sec': 0, 'nsec': 0},
        'liveliness': 1, 'liveliness_lease_duration': {'sec': 0, 'nsec': 0},
        'avoid_ros_namespace_conventions': False}])
    from rosbags.rosbag2.metadata import parse_qos
    with Writer(path, version=8) as writer:     # sqlite3 is rosbags' default storage
        conn = writer.add_connection('/x', 'std_msgs/msg/Float64', typestore=store,
                                     offered_qos_profiles=parse_qos(qos_yaml))
        for i in range(5):
            writer.write(conn, 10 + i, store.serialize_cdr(Float64(data=i * 0.5), conn.msgtype))
    assert bag_info(path)['storage'] == 'sqlite3'
    with BagReader(path) as reader:
        assert reader.topics['/x'].count == 5
        assert reader.topics['/x'].offered_qos[0]['durability'] == 'volatile'
        got = [(ts, reader.deserialize(r, ty).data) for _t, ty, ts, r in reader.messages()]
    assert got == [(10 + i, i * 0.5) for i in range(5)]


def test_own_sqlite3_bag_round_trip(tmp_path):
    with BagWriter(tmp_path / 'lite', storage='sqlite3') as bag:
        bag.add_topic('/js', JS)
        bag.write('/js', 5, joint_state(3))
    assert (tmp_path / 'lite' / 'lite_0.db3').is_file()
    with BagReader(tmp_path / 'lite') as reader:
        [(_t, ty, ts, raw)] = list(reader.messages())
        assert ts == 5 and to_dict(reader.deserialize(raw, ty)) == joint_state(3)


def test_failing_writer_leaves_no_bag_under_final_name(tmp_path):
    path = tmp_path / 'broken'
    with pytest.raises(RuntimeError, match='camera died'):
        with BagWriter(path) as bag:
            bag.add_topic('/js', JS)
            bag.write('/js', 1, joint_state(0))
            raise RuntimeError('camera died')
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []      # the hidden partial folder is gone too


def test_killed_writer_leaves_no_bag_under_final_name(tmp_path):
    """SIGKILL mid-recording: only the hidden partial folder may remain, never the bag."""
    path = tmp_path / 'killed'
    script = textwrap.dedent(f"""
        import sys, time
        from real2sim2real_ros.core.bag_io import BagWriter
        bag = BagWriter({str(path)!r}).open()
        bag.add_topic('/f', 'std_msgs/msg/Float64')
        for i in range(100):
            bag.write('/f', i, {{'data': float(i)}})
        print('written', flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, '-c', script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == 'written'
        assert not path.exists()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not path.exists()
    assert [p.name for p in tmp_path.iterdir()] == ['.killed.partial']
    with pytest.raises(BagError):
        BagReader(path)


def test_errors_are_clear(tmp_path):
    with pytest.raises(BagError, match='no such bag'):
        BagReader(tmp_path / 'missing')
    (tmp_path / 'exists').mkdir()
    with pytest.raises(BagError, match='exists already'):
        BagWriter(tmp_path / 'exists').open()
    with BagWriter(tmp_path / 'b') as bag:
        with pytest.raises(MessageTypeError, match='no_such_pkg'):
            bag.add_topic('/x', 'no_such_pkg/msg/Thing')
        bag.add_topic('/js', JS)
        with pytest.raises(MessageTypeError, match='JointState has no field'):
            bag.write('/js', 1, {'positions': [1.0]})
        with pytest.raises(MessageTypeError, match=r'Header\.frame_id: expected a string'):
            bag.write('/js', 1, {'header': {'frame_id': 3}})
        with pytest.raises(BagError, match='call add_topic first'):
            bag.write_raw('/other', 1, b'\x00\x01\x00\x00')
        with pytest.raises(BagError, match='must be absolute'):
            bag.add_topic('relative', JS)


def test_generic_types_from_an_ament_share_folder(tmp_path, monkeypatch):
    """Any 'pkg/msg/Name' outside the rosbags store is loaded from <prefix>/share/pkg/msg,
    with its dependencies (same package and standard ones)."""
    prefix = tmp_path / 'prefix'
    (prefix / 'share/ament_index/resource_index/packages').mkdir(parents=True)
    (prefix / 'share/ament_index/resource_index/packages/demo_msgs').write_text('')
    msg_dir = prefix / 'share/demo_msgs/msg'
    msg_dir.mkdir(parents=True)
    (msg_dir / 'Probe.msg').write_text('# one probe\nstring joint\nfloat64[3] gains\n')
    (msg_dir / 'ProbeSet.msg').write_text(
        'std_msgs/Header header\nProbe[] probes\nuint8 KIND_STEP=1\nuint8 kind\n')
    monkeypatch.setenv('AMENT_PREFIX_PATH', str(prefix))
    value = {'header': {'frame_id': 'world'}, 'kind': 1,
             'probes': [{'joint': 'elbow', 'gains': [1.0, 2.0, 3.5]}]}
    with BagWriter(tmp_path / 'demo') as bag:
        bag.add_topic('/probes', 'demo_msgs/msg/ProbeSet')
        bag.write('/probes', 42, value)
    monkeypatch.delenv('AMENT_PREFIX_PATH')   # the reader needs only the bag's own schemas
    with BagReader(tmp_path / 'demo') as reader:
        [(_t, ty, ts, raw)] = list(reader.messages())
        got = to_dict(reader.deserialize(raw, ty))
    assert ts == 42 and got['probes'] == value['probes'] and got['kind'] == 1
    assert got['header']['frame_id'] == 'world'


def test_cli_info(tmp_path, capsys):
    from real2sim2real_ros.cli.bag_cli import cmd_info
    with BagWriter(tmp_path / 'b') as bag:
        bag.add_topic('/js', JS)
        for i in range(3):
            bag.write('/js', T0 + i * 500_000_000, joint_state(i))
    assert cmd_info(Namespace(bag=str(tmp_path / 'b'), json=False)) == 0
    out = capsys.readouterr().out
    assert 'Storage id:        mcap' in out and 'Duration:          1.000s' in out
    assert '/js' in out and JS in out and 'Messages:          3' in out
    assert cmd_info(Namespace(bag=str(tmp_path / 'b'), json=True)) == 0
    assert json.loads(capsys.readouterr().out)['topics']['/js']['count'] == 3
    assert cmd_info(Namespace(bag=str(tmp_path / 'nope'), json=False)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'no such bag' in err[0]


def test_timestamps_must_be_ints(tmp_path):
    with BagWriter(tmp_path / 'b') as bag:
        bag.add_topic('/f', 'std_msgs/msg/Float64')
        with pytest.raises(BagError, match='timestamp_ns'):
            bag.write('/f', 1.5, {'data': 1.0})
        with pytest.raises(BagError, match='timestamp_ns'):
            bag.write('/f', -1, {'data': 1.0})
    with BagReader(tmp_path / 'b') as reader:
        assert reader.message_count == 0 and reader.duration_ns == 0


def test_stream_gaps_find_the_lost_messages_of_a_fixed_rate_stream():
    """100 Hz stamps with 23 messages lost after 1.0 s and 3 after 2.5 s (the executor's
    bag at load 4 had a 0.24 s and a 0.04 s gap): two gaps, at those places; jitter of a
    third of the period is no gap."""
    from real2sim2real_ros.core.bag_io import stream_gaps
    t = np.arange(400) * 0.01 + np.random.default_rng(0).uniform(-0.0015, 0.0015, 400)
    lost = np.r_[101:124, 251:254]
    kept = np.delete(t, lost)
    dt, at = stream_gaps(kept)
    assert dt == pytest.approx(0.01, rel=0.05)
    assert at.tolist() == [100, 227]
    assert np.round(np.diff(kept)[at] / dt).tolist() == [24.0, 4.0]
    assert stream_gaps(t)[1].size == 0
    assert stream_gaps([1.0])[1].size == 0
