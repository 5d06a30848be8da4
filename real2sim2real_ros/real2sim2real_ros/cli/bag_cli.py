"""``r2s2r bag record | play | info``: rosbag2 MCAP bags on machines without ``ros2 bag``.

Wiring: ``add_parser(subparsers)`` adds ``bag`` with three subcommands; each leaf parser sets
``func`` to its handler, which takes the parsed ``args`` and returns an exit code (0 ok,
2 bad input: no such bag, no topics, output exists). ``main(argv)`` runs it standalone:
``python -m real2sim2real_ros.cli.bag_cli info BAG``.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_parser(subparsers) -> argparse.ArgumentParser:
    bag = subparsers.add_parser('bag', help='record, play and inspect rosbag2 (MCAP) bags',
                                description='rosbag2 bags without ros2 bag.')
    sub = bag.add_subparsers(dest='bag_command', metavar='{record,play,info}')
    bag.set_defaults(func=lambda args: _usage(bag))

    rec = sub.add_parser('record', help='record topics into a new MCAP bag (Ctrl-C ends it)')
    rec.add_argument('topics', nargs='*', help='topic names to record')
    rec.add_argument('-a', '--all', action='store_true',
                     help='record every topic (except /rosout and /parameter_events)')
    rec.add_argument('-o', '--output', required=True, help='bag folder to create (must not exist)')
    rec.add_argument('--duration', type=float, default=None, metavar='S',
                     help='stop after S seconds (default: until Ctrl-C / SIGTERM)')
    rec.add_argument('--compress', action='store_true', help='zstd chunk compression')
    rec.set_defaults(func=cmd_record)

    play = sub.add_parser('play', help='publish a bag at its recorded pace')
    play.add_argument('bag', help='bag folder (or a .mcap / .db3 file)')
    play.add_argument('-r', '--rate', type=float, default=1.0, help='playback speed factor')
    play.add_argument('--clock', type=float, nargs='?', const=100.0, default=None, metavar='HZ',
                      help='publish /clock with the recorded time (default 100 Hz)')
    play.add_argument('--topics', nargs='+', default=None, help='play only these topics')
    play.add_argument('-l', '--loop', action='store_true', help='start again at the end')
    play.add_argument('--wait-for-subscribers', type=float, default=0.0, metavar='S',
                      help='wait up to S seconds for every topic to have a subscriber')
    play.add_argument('-d', '--delay', type=float, default=0.0, metavar='S',
                      help='sleep S seconds before playing (each loop), as ros2 bag play '
                           '--delay: lets subscribers match the player after it matched them')
    play.add_argument('--wait-for-all-acked', type=float, default=5.0, metavar='S',
                      help='after the last message, wait up to S seconds for reliable '
                           'subscribers to acknowledge everything (0: exit at once)')
    play.add_argument('--no-progress', action='store_true', help='no progress bar')
    play.set_defaults(func=cmd_play)

    info = sub.add_parser('info', help='summarise a bag like "ros2 bag info"')
    info.add_argument('bag', help='bag folder (or a .mcap / .db3 file)')
    info.add_argument('--json', action='store_true', help='print the summary as JSON')
    info.set_defaults(func=cmd_info)
    return bag


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _fail(message: str) -> int:
    print(f'r2s2r bag: error: {message}', file=sys.stderr, flush=True)
    return EXIT_USAGE


class _StopFlag:
    """SIGINT/SIGTERM set a flag (and call ``on_stop``) instead of raising mid-write."""

    def __init__(self, on_stop=None):
        self.event = threading.Event()
        self._on_stop = on_stop
        self._previous = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, *_):
        self.event.set()
        if self._on_stop is not None:
            self._on_stop()

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        return False


def _init_ros():
    import rclpy
    from rclpy.signals import SignalHandlerOptions
    context = rclpy.Context()
    rclpy.init(context=context, signal_handler_options=SignalHandlerOptions.NO)
    return rclpy, context


# --------------------------------------------------------------------------- record

def cmd_record(args) -> int:
    topics = list(args.topics or [])
    if args.all and topics:
        return _fail('give topic names or -a/--all, not both')
    if not args.all and not topics:
        return _fail('no topics to record: give topic names or -a/--all')
    out = Path(args.output)
    if out.exists():
        return _fail(f'{out} exists already; a bag is never overwritten')
    if args.duration is not None and not args.duration > 0:
        return _fail(f'--duration must be > 0, got {args.duration}')

    from ..core.bag_io import BagError
    from ..ros.bag_tools import BagRecorder
    rclpy, context = _init_ros()
    from rclpy.executors import SingleThreadedExecutor
    node = rclpy.create_node('r2s2r_bag_recorder', context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    recorder = None
    try:
        try:
            recorder = BagRecorder(node, out, None if args.all else topics,
                                   compress=args.compress)
        except BagError as exc:
            return _fail(str(exc))
        deadline = None if args.duration is None else time.monotonic() + args.duration
        with _StopFlag() as stop:
            print(f'recording to {out} (Ctrl-C to stop)', file=sys.stderr, flush=True)
            while not stop.event.is_set() and (deadline is None or time.monotonic() < deadline):
                executor.spin_once(timeout_sec=0.1)
            path = recorder.close()
        counts = recorder.counts
        print(f'wrote {path}: {sum(counts.values())} messages on {len(counts)} topic(s)',
              file=sys.stderr, flush=True)
        if not counts:
            print('r2s2r bag: warning: no topic was found; the bag is empty', file=sys.stderr)
        return EXIT_OK
    finally:
        if recorder is not None and not recorder.is_closed:
            recorder.abort()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)


# --------------------------------------------------------------------------- play

def cmd_play(args) -> int:
    from ..core.bag_io import BagError, BagReader
    if not args.rate > 0:
        return _fail(f'--rate must be > 0, got {args.rate}')
    try:
        BagReader(args.bag).close()   # a missing or broken bag fails before ROS starts
    except BagError as exc:
        return _fail(str(exc))

    from ..ros.bag_tools import BagPlayer
    rclpy, context = _init_ros()
    node = rclpy.create_node('r2s2r_bag_player', context=context)
    player = None
    try:
        try:
            player = BagPlayer(node, args.bag, rate=args.rate, topics=args.topics,
                               publish_clock=args.clock is not None, loop=args.loop,
                               clock_hz=args.clock or 100.0,
                               wait_for_subscribers_s=args.wait_for_subscribers,
                               delay_s=args.delay)
        except BagError as exc:
            return _fail(str(exc))
        with _StopFlag(on_stop=player.stop) as stop_flag:
            try:
                if args.no_progress or not sys.stderr.isatty():
                    published = player.play()
                else:
                    published = _play_with_progress(player)
            except BagError as exc:
                print(f'error: {exc} (published {player.published} messages before it)',
                      file=sys.stderr, flush=True)
                return EXIT_FAILED
        print(f'published {published} messages', file=sys.stderr, flush=True)
        if args.wait_for_all_acked > 0 and not player.wait_for_all_acked(args.wait_for_all_acked):
            print(f'warning: not every subscriber acknowledged every message within '
                  f'{args.wait_for_all_acked:g} s', file=sys.stderr, flush=True)
        # Every message of the played topics, or a failure: a bag whose metadata counts more
        # than its file yields must not pass as played.
        expected = sum(t.count for name, t in player.bag.topics.items()
                       if player.topics is None or name in player.topics)
        if not stop_flag.event.is_set() and not args.loop and published != expected:
            print(f'error: {args.bag} lists {expected} messages on the played topics; '
                  f'{published} were read and published', file=sys.stderr, flush=True)
            return EXIT_FAILED
        return EXIT_OK
    finally:
        if player is not None:
            player.close()
        node.destroy_node()
        rclpy.try_shutdown(context=context)


def _play_with_progress(player) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    duration_s = player.bag.duration_ns / 1e9
    with Progress(TextColumn('[bold]playing'), BarColumn(), TextColumn('{task.description}'),
                  TimeElapsedColumn(), transient=False) as bar:
        task = bar.add_task('', total=max(player.bag.duration_ns, 1))

        def on_progress(elapsed_ns, total_ns, published):
            bar.update(task, completed=elapsed_ns,
                       description=f'{elapsed_ns / 1e9:7.2f}/{duration_s:.2f} s  '
                                   f'{published} msgs  x{player.rate:g}')
        return player.play(on_progress)


# --------------------------------------------------------------------------- info

def _human_size(n: int) -> str:
    for unit in ('B', 'KiB', 'MiB', 'GiB'):
        if n < 1024 or unit == 'GiB':
            return f'{n:.1f} {unit}' if unit != 'B' else f'{n} B'
        n /= 1024
    return f'{n:.1f} TiB'  # pragma: no cover


def _stamp(ns: int | None) -> str:
    if ns is None:
        return '-'
    t = datetime.fromtimestamp(ns / 1e9, tz=UTC)
    return f'{t:%b %d %Y %H:%M:%S}.{(ns // 1_000_000) % 1000:03d} UTC ({ns / 1e9:.9f})'


def cmd_info(args) -> int:
    from ..core.bag_io import BagError, bag_info
    try:
        info = bag_info(args.bag)
    except BagError as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(info, indent=2))
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)   # pipes and logs: do not squeeze the table to 80 columns
    rows = [
        ('Files', ', '.join(info['files'])),
        ('Bag size', _human_size(info['size_bytes'])),
        ('Storage id', info['storage']),
        ('Duration', f'{info["duration_s"]:.3f}s'),
        ('Start', _stamp(info['start_ns'])),
        ('End', _stamp(info['end_ns'])),
        ('Messages', str(info['message_count'])),
    ]
    for key, value in rows:
        console.print(f'{key + ":":<19}{value}', highlight=False, soft_wrap=True)
    table = Table(title=None, show_lines=False)
    for col, justify in (('Topic', 'left'), ('Type', 'left'), ('Count', 'right'),
                         ('QoS (offered)', 'left')):
        table.add_column(col, justify=justify)
    for name, t in info['topics'].items():
        qos = ', '.join(f'{q["reliability"]}/{q["durability"]}/depth {q["depth"]}'
                        for q in t['offered_qos'][:1]) or '-'
        table.add_row(name, t['type'], str(t['count']), qos)
    console.print(table)
    return EXIT_OK


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog='r2s2r')
    add_parser(parser.add_subparsers(dest='command'))
    args = parser.parse_args(['bag', *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == '__main__':
    sys.exit(main())
