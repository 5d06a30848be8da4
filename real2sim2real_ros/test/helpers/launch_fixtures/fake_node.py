"""A stand-in ROS node for the launch runner tests (stdlib only, no rclpy).

Options before ``--ros-args``: ``--exit-after S``, ``--exit-code N``, ``--ignore-sigint``,
``--spawn-child`` (starts a sleeping grandchild in its process group). On start it writes
``$FAKE_NODE_MARKERS/<pid>.json`` with its argv and prints one line to stdout and stderr.
"""
import json
import os
import signal
import subprocess
import sys
import time


def main() -> int:
    argv = sys.argv[1:]
    own = argv[:argv.index('--ros-args')] if '--ros-args' in argv else argv
    exit_after = float(own[own.index('--exit-after') + 1]) if '--exit-after' in own else None
    exit_code = int(own[own.index('--exit-code') + 1]) if '--exit-code' in own else 0
    child = None
    if '--spawn-child' in own:
        child = subprocess.Popen(['sleep', '60'])
    markers = os.environ.get('FAKE_NODE_MARKERS')
    if markers:
        record = {'pid': os.getpid(), 'argv': sys.argv, 'child': child.pid if child else None}
        tmp = os.path.join(markers, f'.{os.getpid()}.tmp')
        with open(tmp, 'w') as f:
            json.dump(record, f)
        os.replace(tmp, os.path.join(markers, f'{os.getpid()}.json'))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if '--ignore-sigint' in own:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    print(f'fake node up pid={os.getpid()}', flush=True)
    print('fake node stderr line', file=sys.stderr, flush=True)
    start = time.monotonic()
    try:
        while exit_after is None or time.monotonic() - start < exit_after:
            time.sleep(0.02)
    except KeyboardInterrupt:
        return 0
    return exit_code


if __name__ == '__main__':
    sys.exit(main())
