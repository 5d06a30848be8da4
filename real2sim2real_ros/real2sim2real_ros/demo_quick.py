"""``make demo-quick``: bring up the graph with the emulated cell and exercise its plumbing in
under a minute: launch -> graph status -> a custom service (reset the cell's objects) -> a
goal while disarmed (refused) -> arm -> execute a trajectory with live feedback (custom
action) -> read back the recorded MCAP bag. ``make demo`` runs the whole loop instead."""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

console = Console()


def _say(text: str):
    console.print(f'[bold cyan]demo[/] {text}')


def main(argv=None) -> int:
    from real2sim2real_ros.ros.dds_isolation import isolate
    domain = isolate()
    import os

    from ament_index_python.packages import get_package_share_directory

    from real2sim2real_ros.cli.progress import action_progress
    from real2sim2real_ros.core.bag_io import bag_info
    from real2sim2real_ros.launch_runner import LaunchedGraph
    from real2sim2real_ros.ros.commander import Commander

    run_dir = Path(os.environ.get('R2S2R_RUN_DIR') or tempfile.mkdtemp(prefix='r2s2r_demo_'))
    share = Path(get_package_share_directory('real2sim2real_ros'))
    _say(f'ROS_DOMAIN_ID={domain}, discovery LOCALHOST, run dir {run_dir}')
    t0 = time.monotonic()
    graph = LaunchedGraph(share / 'launch' / 'bringup.launch.xml',
                          {'cell': 'emulated', 'run_dir': str(run_dir)},
                          log_dir=run_dir / 'launch_logs').start()
    code = 0
    try:
        with Commander(node_name='r2s2r_demo') as cmd:
            status = cmd.wait_until_up(timeout=90)
            _say(f'graph up in {time.monotonic() - t0:.1f} s: {len(status.nodes)} nodes, '
                 f'{len(status.services)} services, {len(status.actions)} actions')

            resp = cmd.reset_objects()
            _say(f'custom service emulated_cell/reset_objects -> success={resp.success}: '
                 f'{resp.message}')

            js = cmd.joint_state()
            names, q0 = list(js.name), list(js.position)
            target = list(q0)
            target[0] += 0.4
            target[1] += 0.2
            points = [(1.5, [(a + b) / 2 for a, b in zip(q0, target)]), (3.0, target)]

            result = cmd.execute_trajectory(names, points, record=False, timeout=30)
            _say(f'goal while disarmed -> error_code={result.error_code}: {result.error_msg}')

            resp = cmd.arm()
            _say(f'arm -> {resp.success}: {resp.message}')
            with action_progress('execute_trajectory') as progress:
                result = cmd.execute_trajectory(
                    names, points, record=True, timeout=60,
                    feedback=lambda fb: progress(fb.progress,
                                                 f'err {fb.tracking_error * 1000:.1f} mrad'))
            if result.error_code:
                _say(f'[red]execution failed ({result.error_code}): {result.error_msg}')
                code = 1
            table = Table(title='execute_trajectory result')
            for col in ('duration s', 'max err mrad', 'rms err mrad', 'final err mrad', 'bag'):
                table.add_column(col)
            table.add_row(f'{result.duration:.2f}', f'{result.max_tracking_error * 1e3:.2f}',
                          f'{result.rms_tracking_error * 1e3:.2f}',
                          f'{result.final_error * 1e3:.2f}', result.bag_path or '-')
            console.print(table)
            if result.bag_path:
                info = bag_info(result.bag_path)
                topics = ', '.join(f'{t} ({v["count"]})' for t, v in info['topics'].items())
                _say(f'recorded rosbag2 {info["storage"]} bag {result.bag_path}: '
                     f'{info["duration_s"]:.2f} s, {topics}')
            cmd.disarm()
    finally:
        rc = graph.stop(timeout=30)
        _say(f'graph stopped (runner exit {rc}); total {time.monotonic() - t0:.1f} s')
    return code


if __name__ == '__main__':
    sys.exit(main())
