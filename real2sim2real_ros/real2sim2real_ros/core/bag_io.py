"""rosbag2 bags without ``ros2 bag``: write and read standard rosbag2 folders with ``rosbags``.

Bags are written as rosbag2 metadata version 9 with MCAP storage (what ``ros2 bag record``
writes on Jazzy/Kilted), so ``ros2 bag play``/``info`` read them; sqlite3 and MCAP bags written
by ``ros2 bag`` are read back. Message definitions come from the rosbags typestore for
standard types and, for anything else (``real2sim2real_msgs``...), from the ``.msg``/``.idl``
files in the package's ament share folder, dependencies included.

A bag is written into a hidden ``.<name>.partial`` folder and renamed onto its final name
only when it is closed cleanly: a killed or failing writer never leaves a half bag under the
final name. ROS-free: no rclpy here.
"""
from __future__ import annotations

import keyword
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path

import numpy as np
from rosbags.interfaces import MessageDefinitionFormat, Nodetype, Qos
from rosbags.rosbag2 import (
    CompressionFormat,
    CompressionMode,
    Reader,
    ReaderError,
    StoragePlugin,
    Writer,
    WriterError,
)
from rosbags.rosbag2.metadata import dump_qos_v9, parse_qos
from rosbags.rosbag2.storage_mcap import McapWriter
from rosbags.rosbag2.storage_sqlite3 import Sqlite3Writer
from rosbags.typesys import (
    Stores,
    TypesysError,
    get_types_from_idl,
    get_types_from_msg,
    get_typestore,
)

from .artifacts import atomic_output_path

BAG_VERSION = 9          # rosbag2 metadata version of Jazzy/Kilted; rosbags writes 8 or 9
STORAGES = ('mcap', 'sqlite3')
_IDL_SEPARATOR = '=' * 80 + '\n'


class BagError(Exception):
    """A bag cannot be written or read; the message names the bag, topic or type."""


class MessageTypeError(BagError):
    """A message type has no definition we can find, or a message does not fit its type."""


# --------------------------------------------------------------------------- type store

def newest_store() -> Stores:
    """The newest ROS 2 store this rosbags knows (Kilted on 0.11.9)."""
    for name in ('ROS2_KILTED', 'ROS2_JAZZY', 'LATEST'):
        if hasattr(Stores, name):
            return getattr(Stores, name)
    return Stores.LATEST  # pragma: no cover - every rosbags has LATEST


def package_share_directory(package: str) -> Path | None:
    """The ament share folder of ``package``: the ament index first, then this interpreter's
    prefix (message wheels install ``share/<pkg>`` there, outside ``AMENT_PREFIX_PATH``)."""
    prefixes = [p for p in os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep) if p]
    prefixes.append(sys.prefix)
    for prefix in prefixes:
        share = Path(prefix) / 'share' / package
        marker = Path(prefix) / 'share' / 'ament_index' / 'resource_index' / 'packages' / package
        if marker.exists() or (share / 'package.xml').is_file():
            return share
    return None


def _split_type(msgtype: str) -> tuple[str, str, str]:
    parts = msgtype.split('/')
    if len(parts) == 2:          # 'pkg/Name' (ROS 1 style) -> 'pkg/msg/Name'
        parts = [parts[0], 'msg', parts[1]]
    if len(parts) != 3 or not all(parts):
        raise MessageTypeError(f'malformed message type {msgtype!r}; expected "pkg/msg/Name"')
    return parts[0], parts[1], parts[2]


def _referenced_types(typesdict) -> set[str]:
    """Names of the message types the fields of ``typesdict`` refer to."""
    out = set()
    for _consts, field_list in typesdict.values():
        for _name, desc in field_list:
            node, arg = desc
            if node in (Nodetype.ARRAY, Nodetype.SEQUENCE):
                node, arg = arg[0]
            if node == Nodetype.NAME:
                out.add(arg)
    return out


