"""Which interface stand-ins (stand_ins/<package>/) `make setup` builds.

A stand-in is built only where no real package of that name can be imported by the venv's
Python with the caller's environment (PYTHONPATH of a sourced ROS underlay included). A copy
found under this workspace's own ``install/`` or ``build/`` is a stand-in built earlier, not a
real package, and does not count.

Usage: ``python scripts/stand_ins.py [--root DIR]``: prints the packages to build, one per
line, on stdout, and one line per package saying what was decided (and why) on stderr.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path


def stand_in_names(root: Path) -> list[str]:
    """The stand-ins the repository holds: every stand_ins/<name>/package.xml."""
    return sorted(p.parent.name for p in (root / 'stand_ins').glob('*/package.xml'))


def real_package_location(name: str, ignore: list[Path]) -> str | None:
    """Where an importable ``name`` lives, or None when there is none outside ``ignore``."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    places = [spec.origin] if spec.origin else list(spec.submodule_search_locations or [])
    ignored = [p.resolve() for p in ignore]
    for place in places:
        path = Path(place).resolve()
        if not any(path == root or root in path.parents for root in ignored):
            return str(path)
    return None


def decide(root: Path) -> tuple[list[str], list[str]]:
    """(stand-ins to build, one human-readable line per stand-in)."""
    ignore = [root / 'install', root / 'build']
    build, lines = [], []
    for name in stand_in_names(root):
        where = real_package_location(name, ignore)
        if where is None:
            build.append(name)
            lines.append(f'{name}: not importable here; building the wire-compatible stand-in '
                         f'stand_ins/{name}')
        else:
            lines.append(f'{name}: the real package is importable ({where}); '
                         f'stand-in not built')
    return build, lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--root', type=Path, default=Path(__file__).resolve().parent.parent)
    args = ap.parse_args(argv)
    build, lines = decide(args.root.resolve())
    for line in lines:
        print(f'[setup] {line}', file=sys.stderr)
    for name in build:
        print(name)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
