"""Mesh files for MuJoCo: resolve URDF mesh URIs and convert formats MuJoCo cannot read.

MuJoCo reads STL, OBJ and MSH. URDFs often reference COLLADA (DAE) visuals, OBJ files with
material libraries, PLY, ... Every mesh is copied (STL) or converted with trimesh (anything
else) into a cache directory under a content-hashed name, for two reasons:
- re-runs reuse earlier conversions (same bytes -> same name);
- MuJoCo's URDF importer names mesh assets after the file's stem, so two different files with
  the same basename (``visual/base.dae`` and ``collision/base.stl``) would otherwise collide.
COLLADA's <unit meter=..> is applied; its <up_axis> is not (Z_UP is what ROS assumes).
COLLADA needs the pycollada package (trimesh's reader).
"""
from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import site
import sys
import tempfile
from pathlib import Path

import numpy as np

# Bump when the conversion changes, so cached outputs of an older converter are not reused.
_CONVERTER_VERSION = b'r2s2r-mesh-2'
# Formats passed through as copies (MuJoCo reads them natively and they carry no materials).
_NATIVE_SUFFIXES = {'.stl'}
_DAE_UNIT = re.compile(r'<unit\b[^>]*\bmeter="([0-9.eE+-]+)"')


class MeshError(ValueError):
    """A mesh reference cannot be resolved or a mesh file cannot be converted."""


def default_mesh_cache_dir() -> Path:
    """~/.cache/real2sim2real_ros/meshes (XDG_CACHE_HOME respected)."""
    root = os.environ.get('XDG_CACHE_HOME') or os.path.join(Path.home(), '.cache')
    return Path(root) / 'real2sim2real_ros' / 'meshes'


def _package_search_roots() -> list[Path]:
    """Directories that may hold ``<root>/<package>`` share folders, most specific first."""
    roots: list[Path] = []
    for var in ('ROS_PACKAGE_PATH',):
        roots += [Path(p) for p in os.environ.get(var, '').split(os.pathsep) if p]
    for prefix in os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep):
        if prefix:
            roots.append(Path(prefix) / 'share')
    # cmeel wheels (example-robot-data, pinocchio, ...) install share/ under site-packages.
    site_dirs = list(getattr(site, 'getsitepackages', lambda: [])())
    site_dirs += [p for p in sys.path if p.endswith('site-packages')]
    for sp in dict.fromkeys(site_dirs):
        roots.append(Path(sp) / 'cmeel.prefix' / 'share')
    roots += [Path(p) for p in sorted(glob.glob('/opt/ros/*/share'))]
    return [r for r in dict.fromkeys(roots) if r.is_dir()]


def find_package_dir(name: str, package_dirs: dict[str, Path] | None = None) -> Path:
    """The share directory of ROS package ``name`` (what ``package://name/`` means).

    Looks in, in order: ``package_dirs`` (explicit), the ament index (when
    ament_index_python is importable), then ROS_PACKAGE_PATH, AMENT_PREFIX_PATH/share,
    cmeel.prefix/share in site-packages (example-robot-data) and /opt/ros/*/share.
    """
    if package_dirs and name in package_dirs:
        path = Path(package_dirs[name]).expanduser()
        if not path.is_dir():
            raise MeshError(f"package_dirs['{name}'] = '{path}' is not a directory")
        return path
    try:
        from ament_index_python.packages import (
            PackageNotFoundError,
            get_package_share_directory,
        )
    except ImportError:  # pragma: no cover - depends on the environment
        pass
    else:
        try:
            return Path(get_package_share_directory(name))
        except (PackageNotFoundError, ValueError, LookupError, OSError):
            pass
    searched = _package_search_roots()
    for root in searched:
        if (root / name).is_dir():
            return root / name
    raise MeshError(
        f"unknown package '{name}': not in package_dirs, the ament index, or "
        f"{[str(r) for r in searched]}")


def resolve_mesh_uri(uri: str, *, base_dir: Path | None,
                     package_dirs: dict[str, Path] | None = None) -> Path:
    """``package://``, ``file://``, absolute or relative (to ``base_dir``) URI -> Path."""
    if uri.startswith('package://'):
        rest = uri[len('package://'):]
        pkg, _, rel = rest.partition('/')
        if not pkg or not rel:
            raise MeshError(f"malformed package URI '{uri}' (expected package://<pkg>/<path>)")
        return find_package_dir(pkg, package_dirs) / rel
    if uri.startswith('file://'):
        return Path(uri[len('file://'):])
    path = Path(uri).expanduser()
    if path.is_absolute():
        return path
    if base_dir is None:
        raise MeshError(f"relative mesh path '{uri}' but no base_dir is known "
                        "(pass base_dir= when giving the URDF as a string)")
    return Path(base_dir) / path


def _atomic_write(dst: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix='.' + dst.name, suffix='.tmp')
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _convert_with_trimesh(src: Path, dst_tmp: str) -> None:
    try:
        import trimesh
    except ImportError as exc:  # pragma: no cover - trimesh is a dependency
        raise MeshError(f"converting '{src}' needs trimesh: {exc}") from exc
    try:
        mesh = trimesh.load(str(src), force='mesh', process=False)
    except ImportError as exc:
        hint = ' (COLLADA needs the pycollada package)' if src.suffix.lower() == '.dae' else ''
        raise MeshError(f"cannot read mesh '{src}'{hint}: {exc}") from exc
    except Exception as exc:  # trimesh raises many types for bad files
        raise MeshError(f"cannot read mesh '{src}': {type(exc).__name__}: {exc}") from exc
    if mesh is None or len(getattr(mesh, 'faces', [])) == 0:
        raise MeshError(f"mesh '{src}' has no triangles")
    if src.suffix.lower() == '.dae':
        # trimesh records COLLADA's <unit meter=..> but does not apply it (ROS tools do).
        match = _DAE_UNIT.search(src.read_bytes()[:20000].decode('utf-8', 'replace'))
        if match and not np.isclose(float(match.group(1)), 1.0):
            mesh.apply_scale(float(match.group(1)))
    mesh.export(dst_tmp, file_type='stl')


def prepare_mesh(src: Path, cache_dir: Path, *, variant: str = '') -> Path:
    """A MuJoCo-readable copy of ``src`` in ``cache_dir`` with a content-hashed name.

    ``variant`` (e.g. the URDF scale) enters the hash so one file used at two scales yields
    two distinct mesh assets.
    """
    src = Path(src)
    if not src.is_file():
        raise MeshError(f"mesh file '{src}' does not exist")
    data = src.read_bytes()
    digest = hashlib.sha256(_CONVERTER_VERSION + variant.encode() + b'|' + data).hexdigest()
    cache_dir.mkdir(parents=True, exist_ok=True)
    dst = cache_dir / f'{src.stem}-{digest[:16]}.stl'
    if dst.is_file():
        return dst
    if src.suffix.lower() in _NATIVE_SUFFIXES:
        _atomic_write(dst, lambda tmp: shutil.copyfile(src, tmp))
    else:
        _atomic_write(dst, lambda tmp: _convert_with_trimesh(src, tmp))
    return dst
