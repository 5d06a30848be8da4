"""``r2s2r reconstruct [--capture MANIFEST]``: call scene_reconstruction's ``~/reconstruct``
action with a progress bar, print the objects found and write a top-view PNG.

The PNG (``top_view.png`` in the stage folder, or the working directory when the stage folder
is on another machine) shows the fused object points, the table outline and every fitted
footprint with its id. Points come from the stage folder's points.npz, else from the latched
``scene/points`` and ``scene/markers`` topics.

Wiring: ``add_parser(subparsers)`` adds ``reconstruct``; its ``func`` returns an exit code
(0 ok, 1 the action failed: its error code name and message on stderr, 2 bad input or the
node not reachable). Standalone: ``python -m real2sim2real_ros.cli.reconstruct_cli``.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.geometry import quat_msg_yaw

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
RECONSTRUCT_ACTION = 'scene_reconstruction/reconstruct'
PNG_NAME = 'top_view.png'


@dataclass
class ObjectRow:
    """One found object, world frame: position m, yaw rad about z, extents m."""
    id: str
    shape: str
    position: tuple[float, float, float]
    yaw: float
    extents: tuple[float, float, float]
    mass: float
    mass_is_prior: bool


def rows_from_scene(scene) -> list[ObjectRow]:
    """real2sim2real_msgs/Scene -> ObjectRows."""
    rows = []
    for o in scene.objects:
        p, q, e = o.pose.position, o.pose.orientation, o.extents
        rows.append(ObjectRow(o.id, o.shape, (p.x, p.y, p.z),
                              quat_msg_yaw(q), (e.x, e.y, e.z),
                              o.mass, o.mass_is_prior))
    return rows


def object_table(rows: list[ObjectRow], title: str = 'reconstructed objects'):
    from rich.table import Table
    table = Table(title=title)
    for col in ('id', 'shape', 'x, y, z (m)', 'yaw (deg)', 'extents (mm)', 'mass (kg)'):
        table.add_column(col, justify='left' if col in ('id', 'shape') else 'right')
    for r in rows:
        yaw = '-' if r.shape == 'cylinder' else f'{math.degrees(r.yaw):.1f}'
        table.add_row(r.id, r.shape, ', '.join(f'{v:.3f}' for v in r.position), yaw,
                      ' x '.join(f'{v * 1000:.1f}' for v in r.extents),
                      f'{r.mass:.3f}' + (' (prior)' if r.mass_is_prior else ''))
    return table


def _footprint(r: ObjectRow, points: np.ndarray | None):
    """Closed (K, 2) outline of an object's footprint in world x, y."""
    x, y = r.position[:2]
    if r.shape == 'cylinder':
        a = np.linspace(0, 2 * np.pi, 64)
        return np.column_stack([x + r.extents[0] / 2 * np.cos(a),
                                y + r.extents[0] / 2 * np.sin(a)])
    if r.shape == 'mesh' and points is not None and len(points) >= 3:
        from scipy.spatial import ConvexHull
        hull = points[ConvexHull(points[:, :2]).vertices, :2]
        return np.vstack([hull, hull[:1]])
    hx, hy = r.extents[0] / 2, r.extents[1] / 2
    corners = np.array([[-hx, -hy], [hx, -hy], [hx, hy], [-hx, hy], [-hx, -hy]])
    c, s = math.cos(r.yaw), math.sin(r.yaw)
    return corners @ np.array([[c, s], [-s, c]]) + [x, y]


def top_view_png(path: str | Path, rows: list[ObjectRow], points: np.ndarray,
                 labels: np.ndarray, table_outline: np.ndarray | None) -> Path:
    """Write the top view (x right, y up: REP 103 seen from above) to ``path``."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    from ..core.artifacts import atomic_output_path
    fig, ax = plt.subplots(figsize=(7, 7), dpi=110)
    if table_outline is not None and len(table_outline):
        ring = np.vstack([table_outline, table_outline[:1]])
        ax.fill(ring[:, 0], ring[:, 1], color=(0.62, 0.52, 0.40), alpha=0.25, lw=0)
        ax.plot(ring[:, 0], ring[:, 1], color=(0.45, 0.35, 0.25), lw=1.5, label='table')
    if len(points):
        step = max(1, len(points) // 40000)
        ax.scatter(points[::step, 0], points[::step, 1], s=0.3, c=labels[::step],
                   cmap='tab10', vmin=0, vmax=9, alpha=0.5, linewidths=0)
    for k, r in enumerate(rows):
        own = points[labels == k] if len(points) else None
        ring = _footprint(r, own)
        ax.plot(ring[:, 0], ring[:, 1], color='black', lw=1.2)
        ax.annotate(r.id, r.position[:2], ha='center', va='center', fontsize=8,
                    bbox={'boxstyle': 'round,pad=0.2', 'fc': 'white', 'alpha': 0.8})
    ax.set_aspect('equal')
    ax.set_xlabel('x (m)')
    ax.set_ylabel('y (m)')
    ax.set_title(f'{len(rows)} objects, {len(points)} fused points (top view)')
    ax.grid(True, lw=0.3)
    fig.tight_layout()
    path = Path(path)
    with atomic_output_path(path) as tmp:
        fig.savefig(tmp, format='png')
    plt.close(fig)
    return path


def _points_from_stage(folder: str):
    from ..core.reconstruction.stage import load_points
    data = load_points(folder)
    return data['points'], data['labels'], data['table_outline']


def _points_from_topics(cmd, timeout: float = 5.0):
    """The latched cloud (intensity = object index) and the table marker's outline."""
    import threading

    from sensor_msgs.msg import PointCloud2
    from visualization_msgs.msg import Marker, MarkerArray

    from ..ros import qos
    got: dict = {}
    done = threading.Event()

    def keep(key):
        def on_msg(msg):
            got[key] = msg
            if len(got) == 2:
                done.set()
        return on_msg
    subs = [cmd.node.create_subscription(PointCloud2, cmd.name('scene/points'), keep('points'),
                                         qos.LATCHED),
            cmd.node.create_subscription(MarkerArray, cmd.name('scene/markers'),
                                         keep('markers'), qos.LATCHED)]
    done.wait(timeout)
    for s in subs:
        cmd.node.destroy_subscription(s)
    points, labels, outline = np.zeros((0, 3)), np.zeros(0), None
    if 'points' in got:
        buf = np.frombuffer(bytes(got['points'].data), dtype=[
            ('x', '<f4'), ('y', '<f4'), ('z', '<f4'), ('intensity', '<f4')])
        points = np.column_stack([buf['x'], buf['y'], buf['z']])
        labels = buf['intensity'].astype(int)
    for m in getattr(got.get('markers'), 'markers', []):
        if m.ns == 'table' and m.type == Marker.CUBE:
            cx, cy, hx, hy = m.pose.position.x, m.pose.position.y, m.scale.x / 2, m.scale.y / 2
            outline = np.array([[cx - hx, cy - hy], [cx + hx, cy - hy], [cx + hx, cy + hy],
                                [cx - hx, cy + hy]])
    return points, labels, outline