class MessageTypes:
    """A rosbags typestore that learns missing types on demand from ament share folders.

    ``base`` is the store to start from: the newest ROS 2 distribution by default, or
    ``Stores.EMPTY`` for a reader that takes every definition from the bag itself.
    """

    def __init__(self, base: Stores | None = None):
        self.store = get_typestore(base if base is not None else newest_store())

    def knows(self, msgtype: str) -> bool:
        """True when ``msgtype`` (e.g. 'std_msgs/msg/Float64') is registered."""
        return msgtype in self.store.fielddefs

    def ensure(self, msgtype: str) -> None:
        """Make ``msgtype`` (and every type it refers to) known, or raise MessageTypeError."""
        if self.knows(msgtype):
            return
        found: dict = {}
        pending = [msgtype]
        while pending:
            name = pending.pop()
            if name in found or self.knows(name):
                continue
            typs = self._load_from_share(name)
            found.update(typs)
            pending.extend(_referenced_types(typs))
        self.register(found)

    def register(self, typesdict) -> None:
        """Register message definitions (name -> fields); MessageTypeError when they do
        not parse."""
        try:
            self.store.register(typesdict)
        except TypesysError as exc:
            raise MessageTypeError(f'cannot register message types: {exc}') from None

    def register_definition(self, msgtype: str, fmt: MessageDefinitionFormat, text: str):
        """Register a type from a bag's embedded definition (``ros2msg`` or ``ros2idl``)."""
        if fmt == MessageDefinitionFormat.MSG:
            typs = get_types_from_msg(text, msgtype)
        elif text.startswith(_IDL_SEPARATOR + 'IDL: '):
            typs = {}
            for block in text.split(_IDL_SEPARATOR)[1:]:
                typs.update(get_types_from_idl(block.split('\n', 1)[1]))
        else:
            typs = get_types_from_idl(text)
        self.register(typs)

    def definition(self, msgtype: str) -> tuple[str, str]:
        """(ros2msg definition text with dependencies, RIHS01 hash) for a bag's schema."""
        self.ensure(msgtype)
        text, _md5 = self.store.generate_msgdef(msgtype, ros_version=2)
        return text, self.store.hash_rihs01(msgtype)

    def _load_from_share(self, msgtype: str):
        pkg, kind, name = _split_type(msgtype)
        share = package_share_directory(pkg)
        if share is None:
            raise MessageTypeError(
                f'no definition for {msgtype!r}: package {pkg!r} is neither in the rosbags '
                f'store nor in any ament share folder (AMENT_PREFIX_PATH or {sys.prefix})')
        msg_file, idl_file = share / kind / f'{name}.msg', share / kind / f'{name}.idl'
        try:
            if msg_file.is_file():
                typs = get_types_from_msg(msg_file.read_text(), f'{pkg}/{kind}/{name}')
            elif idl_file.is_file():
                typs = get_types_from_idl(idl_file.read_text())
            else:
                raise MessageTypeError(f'no definition for {msgtype!r}: neither {msg_file} '
                                       f'nor {idl_file} exists')
        except TypesysError as exc:
            raise MessageTypeError(f'cannot parse the definition of {msgtype!r}: {exc}') from None
        if f'{pkg}/{kind}/{name}' not in typs:
            raise MessageTypeError(f'{msg_file.parent} does not define {msgtype!r}')
        return typs

    # -- building and flattening messages -------------------------------------------------

    def build(self, msgtype: str, value):
        """A rosbags message of ``msgtype`` from a (nested) dict; missing fields take ROS
        defaults (0, '', empty). A rosbags message of the right type passes through."""
        self.ensure(msgtype)
        if getattr(value, '__msgtype__', None) == msgtype:
            return value
        if not isinstance(value, Mapping):
            raise MessageTypeError(
                f'{msgtype}: expected a dict or a {msgtype} message, got {type(value).__name__}')
        _consts, field_list = self.store.fielddefs[msgtype]
        names = {n for n, _ in field_list}
        if unknown := sorted(set(value) - names):
            raise MessageTypeError(f'{msgtype} has no field(s) {unknown}; fields: {sorted(names)}')
        kwargs = {}
        for name, desc in field_list:
            try:
                kwargs[_py_name(name)] = self._build_field(desc, value.get(name))
            except MessageTypeError as exc:
                raise MessageTypeError(f'{msgtype}.{name}: {exc}') from None
            except (TypeError, ValueError, OverflowError) as exc:
                raise MessageTypeError(f'{msgtype}.{name}: {exc}') from None
        return self.store.types[msgtype](**kwargs)

    def _build_field(self, desc, value):
        node, arg = desc
        if node == Nodetype.BASE:
            base = arg[0]
            if value is None:
                return '' if base in ('string', 'wstring') else (False if base == 'bool' else
                                                                  _NUMPY[base](0).item())
            if base in ('string', 'wstring'):
                if not isinstance(value, str):
                    raise MessageTypeError(f'expected a string, got {type(value).__name__}')
                return value
            if base == 'bool':
                return bool(value)
            return _NUMPY[base](value).item()
        if node == Nodetype.NAME:
            return self.build(arg, {} if value is None else value)
        (inner_node, inner_arg), size = arg
        if inner_node == Nodetype.BASE and inner_arg[0] in _NUMPY:
            dtype = _NUMPY[inner_arg[0]]
            if value is None:
                arr = np.zeros(size if node == Nodetype.ARRAY else 0, dtype=dtype)
            else:
                arr = np.asarray(value, dtype=dtype).reshape(-1)
            if node == Nodetype.ARRAY and len(arr) != size:
                raise MessageTypeError(f'expected {size} elements, got {len(arr)}')
            return arr
        items = [] if value is None else list(value)
        if node == Nodetype.ARRAY and value is None:
            items = [None] * size
        if node == Nodetype.ARRAY and len(items) != size:
            raise MessageTypeError(f'expected {size} elements, got {len(items)}')
        return [self._build_field((inner_node, inner_arg), v) for v in items]

    def serialize(self, msgtype: str, value) -> bytes:
        """CDR bytes of ``value`` (a message or a dict of its fields) as ``msgtype``."""
        msg = self.build(msgtype, value)
        return bytes(self.store.serialize_cdr(msg, msgtype))

    def deserialize(self, raw: bytes | memoryview, msgtype: str):
        """The message of type ``msgtype`` in CDR bytes ``raw``; MessageTypeError on bytes that do
        not decode."""
        self.ensure(msgtype)
        try:
            return self.store.deserialize_cdr(raw, msgtype)
        except Exception as exc:  # noqa: BLE001 - rosbags raises several kinds on bad bytes
            if 'size mismatch' in str(exc):
                # rclpy/Fast CDR (Kilted) may append a few padding bytes after the payload,
                # which rosbags' strict length check rejects; the payload itself is fine.
                return self._deserialize_ignoring_tail(raw, msgtype)
            raise MessageTypeError(f'cannot deserialize {msgtype}: {exc}') from None

    def _deserialize_ignoring_tail(self, raw, msgtype: str):
        msgdef = self.store.get_msgdef(msgtype)
        func = msgdef.deserialize_cdr_le if raw[1] else msgdef.deserialize_cdr_be
        try:
            message, _pos = func(memoryview(raw)[4:], 0, msgdef.cls, self.store)
        except Exception as exc:  # noqa: BLE001
            raise MessageTypeError(f'cannot deserialize {msgtype}: {exc}') from None
        return message


