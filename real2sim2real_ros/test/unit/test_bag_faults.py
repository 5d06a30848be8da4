"""Bags that are broken, edited or written by other tools, and a disk that fills up: a clear
error naming the file, or every message read; never a silently empty read, never a half
written artifact under a name a later stage would take as valid (ROS-free)."""
from __future__ import annotations

import errno
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

from real2sim2real_ros.core.artifacts import MANIFEST, RunDirectory, atomic_write_json
from real2sim2real_ros.core.bag_io import BagError, BagReader, BagWriter, bag_info

N = 200
QOS = [{'history': 'keep_last', 'depth': 10, 'reliability': 'reliable',
        'durability': 'volatile', 'deadline': {'sec': 0, 'nsec': 0},
        'lifespan': {'sec': 0, 'nsec': 0}, 'liveliness': 'automatic',
        'liveliness_lease_duration': {'sec': 0, 'nsec': 0},
        'avoid_ros_namespace_conventions': False}]


def _bag(path, n=N):
    with BagWriter(path) as bag:
        bag.add_topic('/chatter', 'std_msgs/msg/String')
        bag.add_topic('/joint_states', 'sensor_msgs/msg/JointState')
        for i in range(n):
            bag.write('/chatter', 1_000_000 + i, {'data': f'hello {i}'})
            bag.write('/joint_states', 1_000_000 + i,
                      {'name': ['a', 'b'], 'position': [0.01 * i, -0.5]})
    return path


def _mcap(folder):
    (f,) = sorted(pathlib.Path(folder).glob('*.mcap'))
    return f