def reconstruct(namespace: str = '', capture_manifest: str = '', run_dir: str = '', *,
                feedback=None, timeout: float = 300.0, domain_id: int | None = None,
                png: bool = False):
    """Run the reconstruct action; returns (Reconstruct.Result, PNG path or None).
    Raises commander.CommanderError when the node cannot be reached."""
    from real2sim2real_msgs.action import Reconstruct

    from ..ros.commander import Commander
    with Commander(namespace=namespace, node_name='r2s2r_reconstruct', domain_id=domain_id,
                   expected={}) as cmd:
        goal = Reconstruct.Goal(capture_manifest=capture_manifest, run_dir=run_dir)
        result = cmd.run_action(Reconstruct, RECONSTRUCT_ACTION, goal, feedback=feedback,
                                timeout=timeout)
        if not png or result.error_code != 0:
            return result, None
        folder = result.scene.artifact_dir
        try:
            points, labels, outline = _points_from_stage(folder)
            target = Path(folder) / PNG_NAME
        except (OSError, KeyError, ValueError):      # the stage folder is on another machine
            points, labels, outline = _points_from_topics(cmd)
            target = Path.cwd() / f'{Path(folder).name or "reconstruct"}_{PNG_NAME}'
        return result, top_view_png(target, rows_from_scene(result.scene), points, labels,
                                    outline)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser('reconstruct', help='reconstruct the scene from a capture set',
                              description='Call scene_reconstruction/reconstruct, print the '
                              'objects and write a top-view PNG.')
    p.add_argument('--capture', default='', metavar='MANIFEST',
                   help='capture set manifest.json, folder or bag (default: the newest '
                   'capture_* in the run directory)')
    p.add_argument('--run-dir', default='', help='run directory (default: the node\'s)')
    p.add_argument('--namespace', default='', help='namespace of the graph')
    p.add_argument('--timeout', type=float, default=300.0, help='seconds for the whole stage')
    p.add_argument('--no-progress', action='store_true', help='no progress bar')
    p.add_argument('--no-png', action='store_true', help='do not write the top-view PNG')
    p.set_defaults(func=cmd_reconstruct)
    return p


def cmd_reconstruct(args) -> int:
    if args.capture and not Path(args.capture).expanduser().exists():
        # The node may run elsewhere; a path it cannot see comes back as INVALID_CAPTURE.
        print(f'r2s2r reconstruct: note: {args.capture} does not exist here', file=sys.stderr)
    from rich.console import Console

    from ..ros.commander import CommanderError
    kwargs = {'timeout': args.timeout, 'png': not args.no_png}
    try:
        if args.no_progress or not sys.stderr.isatty():
            result, png = reconstruct(args.namespace, args.capture, args.run_dir, **kwargs)
        else:
            from .progress import action_progress
            with action_progress('reconstruct') as update:
                result, png = reconstruct(args.namespace, args.capture, args.run_dir,
                                          feedback=lambda fb: update(fb.progress, fb.stage),
                                          **kwargs)
    except CommanderError as exc:
        print(f'r2s2r reconstruct: error: {exc}', file=sys.stderr)
        return EXIT_USAGE
    if result.error_code != 0:
        from ..ros.goal_client import code_name
        name = code_name(type(result), result.error_code)
        print(f'r2s2r reconstruct: {name}: {result.error_msg}', file=sys.stderr)
        return EXIT_FAILED
    scene = result.scene
    Console(stderr=True).print(object_table(
        rows_from_scene(scene), f'{len(scene.objects)} objects, table top at '
        f'z = {scene.table_height:.4f} m'))
    print(f'scene {scene.mjcf_path}', file=sys.stderr)
    if png is not None:
        print(f'top view {png}', file=sys.stderr)
    print(scene.artifact_dir)
    return EXIT_OK


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog='r2s2r')
    add_parser(parser.add_subparsers(dest='command'))
    args = parser.parse_args(['reconstruct', *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == '__main__':
    sys.exit(main())
