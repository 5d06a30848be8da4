"""``r2s2r launch``: run an XML launch file like ``ros2 launch`` does.

FILE is a path; PACKAGE FILE finds FILE in the package's share directory (launch/ first).
``--print`` prints each node's command line and exits. ``--log-level`` is passed to every
node. Exit codes: 0 clean (all nodes exited 0, or stopped by a signal), 1 a node failed,
2 bad launch file or arguments (one line on stderr; nothing started).

Where ``ros2`` and the ``launch``/``launch_ros`` Python packages exist (a lab machine), the
command execs ``ros2 launch`` instead, unless ``--runner`` is given or R2S2R_LAUNCH_RUNNER=1;
there ``--log-level L`` becomes the launch argument ``log_level:=L``.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from .ament import package_share
from .errors import EXIT_BAD_INPUT, EXIT_OK, LaunchError
from .parser import parse_launch_file
from .plan import LOG_LEVELS, format_plan
from .supervisor import run_plan

USAGE = ('usage: r2s2r launch FILE_OR_PACKAGE [FILE] [name:=value ...] [--print] '
         '[--log-level {debug,info,warn,error,fatal}] [--runner]')


class _Args:
    def __init__(self) -> None:
        self.positional: list[str] = []
        self.launch_args: dict[str, str] = {}
        self.print_only = False
        self.log_level: str | None = None
        self.force_runner = False
        self.help = False


def _parse_argv(argv: list[str]) -> _Args:
    args = _Args()
    tokens = list(argv)
    while tokens:
        token = tokens.pop(0)
        if token in ('-h', '--help'):
            args.help = True
        elif token in ('--print', '-p', '--print-description'):
            args.print_only = True
        elif token == '--runner':
            args.force_runner = True
        elif token == '--log-level' or token.startswith('--log-level='):
            if '=' in token:
                value = token.split('=', 1)[1]
            elif tokens:
                value = tokens.pop(0)
            else:
                raise LaunchError('--log-level needs a value (' + ', '.join(LOG_LEVELS) + ')')
            if value.lower() not in LOG_LEVELS:
                raise LaunchError(f"unknown log level '{value}' (one of: "
                                  + ', '.join(LOG_LEVELS) + ')')
            args.log_level = value.lower()
        elif token.startswith('-'):
            raise LaunchError(f"unknown option '{token}'")
        elif ':=' in token:
            name, value = token.split(':=', 1)
            if not name:
                raise LaunchError(f"launch argument without a name: '{token}'")
            args.launch_args[name] = value
        else:
            args.positional.append(token)
    if not args.help and not 1 <= len(args.positional) <= 2:
        raise LaunchError('expected a launch file, or a package and a launch file name')
    return args


def resolve_launch_file(positional: list[str]) -> Path:
    """FILE, or PACKAGE + FILE_NAME found in the package's share directory (launch/ first)."""
    if len(positional) == 1:
        path = Path(positional[0])
        if not path.is_file():
            raise LaunchError(f'launch file {path} does not exist')
        return path
    package, name = positional
    share = Path(package_share(package, None))
    if not share.is_dir():
        raise LaunchError(f"package '{package}' has no share directory {share}")
    if (share / 'launch' / name).is_file():
        return share / 'launch' / name
    matches = sorted(p for p in share.rglob(Path(name).name) if p.is_file()
                     and str(p).endswith(name))
    if len(matches) != 1:
        raise LaunchError(f"launch file '{name}' " + ('not found' if not matches else
                          f'is ambiguous ({len(matches)} matches)')
                          + f" in package '{package}' ({share})")
    return matches[0]


def ros2_launch_available() -> bool:
    """True on a machine with the real ``ros2 launch`` (ros2 CLI + launch + launch_ros)."""
    return shutil.which('ros2') is not None and all(
        importlib.util.find_spec(m) is not None for m in ('launch', 'launch_ros'))


def _delegate(args: _Args) -> None:
    """Replace this process with ``ros2 launch`` (returns only if exec fails)."""
    cmd = ['ros2', 'launch', *args.positional]
    cmd += [f'{k}:={v}' for k, v in args.launch_args.items()]
    if args.log_level and 'log_level' not in args.launch_args:
        cmd.append(f'log_level:={args.log_level}')
    if args.print_only:
        cmd.append('--print')
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp('ros2', cmd)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``r2s2r launch`` (``argv`` without the ``launch`` word); exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = _parse_argv(argv)
        if args.help:
            print(USAGE)
            print(__doc__.split('\n\n', 1)[1].strip().replace('``', ''))
            return EXIT_OK
        runner_forced = args.force_runner or os.environ.get('R2S2R_LAUNCH_RUNNER') == '1'
        if not runner_forced and ros2_launch_available():
            _delegate(args)
        plan = parse_launch_file(resolve_launch_file(args.positional), args.launch_args)
    except LaunchError as exc:
        print(f'r2s2r launch: error: {_one_line(str(exc))}', file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    if args.print_only:
        print(format_plan(plan, args.log_level), flush=True)
        return EXIT_OK
    return run_plan(plan, log_level=args.log_level)


def _one_line(text: str) -> str:
    return ' '.join(text.split())