def _cli(*args):
    return subprocess.run([sys.executable, '-m', 'real2sim2real_ros.cli.bag_cli', *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def bag(tmp_path):
    return _bag(tmp_path / 'ours')


# ----------------------------------------------------------------- truncated / corrupt

@pytest.mark.parametrize('cut', [0.5, 0.98, 0.0])
def test_truncated_mcap_is_an_invalid_bag_naming_the_file(bag, cut):
    f = _mcap(bag)
    data = f.read_bytes()
    f.write_bytes(data[:int(len(data) * cut)])
    with pytest.raises(BagError, match=f'invalid bag {f}'):
        bag_info(bag)
    res = _cli('info', str(bag))
    assert res.returncode == 2 and f'invalid bag {f}' in res.stderr, res.stderr
    assert 'Traceback' not in res.stderr


# ----------------------------------------------------------------- edited / other tools

def test_metadata_qos_that_the_file_lacks_loses_no_messages(bag, tmp_path):
    """metadata.yaml offers QoS for /chatter that the .mcap channel does not carry: rosbags
    matches on QoS too and yields nothing for it; we read (and play) every message."""
    meta_path = bag / 'metadata.yaml'
    meta = yaml.safe_load(meta_path.read_text())
    for t in meta['rosbag2_bagfile_information']['topics_with_message_count']:
        if t['topic_metadata']['name'] == '/chatter':
            t['topic_metadata']['offered_qos_profiles'] = QOS
    meta_path.write_text(yaml.safe_dump(meta))
    info = bag_info(bag)
    assert info['topics']['/chatter']['count'] == N
    with BagReader(bag) as reader:
        got = [reader.deserialize(raw, t).data for _, t, _, raw in reader.messages(['/chatter'])]
    assert got == [f'hello {i}' for i in range(N)]


def _edit_metadata(bag, edit):
    meta_path = bag / 'metadata.yaml'
    meta = yaml.safe_load(meta_path.read_text())
    for t in meta['rosbag2_bagfile_information']['topics_with_message_count']:
        edit(t['topic_metadata'])
    meta_path.write_text(yaml.safe_dump(meta))


def test_bag_play_publishes_every_message_or_fails(bag, tmp_path):
    """r2s2r bag play (a real ROS publisher per topic): the QoS-mismatched bag plays all
    400 messages (it printed 'published 0 messages' with exit 0); a bag whose metadata lists
    a topic the file does not hold exits 1 saying how many were missing."""
    _edit_metadata(bag, lambda m: m.update(offered_qos_profiles=QOS)
                   if m['name'] == '/chatter' else None)
    res = _cli('play', str(bag), '--no-progress', '-r', '50')
    assert res.returncode == 0 and f'published {2 * N} messages' in res.stderr, res.stderr
    ghost = _bag(tmp_path / 'ghost', n=20)
    _edit_metadata(ghost, lambda m: m.update(name='/ghost') if m['name'] == '/chatter'
                   else None)
    res = _cli('play', str(ghost), '--no-progress', '-r', '50')
    assert res.returncode == 1, res.stderr
    assert 'lists 40 messages on the played topics; 20 were read and published' in res.stderr


def test_bag_folder_without_metadata_yaml_is_read(bag):
    (bag / 'metadata.yaml').unlink()
    info = bag_info(bag)
    assert info['message_count'] == 2 * N
    assert info['topics']['/chatter']['count'] == N
    with BagReader(bag) as reader:
        assert sum(1 for _ in reader.messages(['/joint_states'])) == N


def test_folder_without_metadata_and_two_files_names_them(bag):
    (bag / 'metadata.yaml').unlink()
    shutil.copy(_mcap(bag), bag / 'other_0.mcap')
    with pytest.raises(BagError, match='no metadata.yaml and 2 storage files'):
        BagReader(bag)


def test_official_mcap_reader_reads_our_bags(bag):
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory
    with open(_mcap(bag), 'rb') as fh:
        reader = make_reader(fh, decoder_factories=[DecoderFactory()])
        got = [(ch.topic, schema.name, msg.log_time, dec)
               for schema, ch, msg, dec in reader.iter_decoded_messages()]
    assert len(got) == 2 * N
    chatter = [d.data for topic, _, _, d in got if topic == '/chatter']
    assert chatter == [f'hello {i}' for i in range(N)]
    js = [(t, d) for topic, _, t, d in got if topic == '/joint_states']
    assert js[7][0] == 1_000_007 and list(js[7][1].position) == pytest.approx([0.07, -0.5])
    assert {s for _, s, _, _ in got} == {'std_msgs/msg/String', 'sensor_msgs/msg/JointState'}


def _official_bag(path):
    from mcap_ros2.writer import Writer
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, 'wb') as fh:
        writer = Writer(fh)
        schema = writer.register_msgdef('std_msgs/msg/String', 'string data')
        js = writer.register_msgdef(
            'sensor_msgs/msg/JointState',
            'std_msgs/Header header\nstring[] name\nfloat64[] position\nfloat64[] velocity\n'
            'float64[] effort\n' + '=' * 80 + '\nMSG: std_msgs/Header\n'
            'builtin_interfaces/Time stamp\nstring frame_id\n' + '=' * 80 +
            '\nMSG: builtin_interfaces/Time\nint32 sec\nuint32 nanosec\n')
        for i in range(N):
            writer.write_message('/chatter', schema, {'data': f'official {i}'},
                                 log_time=5_000 + i, publish_time=5_000 + i)
            writer.write_message('/joint_states', js, {
                'header': {'stamp': {'sec': 1, 'nanosec': i}, 'frame_id': 'base'},
                'name': ['a'], 'position': [0.5 * i], 'velocity': [], 'effort': []},
                log_time=5_000 + i, publish_time=5_000 + i)
        writer.finish()
    return path


@pytest.mark.parametrize('layout', ['file', 'folder'])
def test_our_reader_reads_bags_of_the_official_writer(tmp_path, layout):
    f = _official_bag(tmp_path / 'official' / 'official_0.mcap')
    target = f if layout == 'file' else f.parent      # a folder with no metadata.yaml
    info = bag_info(target)
    assert info['message_count'] == 2 * N and info['topics']['/chatter']['count'] == N
    with BagReader(target) as reader:
        msgs = [(topic, t, reader.deserialize(raw, mt)) for topic, mt, t, raw in
                reader.messages()]
    chatter = [m.data for topic, _, m in msgs if topic == '/chatter']
    assert chatter == [f'official {i}' for i in range(N)]
    js = [m for topic, _, m in msgs if topic == '/joint_states']
    assert js[3].header.stamp.nanosec == 3 and js[3].position.tolist() == [1.5]


# ----------------------------------------------------------------- disk full

class _Disk:
    """Files opened for writing share ``free`` bytes; past it a write raises ENOSPC, as a
    full disk does (injected: a tmpfs of a given size needs root here)."""

    def __init__(self, free: int):
        self.free = free
        self.hits = 0

    def wrap(self, f):
        disk = self

        class Full(io.BufferedIOBase):
            def write(self, b):
                n = len(memoryview(b).cast('B'))
                if n > disk.free:
                    disk.hits += 1
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(f.name))
                disk.free -= n
                return f.write(b)

            def __getattr__(self, name):
                return getattr(f, name)

            def close(self):
                f.close()

            def fileno(self):
                return f.fileno()

            def flush(self):
                f.flush()

            def tell(self):
                return f.tell()

            def seek(self, *a):
                return f.seek(*a)

            def writable(self):
                return True

        return Full()


