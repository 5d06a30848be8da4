"""The artifact store: one run directory, one folder per stage, each with a manifest.

Large data never rides on ROS messages: a stage writes its files here and messages carry
paths. Every write is atomic (temp file in the same folder, fsync, rename), so a crash or
a kill leaves either the old file or the new one, never half of one. A stage's
``manifest.json`` is written last: a stage folder without one is incomplete and is ignored
by resume logic.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

MANIFEST = 'manifest.json'


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file and rename (never half-written); returns the
    path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f'.{path.name}.', suffix='.tmp')
    try:
        with os.fdopen(fd, 'wb') as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns the path."""
    return atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | os.PathLike, obj) -> Path:
    """Write ``obj`` as indented, key-sorted JSON to ``path`` atomically; returns the path."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + '\n')


@contextmanager
def atomic_output_path(path: str | os.PathLike):
    """Yield a temporary path beside ``path`` for writers that want a file name (bags, PNGs);
    it is renamed onto ``path`` only when the block finishes without an exception."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f'.{path.name}.partial'
    if tmp.is_dir():
        _rmtree(tmp)
    else:
        tmp.unlink(missing_ok=True)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        if tmp.is_dir():
            _rmtree(tmp)
        else:
            tmp.unlink(missing_ok=True)
        raise


def _rmtree(p: Path):
    import shutil
    shutil.rmtree(p, ignore_errors=True)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of the file at ``path``, read in ``chunk``-byte blocks."""
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# module -> distribution names that provide it (open3d comes as open3d-cpu here)
_VERSIONED = {'numpy': ('numpy',), 'mujoco': ('mujoco',), 'open3d': ('open3d-cpu', 'open3d'),
              'torch': ('torch',), 'rosbags': ('rosbags',)}


@functools.lru_cache(maxsize=1)
def _versions() -> dict:
    """Installed versions from the package metadata, without importing anything: importing
    open3d and torch only to read __version__ took 10-30 s on a loaded machine, inside the
    first manifest write of a process (an executor's result waited for it)."""
    from importlib import metadata
    out = {'python': platform.python_version()}
    for mod, dists in _VERSIONED.items():
        for dist in dists:
            try:
                out[mod] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return dict(out)


@dataclass
class StageRecord:
    """What a stage writes into its manifest: inputs, parameters, outputs (hashed), timings."""
    stage: str
    folder: Path
    inputs: dict = field(default_factory=dict)
    parameters: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)
    results: dict = field(default_factory=dict)
    started: float = field(default_factory=time.time)

    def add_output(self, key: str, path: str | os.PathLike):
        """Record output ``key``: the resolved path and, for a file, its SHA-256."""
        p = Path(path)
        self.outputs[key] = {
            'path': str(p.resolve()),
            'sha256': sha256_file(p) if p.is_file() else None,
        }

    def finish(self) -> Path:
        """Write this stage's manifest (inputs, parameters, outputs, times) atomically; returns its
        path."""
        finished = time.time()
        return atomic_write_json(self.folder / MANIFEST, {
            'stage': self.stage,
            'inputs': self.inputs,
            'parameters': self.parameters,
            'outputs': self.outputs,
            'results': self.results,
            'started': self.started,
            'finished': finished,
            'duration_s': finished - self.started,
            'versions': dict(_versions()),
        })


class RunDirectory:
    """``<root>/<stage>[_<n>]/`` folders with manifests. Stage names are the loop's stages."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def new_stage(self, stage: str, *, inputs=None, parameters=None) -> StageRecord:
        """A fresh, uniquely numbered folder for one execution of ``stage``."""
        n = 0
        while True:
            folder = self.root / f'{stage}_{n:03d}'
            try:
                folder.mkdir(parents=True)
                break
            except FileExistsError:
                n += 1
        return StageRecord(stage, folder, inputs=dict(inputs or {}),
                           parameters=dict(parameters or {}))

    def completed(self, stage: str) -> list[Path]:
        """Manifests of completed executions of ``stage``, oldest first."""
        # `<stage>_[0-9]*`: `execute_*` must not also match `execute_policy_000`.
        return sorted(p / MANIFEST for p in self.root.glob(f'{stage}_[0-9]*')
                      if (p / MANIFEST).is_file())

    def latest(self, stage: str) -> dict | None:
        """The manifest (dict) of the newest completed run of ``stage``, or None when there
        is none."""
        done = self.completed(stage)
        return json.loads(done[-1].read_text()) if done else None
