"""Print the `uv pip install` arguments that carry this machine's pip settings over to uv.

make setup installs the pinned venv with uv (about 40 s from a cold cache, its bytecode
compiled, where pip takes about 3 min: parallel downloads and compiles). uv does not read pip's
configuration, so this reads it the way pip does (`pip config list`: its files and PIP_*
variables) and prints one argument per line: --index-url, --extra-index-url, --find-links
and --constraint for each value found. --index-strategy unsafe-best-match gives pip's rule
(the best match over every index) instead of uv's first-index-wins.

Usage: python scripts/uv_args.py   (run with the venv's python; exits 1 when pip's settings
cannot be read, and setup then installs with pip itself).
"""
from __future__ import annotations

import shlex
import subprocess
import sys

# pip setting -> uv option (both take one value per option; pip's may list several).
OPTIONS = {
    'index-url': '--index-url',
    'extra-index-url': '--extra-index-url',
    'find-links': '--find-links',
    'constraint': '--constraint',
}


def pip_settings(text: str) -> dict[str, list[str]]:
    """{setting: [values]} from `pip config list` lines (`scope.name='value'`): every scope
    (global, user, site, :env:) adds its values, as pip merges them."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition('=')
        if not sep:
            continue
        name = key.rsplit('.', 1)[-1]
        if name not in OPTIONS:
            continue
        for v in shlex.split(shlex.split(value)[0] if value.strip() else ''):
            if v not in out.setdefault(name, []):
                out[name].append(v)
    return out


def uv_args(settings: dict[str, list[str]]) -> list[str]:
    """The uv options for ``settings``, index strategy first."""
    args = ['--index-strategy', 'unsafe-best-match']
    for name, option in OPTIONS.items():
        for v in settings.get(name, []):
            args += [option, v]
    return args


def main() -> int:
    proc = subprocess.run([sys.executable, '-m', 'pip', 'config', 'list'],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f'pip config list failed: {proc.stderr.strip()}', file=sys.stderr)
        return 1
    print('\n'.join(uv_args(pip_settings(proc.stdout))))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
