"""``r2s2r capture [--views K]``: call camera_capture's ``~/capture`` action with a progress bar
and print the capture set's manifest path.

Wiring: ``add_parser(subparsers)`` adds ``capture``; its ``func`` returns an exit code
(0 ok, 1 the action failed: its error code name and message on stderr, 2 bad input or the
node not reachable). Standalone: ``python -m real2sim2real_ros.cli.capture_cli --views 4``.
"""
from __future__ import annotations

import argparse
import sys

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
CAPTURE_ACTION = 'camera_capture/capture'


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser('capture', help='capture RGB-D views into a capture set',
                              description='Call camera_capture/capture and print the manifest.')
    p.add_argument('--views', type=int, default=0, metavar='K',
                   help='number of views (default: the node\'s num_views, or one per camera)')
    p.add_argument('--run-dir', default='', help='run directory (default: the node\'s)')
    p.add_argument('--namespace', default='', help='namespace of the graph')
    p.add_argument('--timeout', type=float, default=120.0, help='seconds for the whole capture')
    p.add_argument('--no-progress', action='store_true', help='no progress bar')
    p.set_defaults(func=cmd_capture)
    return p


def capture(namespace: str = '', num_views: int = 0, run_dir: str = '', *,
            feedback=None, timeout: float = 120.0, domain_id: int | None = None):
    """Run the capture action; returns the Capture.Result (error_code 0 = success).
    Raises commander.CommanderError when the node cannot be reached."""
    from real2sim2real_msgs.action import Capture

    from ..ros.commander import Commander, count_field
    goal = Capture.Goal(num_views=count_field('num_views', num_views), run_dir=run_dir)
    with Commander(namespace=namespace, node_name='r2s2r_capture', domain_id=domain_id,
                   expected={}) as cmd:
        return cmd.run_action(Capture, CAPTURE_ACTION, goal, feedback=feedback,
                              timeout=timeout)


def cmd_capture(args) -> int:
    if args.views < 0:
        print(f'r2s2r capture: error: --views must be >= 0, got {args.views}', file=sys.stderr)
        return EXIT_USAGE
    from ..ros.commander import CommanderError
    try:
        if args.no_progress or not sys.stderr.isatty():
            result = capture(args.namespace, args.views, args.run_dir, timeout=args.timeout)
        else:
            from .progress import action_progress
            with action_progress('capture') as update:
                result = capture(args.namespace, args.views, args.run_dir, timeout=args.timeout,
                                 feedback=lambda fb: update(
                                     fb.views_done / max(fb.views_total, 1),
                                     f'{fb.views_done}/{fb.views_total} views'))
    except CommanderError as exc:
        print(f'r2s2r capture: error: {exc}', file=sys.stderr)
        return EXIT_USAGE
    if result.error_code != 0:
        from ..ros.goal_client import code_name
        name = code_name(type(result), result.error_code)
        print(f'r2s2r capture: {name}: {result.error_msg}', file=sys.stderr)
        return EXIT_FAILED
    cs = result.capture_set
    print(f'{cs.num_views} views -> {cs.bag_path}', file=sys.stderr)
    print(cs.manifest_path)
    return EXIT_OK


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog='r2s2r')
    add_parser(parser.add_subparsers(dest='command'))
    args = parser.parse_args(['capture', *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == '__main__':
    sys.exit(main())