_NUMPY = {
    'bool': np.bool_, 'byte': np.uint8, 'char': np.uint8,
    'int8': np.int8, 'int16': np.int16, 'int32': np.int32, 'int64': np.int64,
    'uint8': np.uint8, 'uint16': np.uint16, 'uint32': np.uint32, 'uint64': np.uint64,
    'float32': np.float32, 'float64': np.float64,
}


def _py_name(name: str) -> str:
    return f'{name}_' if keyword.iskeyword(name) else name


def _ros_name(py_name: str) -> str:
    return py_name[:-1] if py_name.endswith('_') and keyword.iskeyword(py_name[:-1]) else py_name


def to_dict(msg):
    """A rosbags message as plain Python (dicts, lists, numbers, strings), for comparison,
    JSON and logs. Arrays become lists; float values stay exact."""
    if is_dataclass(msg) and not isinstance(msg, type):
        return {_ros_name(f.name): to_dict(getattr(msg, f.name))
                for f in fields(msg) if not f.name.startswith('__')}
    if isinstance(msg, np.ndarray):
        return msg.tolist()
    if isinstance(msg, (list, tuple)):
        return [to_dict(v) for v in msg]
    return msg


# --------------------------------------------------------------------------- QoS

def qos_from_yaml(profiles) -> list[Qos]:
    """rosbags QoS list from what rosbag2 stores as ``offered_qos_profiles``: a YAML string
    (metadata v8), a list of dicts (v9), a list of rosbags ``Qos``, or nothing."""
    if not profiles:
        return []
    if isinstance(profiles, (list, tuple)) and all(isinstance(p, Qos) for p in profiles):
        return list(profiles)
    try:
        return parse_qos(profiles)
    except Exception as exc:  # noqa: BLE001 - parse_qos raises ReaderError/KeyError/TypeError
        raise BagError(f'offered_qos_profiles is not a rosbag2 QoS list: {exc}') from None