@pytest.fixture
def full_disk(monkeypatch):
    disks = []

    def install(free):
        disk = _Disk(free)
        real_open, real_fdopen = pathlib.Path.open, os.fdopen

        def path_open(self, mode='r', *a, **kw):
            f = real_open(self, mode, *a, **kw)
            return disk.wrap(f) if any(c in mode for c in 'wxa') and 'b' in mode else f

        def fdopen(fd, mode='r', *a, **kw):
            f = real_fdopen(fd, mode, *a, **kw)
            return disk.wrap(f) if any(c in mode for c in 'wxa') and 'b' in mode else f
        monkeypatch.setattr(pathlib.Path, 'open', path_open)
        monkeypatch.setattr(os, 'fdopen', fdopen)
        disks.append(disk)
        return disk
    return install


@pytest.mark.parametrize('free', [0, 3_000, 60_000])
def test_disk_full_during_a_bag_write_leaves_no_bag(tmp_path, full_disk, free):
    """Writes fail at the start, mid-recording or while closing (index, metadata.yaml):
    a BagError naming the bag and the cause; nothing under the final name, no partial."""
    disk = full_disk(free)
    path = tmp_path / 'rec'
    with pytest.raises(BagError) as info:
        _bag(path, n=2000)
    assert str(path) in str(info.value) and 'No space left on device' in str(info.value)
    assert disk.hits >= 1
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_disk_full_during_a_manifest_write_leaves_the_stage_incomplete(tmp_path, full_disk):
    runs = RunDirectory(tmp_path / 'runs')
    done = runs.new_stage('identify')
    (done.folder / 'parameters.yaml').write_text('a: 1\n')
    done.finish()
    stage = runs.new_stage('identify', inputs={'big': 'x' * 10_000})
    full_disk(1_000)
    with pytest.raises(OSError) as info:
        stage.finish()
    assert info.value.errno == errno.ENOSPC
    # No manifest (no temp file left beside it): the stage is not complete, and resume logic
    # takes the last complete one.
    assert sorted(p.name for p in stage.folder.iterdir()) == []
    assert runs.completed('identify') == [done.folder / MANIFEST]
    assert json.loads((done.folder / MANIFEST).read_text())['stage'] == 'identify'


def test_disk_full_keeps_the_previous_file_of_an_atomic_write(tmp_path, full_disk):
    target = tmp_path / 'params.json'
    atomic_write_json(target, {'v': 1})
    full_disk(5)
    with pytest.raises(OSError):
        atomic_write_json(target, {'v': 2, 'pad': 'x' * 100})
    assert json.loads(target.read_text()) == {'v': 1}
    assert [p.name for p in tmp_path.iterdir()] == ['params.json']


@pytest.mark.parametrize('delay', ['-1', 'nan', '1e9'])
def test_bag_play_refuses_a_delay_out_of_range(bag, delay):
    res = _cli('play', str(bag), '--no-progress', '--delay', delay)
    assert res.returncode == 2
    assert f'delay must be 0 .. 3600 s, got {float(delay)}' in res.stderr, res.stderr
