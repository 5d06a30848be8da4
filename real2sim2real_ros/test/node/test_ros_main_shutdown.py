"""ros_main.run_node's bounded shutdown: a node process told to stop (SIGTERM) is gone within
SHUTDOWN_DEADLINE_S even when one of its callbacks never returns, and says where it was stuck;
a healthy node still exits 0 at once.

Without the watchdog the stuck case never exits: rclpy's MultiThreadedExecutor.shutdown joins
its worker pool, and the pool's one busy thread waits for ever.
"""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO_PKG = Path(__file__).resolve().parents[2]
DEADLINE_S = 2.0

NODE = textwrap.dedent(f"""
    import sys, threading
    from rclpy.node import Node
    from real2sim2real_ros.ros import ros_main
    ros_main.SHUTDOWN_DEADLINE_S = {DEADLINE_S}
    STUCK = sys.argv[1] == 'stuck'

    class Probe(Node):
        def __init__(self):
            super().__init__('shutdown_probe')
            self.create_timer(0.05, self.tick)
            self.ticks = 0

        def tick(self):
            self.ticks += 1
            if self.ticks == 1:
                print('ticking', flush=True)
            if STUCK:
                threading.Event().wait()          # a wait nothing will end

    sys.exit(ros_main.run_node(Probe))
""")


@pytest.mark.parametrize('mode', ['stuck', 'healthy'])
def test_a_stopped_node_exits_within_the_deadline(mode):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO_PKG), *filter(None, [os.environ.get('PYTHONPATH')])]))
    proc = subprocess.Popen([sys.executable, '-c', NODE, mode], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == 'ticking'   # a callback has run (blocks)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=DEADLINE_S + 20.0)
        took = time.monotonic() - t0
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if mode == 'healthy':
        assert code == 0, err
        assert took < DEADLINE_S, took                      # the watchdog did not end it
        assert 'Timeout' not in err, err
    else:
        assert code == 1, err
        assert took >= DEADLINE_S - 0.1, took               # it did wait for the callback
        assert 'Timeout' in err and 'in tick' in err, err  # faulthandler names the frame