def qos_to_dicts(profiles: Iterable[Qos]) -> list[dict]:
    """rosbag2 v9 form: ``[{history: keep_last, depth: 10, reliability: reliable, ...}]``."""
    return dump_qos_v9(list(profiles))


# --------------------------------------------------------------------------- writer

def _storage_file_writer(base, suffix: str, file_stem: str):
    """A rosbags storage writer that names its file ``<file_stem><suffix>`` instead of after
    the (temporary) bag folder, so the bag keeps its name after the final rename."""

    class Named(base):
        def __init__(self, path: Path, compression: CompressionMode):
            if base is McapWriter:
                super().__init__(path, compression)
                # The file is open; renaming it keeps the handle (POSIX) and fixes the name
                # that close() writes into metadata.yaml.
                target = path / f'{file_stem}{suffix}'
                os.replace(self.path, target)
                self.path = target
            else:
                # sqlite keeps using the file name (journal), so open it under the final name.
                self._open_named(path / f'{file_stem}{suffix}', compression)

        def _open_named(self, file: Path, compression: CompressionMode):
            import sqlite3
            if compression == CompressionMode.STORAGE:
                raise WriterError('SQLITE3 writer does not support storage-side compression.')
            self.path = file
            self.conn = sqlite3.connect(f'file:{self.path}', uri=True)
            _ = self.conn.executescript(self.SQLITE_SCHEMA)
            self.cursor = self.conn.cursor()

    return Named


@dataclass
class _Topic:
    connection: object
    msgtype: str


