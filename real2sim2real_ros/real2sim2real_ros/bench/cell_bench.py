"""Cell benchmarks: emulated cell real-time factor in fast mode, camera topic delivery and
latency (640x480 at 30 Hz over the chosen QoS), executor command-to-motion latency."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def _listen(msg_type, topic, qos_profile):
    from real2sim2real_ros.ros.topic_listener import TopicListener
    return TopicListener(msg_type, topic, qos=qos_profile, clock=time.time)


def image_transport(qos_name: str, rate=30.0, seconds=8.0) -> dict:
    from sensor_msgs.msg import Image

    from real2sim2real_ros.ros import qos
    topics = {'rgb': '/camera/color/image_raw', 'depth': '/camera/depth/image_rect_raw'}
    listeners = {k: _listen(Image, t, qos.by_name(qos_name)) for k, t in topics.items()}
    try:
        proc = subprocess.run(
            [sys.executable, '-m', 'real2sim2real_ros.bench.image_publisher', '--rate',
             str(rate), '--seconds', str(seconds), '--qos', qos_name],
            capture_output=True, text=True, timeout=seconds + 30, env=os.environ)
        sent = int(proc.stdout.split('sent ')[-1].split()[0]) if 'sent' in proc.stdout else 0
        time.sleep(0.5)
    finally:
        for listener in listeners.values():
            listener.close()
    out = {'qos': qos_name, 'rate_hz': rate, 'sent': sent}
    for key, listener in listeners.items():
        msgs = listener.messages
        lat = [(t - (m.header.stamp.sec + m.header.stamp.nanosec * 1e-9)) * 1e3 for t, m in msgs]
        out[key] = {
            'received': len(msgs),
            'delivery': len(msgs) / sent if sent else 0.0,
            'latency_ms_median': float(np.median(lat)) if lat else None,
            'latency_ms_p95': float(np.percentile(lat, 95)) if lat else None,
        }
    return out


def _bringup(run_dir: Path, **args):
    from ament_index_python.packages import get_package_share_directory

    from real2sim2real_ros.launch_runner import LaunchedGraph
    share = Path(get_package_share_directory('real2sim2real_ros'))
    launch_args = {'cell': 'emulated', 'run_dir': str(run_dir), **args}
    return LaunchedGraph(share / 'launch' / 'bringup.launch.xml', launch_args,
                         log_dir=run_dir / 'launch_logs').start()


def cell_fast_mode_rtf(run_dir: Path, seconds=6.0) -> dict:
    from rosgraph_msgs.msg import Clock

    from real2sim2real_ros.ros import qos
    from real2sim2real_ros.ros.commander import Commander
    graph = _bringup(run_dir / 'fast', cell_real_time='false', use_sim_time='true')
    try:
        with Commander(node_name='bench_rtf') as cmd:
            cmd.wait_until_up(timeout=90)
        col = _listen(Clock, '/clock', qos.CLOCK)
        time.sleep(seconds)
        col.close()
    finally:
        graph.stop(timeout=30)
    ticks = col.messages
    (w0, c0), (w1, c1) = ticks[len(ticks) // 10], ticks[-1]
    sim = (c1.clock.sec + c1.clock.nanosec * 1e-9) - (c0.clock.sec + c0.clock.nanosec * 1e-9)
    return {'sim_s': sim, 'wall_s': w1 - w0, 'real_time_factor': sim / (w1 - w0),
            'clock_msgs': len(ticks)}


def cell_camera_and_executor(run_dir: Path, trials=5) -> dict:
    """Real-time bringup: achieved camera frame rate; command-to-motion latency of the executor
    (goal sent -> first /joint_states sample that moved 2 mrad, and executor command publish
    -> that sample)."""
    from sensor_msgs.msg import Image, JointState
    from trajectory_msgs.msg import JointTrajectory

    from real2sim2real_ros.ros import qos
    from real2sim2real_ros.ros.commander import Commander
    graph = _bringup(run_dir / 'rt')
    out = {}
    try:
        with Commander(node_name='bench_exec') as cmd:
            cmd.wait_until_up(timeout=90)
            cam = _listen(Image, '/camera/color/image_raw', qos.IMAGES)
            time.sleep(5.0)
            cam.close()
            frames = cam.messages
            if len(frames) > 2:
                span = frames[-1][0] - frames[0][0]
                lat = [(t - (m.header.stamp.sec + m.header.stamp.nanosec * 1e-9)) * 1e3
                       for t, m in frames]
                out['cell_camera'] = {'fps': (len(frames) - 1) / span,
                                      'latency_ms_median': float(np.median(lat))}
            col = _listen(JointState, '/joint_states', qos.STATE)
            col2 = _listen(JointTrajectory, '/joint_trajectory_controller/joint_trajectory',
                           qos.COMMAND)
            cmd.arm()
            goal_lat, cmd_lat = [], []
            sign = 1.0
            for _ in range(trials):
                js = cmd.joint_state()
                q0 = np.array(js.position)
                q1 = q0.copy()
                q1[0] += 0.3 * sign
                sign = -sign
                n_cmd = len(col2.messages)
                t_goal = time.time()
                cmd.execute_trajectory(js.name, [(1.0, list(q1))], record=False, timeout=30)
                moved = next((t for t, m in col.messages
                              if t > t_goal and abs(m.position[0] - q0[0]) > 0.002), None)
                cmds = col2.messages[n_cmd:]
                if moved is not None:
                    goal_lat.append((moved - t_goal) * 1e3)
                    if cmds:
                        # The executor stamps the trajectory to start `start_delay` after
                        # sending (JTC semantics): latency counts from that commanded start.
                        stamp = cmds[0][1].header.stamp
                        start = stamp.sec + stamp.nanosec * 1e-9 or cmds[0][0]
                        cmd_lat.append((moved - start) * 1e3)
            cmd.disarm()
            col.close()
            col2.close()
            out['executor'] = {
                'trials': trials,
                'goal_to_motion_ms_median': float(np.median(goal_lat)) if goal_lat else None,
                'command_to_motion_ms_median': float(np.median(cmd_lat)) if cmd_lat else None,
                'command_to_motion_ms_max': float(np.max(cmd_lat)) if cmd_lat else None,
            }
    finally:
        graph.stop(timeout=30)
    return out


def _publish_scene(spec):
    """Latch a Scene with the spec's objects, as scene_reconstruction would; returns a closer."""
    import math

    import rclpy
    from geometry_msgs.msg import Point, Pose, Quaternion, Vector3

    from real2sim2real_msgs.msg import ObjectEstimate, Scene
    from real2sim2real_ros.ros import qos
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node('bench_scene_publisher', context=ctx)
    pub = node.create_publisher(Scene, 'scene', qos.LATCHED)
    scene = Scene(table_height=float(spec.table.height), artifact_dir='bench')
    scene.header.frame_id = 'world'
    for o in spec.objects:
        ext = tuple(o.size) if o.shape == 'box' else (o.size[0], o.size[0], o.size[1])
        scene.objects.append(ObjectEstimate(
            id=o.id, shape=o.shape, extents=Vector3(x=ext[0], y=ext[1], z=ext[2]),
            pose=Pose(position=Point(x=o.xyz[0], y=o.xyz[1], z=o.xyz[2]),
                      orientation=Quaternion(w=math.cos(o.yaw / 2), z=math.sin(o.yaw / 2)))))
    pub.publish(scene)

    def close():
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
    return close