class BagWriter:
    """Write a rosbag2 bag (MCAP by default) atomically.

    ::

        with BagWriter('out/run_1') as bag:
            bag.add_topic('/joint_states', 'sensor_msgs/msg/JointState')
            bag.write('/joint_states', t_ns, {'name': ['j1'], 'position': [0.1]})

    ``compress`` turns on MCAP chunk compression (zstd), which ``ros2 bag`` reads natively.
    """

    def __init__(self, path: str | os.PathLike, *, compress: bool = False,
                 storage: str = 'mcap', types: MessageTypes | None = None):
        if storage not in STORAGES:
            raise BagError(f'storage must be one of {STORAGES}, got {storage!r}')
        if compress and storage != 'mcap':
            raise BagError('compress=True needs storage "mcap" (sqlite3 has no chunk compression)')
        self.path = Path(path)
        self.compress = compress
        self.storage = storage
        self.types = types or MessageTypes()
        self._topics: dict[str, _Topic] = {}
        self._atomic = None
        self._writer: Writer | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def open(self) -> BagWriter:
        """Open a new bag at ``path`` (BagError if it exists or is open); returns self."""
        if self._writer is not None:
            raise BagError(f'{self.path}: already open')
        if self.path.exists():
            raise BagError(f'{self.path} exists already; a bag is never overwritten')
        self._atomic = atomic_output_path(self.path)
        tmp = self._atomic.__enter__()
        try:
            writer = Writer(tmp, version=BAG_VERSION, storage_plugin=(
                StoragePlugin.MCAP if self.storage == 'mcap' else StoragePlugin.SQLITE3))
            stem = f'{self.path.name}_0'     # rosbag2's own file naming
            writer.STORAGE_PLUGINS = {
                StoragePlugin.MCAP: _storage_file_writer(McapWriter, '.mcap', stem),
                StoragePlugin.SQLITE3: _storage_file_writer(Sqlite3Writer, '.db3', stem),
            }
            if self.compress:
                writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
            writer.open()
        except BaseException as exc:
            self._atomic.__exit__(type(exc), exc, exc.__traceback__)
            self._atomic = None
            if isinstance(exc, (WriterError, OSError)):
                raise BagError(f'{self.path}: {exc}') from None
            raise
        self._writer = writer
        return self

    def close(self) -> Path:
        """Finish the bag (index, metadata.yaml) and move it onto its final name."""
        if self._writer is None:
            raise BagError(f'{self.path}: not open')
        writer, self._writer = self._writer, None
        try:
            writer.close()
        except BaseException as exc:
            self._abort_atomic(exc)
            if isinstance(exc, OSError):   # a full disk, a lost mount: nothing is left behind
                raise BagError(f'{self.path}: closing the bag failed ({exc}); the bag is '
                               f'dropped') from None
            raise
        atomic, self._atomic = self._atomic, None
        atomic.__exit__(None, None, None)
        return self.path

    def abort(self, exc: BaseException | None = None) -> None:
        """Drop the partial bag; nothing appears under the final name."""
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.abort()
            except Exception:  # noqa: BLE001 - the bag is being thrown away anyway
                pass
        self._abort_atomic(exc or BagError(f'{self.path}: aborted'))

    def _abort_atomic(self, exc: BaseException):
        atomic, self._atomic = self._atomic, None
        if atomic is not None:
            atomic.__exit__(type(exc), exc, exc.__traceback__)

    def __enter__(self) -> BagWriter:
        return self.open()

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None:
            self.close()
        else:
            self.abort(exc)
        return False

    @property
    def is_open(self) -> bool:
        """True between open() and close()."""
        return self._writer is not None

    # -- topics and messages --------------------------------------------------------------

    def add_topic(self, topic: str, msgtype: str, qos_profiles=None) -> None:
        """Declare ``topic``; ``qos_profiles`` is the publishers' offered QoS as rosbag2 stores
        it (YAML string or list of dicts), which ``ros2 bag play`` reuses."""
        writer = self._require_open()
        if topic in self._topics:
            if self._topics[topic].msgtype != msgtype:
                raise BagError(f'topic {topic!r} is already in the bag as '
                               f'{self._topics[topic].msgtype}, not {msgtype}')
            return
        if not topic.startswith('/'):
            raise BagError(f'topic {topic!r} must be absolute (start with "/")')
        msgdef, rihs01 = self.types.definition(msgtype)
        connection = writer.add_connection(
            topic, msgtype, msgdef=msgdef, rihs01=rihs01,
            offered_qos_profiles=qos_from_yaml(qos_profiles))
        self._topics[topic] = _Topic(connection, msgtype)

    def write_raw(self, topic: str, timestamp_ns: int, cdr: bytes | memoryview) -> None:
        """Write already-serialised CDR bytes on ``topic`` (added before) at ``timestamp_ns``."""
        writer = self._require_open()
        entry = self._topics.get(topic)
        if entry is None:
            raise BagError(f'topic {topic!r} was not added to {self.path} (call add_topic first)')
        if not isinstance(timestamp_ns, (int, np.integer)) or timestamp_ns < 0:
            raise BagError(
                f'{topic}: timestamp_ns must be a non-negative int, got {timestamp_ns!r}')
        try:
            writer.write(entry.connection, int(timestamp_ns), cdr)
        except OSError as exc:
            raise BagError(f'{self.path}: writing {topic} failed: {exc}') from None

    def write(self, topic: str, timestamp_ns: int, msg) -> None:
        """Serialise ``msg`` (a message or a dict of its fields) and write it on ``topic`` at
        ``timestamp_ns``."""
        entry = self._topics.get(topic)
        if entry is None:
            raise BagError(f'topic {topic!r} was not added to {self.path} (call add_topic first)')
        self.write_raw(topic, timestamp_ns, self.types.serialize(entry.msgtype, msg))

    def _require_open(self) -> Writer:
        if self._writer is None:
            raise BagError(f'{self.path}: bag is not open (use "with BagWriter(...)" or open())')
        return self._writer


# --------------------------------------------------------------------------- reader

@dataclass(frozen=True)
class TopicSummary:
    """One topic of a bag: name, message type, message count and its offered QoS profiles."""
    name: str
    msgtype: str
    count: int
    offered_qos: list     # rosbag2 v9 dicts; empty when the bag has none


class BagReader:
    """Read a rosbag2 bag (folder with metadata.yaml, or a lone ``.mcap``/``.db3`` file).

    Types are taken from the bag's embedded definitions; topics without one fall back to the
    rosbags store and ament share folders.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.exists():
            raise BagError(f'no such bag: {self.path}')
        self._reader = _open_reader(self.path)
        self.types = MessageTypes(Stores.EMPTY)
        self._fallback: MessageTypes | None = None
        self._register_bag_types()

    def _register_bag_types(self):
        for conn in self._reader.connections:
            if self.types.knows(conn.msgtype):
                continue
            if conn.msgdef.format != MessageDefinitionFormat.NONE and conn.msgdef.data:
                try:
                    self.types.register_definition(conn.msgtype, conn.msgdef.format,
                                                   conn.msgdef.data)
                    continue
                except (MessageTypeError, TypesysError, ValueError):
                    pass   # an unparsable embedded definition: fall back to our own store
            self._copy_from_fallback(conn.msgtype)

    def _copy_from_fallback(self, msgtype: str):
        if self._fallback is None:
            self._fallback = MessageTypes()
        try:
            self._fallback.ensure(msgtype)
        except MessageTypeError:
            return   # listing and raw reading still work; deserialize() reports the problem
        wanted, pending = {}, [msgtype]
        while pending:
            name = pending.pop()
            if name in wanted or self.types.knows(name):
                continue
            wanted[name] = self._fallback.store.fielddefs[name]
            pending.extend(_referenced_types({name: wanted[name]}))
        self.types.register(wanted)

    # -- context --------------------------------------------------------------------------

    def close(self):
        """Close the bag (a no-op when it is closed already)."""
        if self._reader.is_open:
            self._reader.close()

    def __enter__(self) -> BagReader:
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    # -- contents -------------------------------------------------------------------------

    @property
    def topics(self) -> dict[str, TopicSummary]:
        """Topic name -> TopicSummary of every topic in the bag."""
        out = {}
        for conn in self._reader.connections:
            prev = out.get(conn.topic)
            qos = qos_to_dicts(getattr(conn.ext, 'offered_qos_profiles', []) or [])
            if prev is None:
                out[conn.topic] = TopicSummary(conn.topic, conn.msgtype, conn.msgcount, qos)
            else:
                out[conn.topic] = TopicSummary(conn.topic, prev.msgtype,
                                               prev.count + conn.msgcount, prev.offered_qos or qos)
        return out

    @property
    def message_count(self) -> int:
        """Number of messages in the bag, all topics."""
        return self._reader.message_count

    @property
    def start_ns(self) -> int | None:
        """Timestamp (ns) of the first message, or None for an empty bag."""
        return self._reader.start_time if self._reader.message_count else None

    @property
    def end_ns(self) -> int | None:
        """Timestamp of the last message (inclusive; rosbags' end_time is one past it)."""
        return self._reader.end_time - 1 if self._reader.message_count else None

    @property
    def duration_ns(self) -> int:
        """End minus start timestamp in ns (0 for an empty bag)."""
        return (self.end_ns - self.start_ns) if self._reader.message_count else 0

    @property
    def storage(self) -> str:
        """The bag's storage format: 'mcap' or 'sqlite3'."""
        storages = getattr(self._reader.storage, 'storages', None)
        if storages:
            return 'mcap' if type(storages[0]).__name__.lower().startswith('mcap') else 'sqlite3'
        return 'mcap' if self.path.suffix == '.mcap' else 'sqlite3'

    @property
    def files(self) -> list[Path]:
        """The bag's data files (.mcap / .db3 / .zstd), sorted."""
        if self.path.is_file():
            return [self.path]
        return sorted(p for p in self.path.iterdir() if p.suffix in ('.mcap', '.db3', '.zstd'))

    def messages(self, topics: Iterable[str] | None = None,
                 start_ns: int | None = None, stop_ns: int | None = None
                 ) -> Iterator[tuple[str, str, int, bytes]]:
        """(topic, msgtype, timestamp_ns, raw_cdr) in timestamp order."""
        conns = self._reader.connections
        if topics is not None:
            wanted = set(topics)
            if missing := sorted(wanted - {c.topic for c in conns}):
                raise BagError(f'{self.path} has no topic(s) {missing}; '
                               f'it has {sorted({c.topic for c in conns})}')
            conns = [c for c in conns if c.topic in wanted]
            if not conns:
                return
        try:
            for conn, ts, raw in self._messages(conns, start_ns, stop_ns):
                yield conn.topic, conn.msgtype, ts, raw
        except BagError:
            raise
        except Exception as exc:  # noqa: BLE001 - rosbags raises many kinds on corrupt data
            raise BagError(f'invalid bag {self._file_label()}: reading its messages failed: '
                           f'{type(exc).__name__}: {exc} (truncated or corrupt file?)') from None

    def _messages(self, conns, start_ns, stop_ns):
        """rosbags matches metadata.yaml's topics to each storage file's channels by topic,
        type AND offered QoS, and silently skips a topic whose QoS differ between the two
        (a bag edited or written by another tool). Match by topic and type only: the data
        in the file is what counts."""
        storage = self._reader.storage
        storages = getattr(storage, 'storages', None)
        if storages is None:     # a lone storage file: its own channels, nothing to match
            yield from self._reader.messages(conns, start=start_ns, stop=stop_ns)
            return
        wanted = {(c.topic, c.msgtype): c for c in conns}
        per_message_zstd = getattr(storage.metadata, 'compression_mode', '') == 'message'
        for file_storage in storages:
            file_conns = [x for x in file_storage.connections
                          if (x.topic, x.msgtype) in wanted]
            if not file_conns:
                continue
            for fconn, ts, raw in file_storage.messages(file_conns, start_ns, stop_ns):
                if per_message_zstd:
                    from rosbags.rosbag2.reader import zstd
                    raw = zstd.decompress(raw)
                yield wanted[(fconn.topic, fconn.msgtype)], ts, raw

    def _file_label(self) -> str:
        files = self.files
        return str(files[0]) if len(files) == 1 else str(self.path)

    def deserialize(self, raw: bytes | memoryview, msgtype: str):
        """The message of type ``msgtype`` in CDR bytes ``raw`` (types the bag does not define come
        from the fallback store)."""
        if not self.types.knows(msgtype):
            self._copy_from_fallback(msgtype)
        return self.types.deserialize(raw, msgtype)


def _storage_files(folder: Path) -> list[Path]:
    return sorted(folder.glob('*.mcap')) or sorted(folder.glob('*.db3'))


def _open_reader(path: Path) -> Reader:
    if path.is_dir() and not (path / 'metadata.yaml').is_file():
        # A bag folder without metadata.yaml (copied without it, or a recorder killed before
        # writing it): ros2 bag reads the storage file; so do we (MCAP carries its own
        # schemas and channels).
        files = _storage_files(path)
        if len(files) == 1:
            return _open_reader(files[0])
        raise BagError(f'cannot read bag {path}: no metadata.yaml and '
                       f'{len(files) or "no"} storage files (.mcap/.db3)' +
                       (f': {[f.name for f in files]}; open one of them' if files else ''))
    try:
        reader = Reader(path)
        reader.open()
        return reader
    except ReaderError as exc:
        # A newer rosbag2 metadata version than rosbags knows: the storage file alone
        # (MCAP carries its own schemas and channels) is still readable.
        files = _storage_files(path) if path.is_dir() else [path]
        if path.is_dir() and 'version' in str(exc) and len(files) == 1:
            return _open_reader(files[0])
        where = str(files[0]) if len(files) == 1 else str(path)
        raise BagError(f'invalid bag {where}: {exc}') from None
    except FileNotFoundError as exc:
        if not path.exists():
            raise BagError(f'no such bag: {path}') from None
        raise BagError(f'invalid bag {path}: {exc}') from None
    except Exception as exc:  # noqa: BLE001 - rosbags raises many kinds on corrupt files
        files = _storage_files(path) if path.is_dir() else [path]
        where = str(files[0]) if len(files) == 1 else str(path)
        raise BagError(f'invalid bag {where}: {type(exc).__name__}: {exc} (truncated or '
                       f'corrupt file?)') from None


GAP_FACTOR = 1.5   # a spacing above this x the median spacing is a gap: messages were lost


def stream_gaps(stamps) -> tuple[float, np.ndarray]:
    """(median spacing, indices ``i`` with ``stamps[i + 1] - stamps[i]`` a gap) of a stream's
    increasing stamps (s): where messages of a fixed-rate stream were lost on the way (a
    reliable keep-last-10 writer drops what a starved reader has not acknowledged). Fewer
    than 2 stamps: (0, no gaps)."""
    t = np.asarray(stamps, float)
    if t.size < 2:
        return 0.0, np.zeros(0, int)
    d = np.diff(t)
    dt = float(np.median(d))
    return dt, (np.flatnonzero(d > GAP_FACTOR * dt) if dt > 0 else np.zeros(0, int))


def bag_info(path: str | os.PathLike) -> dict:
    """Summary like ``ros2 bag info``: storage, size, duration, start/end, counts per topic."""
    with BagReader(path) as bag:
        files = bag.files
        size = sum(f.stat().st_size for f in files)
        return {
            'path': str(bag.path),
            'storage': bag.storage,
            'files': [f.name for f in files],
            'size_bytes': size,
            'duration_s': bag.duration_ns / 1e9,
            'start_ns': bag.start_ns,
            'end_ns': bag.end_ns,
            'message_count': bag.message_count,
            'topics': {
                name: {'type': t.msgtype, 'count': t.count, 'offered_qos': t.offered_qos}
                for name, t in sorted(bag.topics.items())
            },
        }