def tracker_lag(run_dir: Path, image_qos: str, busy_processes: int = 2,
                seconds: float = 20.0) -> dict:
    """Age of the object tracker's poses on the real-time emulated cell while
    ``busy_processes`` spin the CPU (what policy training does during the loop), with the
    tracker's depth subscription on ``image_qos``. Age: the newest /joint_states stamp
    received by then minus the pose's (depth frame's) stamp -- both on the cell's clock, which
    itself lags the wall clock under load."""
    import yaml
    from ament_index_python.packages import get_package_share_directory
    from sensor_msgs.msg import JointState

    from real2sim2real_msgs.msg import TrackedObjects
    from real2sim2real_ros.core.cell_spec import load_cell_spec
    from real2sim2real_ros.launch_runner import LaunchedGraph
    from real2sim2real_ros.ros import qos
    from real2sim2real_ros.ros.commander import GRAPH, Commander
    share = Path(get_package_share_directory('real2sim2real_ros'))
    run_dir = run_dir / f'tracker_{image_qos}'
    run_dir.mkdir(parents=True, exist_ok=True)
    params = yaml.safe_load((share / 'config' / 'params.yaml').read_text())
    params['/**/object_tracker']['ros__parameters']['image_qos'] = image_qos
    params_file = run_dir / 'params.yaml'
    params_file.write_text(yaml.safe_dump(params))
    args = {'run_dir': str(run_dir), 'params_file': str(params_file)}
    graphs = [LaunchedGraph(share / 'launch' / name, args, log_dir=run_dir / 'logs').start()
              for name in ('cell_emulated.launch.xml', 'capture.launch.xml')]
    busy, close_scene, listener, states = [], None, None, None
    try:
        with Commander(node_name='bench_tracker', expected={
                k: GRAPH[k] for k in ('emulated_cell', 'object_tracker')}) as cmd:
            cmd.wait_until_up(timeout=90)
        close_scene = _publish_scene(load_cell_spec(share / 'config' / 'cells' / 'default.yaml'))
        listener = _listen(TrackedObjects, '/tracked_objects', None)
        states = _listen(JointState, '/joint_states', qos.STATE_RECORDING)
        time.sleep(3.0)
        busy = [subprocess.Popen([sys.executable, '-c', 'while True: pass'])
                for _ in range(busy_processes)]
        t0 = time.time()
        time.sleep(seconds)
    finally:
        for p in busy:
            p.kill()
        for lst in (listener, states):
            if lst is not None:
                lst.close()
        if close_scene is not None:
            close_scene()
        for g in reversed(graphs):
            g.stop(timeout=30)
    def stamp(m):
        return m.header.stamp.sec + m.header.stamp.nanosec * 1e-9
    js_t = np.array([t for t, _ in states.messages])
    js_s = np.maximum.accumulate(np.array([stamp(m) for _, m in states.messages]))
    ages = []
    for t, m in listener.messages:
        k = int(np.searchsorted(js_t, t, side='right')) - 1
        if t >= t0 and k >= 0:
            ages.append(js_s[k] - stamp(m))
    return {'image_qos': image_qos, 'busy_processes': busy_processes, 'seconds': seconds,
            'poses': len(ages), 'rate_hz': len(ages) / seconds,
            'age_ms_median': float(np.median(ages)) * 1e3 if ages else None,
            'age_ms_p95': float(np.percentile(ages, 95)) * 1e3 if ages else None,
            'age_ms_max': float(np.max(ages)) * 1e3 if ages else None}
