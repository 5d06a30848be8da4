"""What the system_identification node runs on the cell: probe trajectories through the
executor's ``execute_trajectory`` action (recorded: one bag each) and the strike probes'
:class:`ExecutorStrikeCell` (core/sysid/stage.StrikeCell over that action and the
tracked_objects topic)."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import rclpy
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from real2sim2real_msgs.action import ExecuteTrajectory, Identify

from ...ros.ros_time import NodeDeadline, duration_msg
from .failure import GoalFailed

EXECUTION_FAILED = Identify.Result.EXECUTION_FAILED
MISSING_TOPICS = Identify.Result.MISSING_TOPICS
CANCELED = Identify.Result.CANCELED


def _points(times, positions, velocities=None):
    out = []
    for i, t in enumerate(times):
        p = JointTrajectoryPoint(positions=[float(x) for x in positions[i]],
                                 time_from_start=duration_msg(float(t)))
        if velocities is not None:
            p.velocities = [float(x) for x in velocities[i]]
        out.append(p)
    return out


class ExecutorProbes:
    """SystemIdentificationNode's probes on the cell (a mixin: ``self`` is the node)."""

    def _current(self, robot) -> np.ndarray:
        """The arm's joint positions in the latest joint_states (see :meth:`_latest`)."""
        return self._latest(robot.joint_names)[0]

    def _latest(self, names) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(positions, velocities, efforts) of joints ``names`` in the latest joint_states
        (EXECUTION_FAILED when none has them within 5 s)."""
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            with self._lock:
                msg = self._js
            if msg is not None and all(n in msg.name for n in names):
                idx = [list(msg.name).index(n) for n in names]
                return tuple(np.array([f[i] if len(f) > i else np.nan for i in idx], float)
                             for f in (msg.position, msg.velocity, msg.effort))
            time.sleep(0.05)
        raise GoalFailed(EXECUTION_FAILED, f'no {self.p.joint_states_topic} with joints '
                         f'{list(names)}')

    def _cell_time(self) -> float:
        """The cell's clock (s): the latest joint_states stamp."""
        self._latest([])
        with self._lock:
            stamp = self._js.header.stamp
        return stamp.sec + stamp.nanosec * 1e-9

    def _execute(self, goal_handle, robot, times, pos, vel, record: bool, what: str):
        traj = JointTrajectory(joint_names=list(robot.joint_names),
                               points=_points(times, pos, vel))
        res = self._send_and_wait(goal_handle, self._executor_client, self.p.executor_action,
                                  ExecuteTrajectory.Goal(trajectory=traj, record=record),
                                  float(times[-1]) + 30.0, what)
        if res.error_code != ExecuteTrajectory.Result.NONE:
            raise GoalFailed(EXECUTION_FAILED,
                        f'{what}: executor error {res.error_code}: {res.error_msg}')
        if record and not res.bag_path:
            raise GoalFailed(EXECUTION_FAILED, f'{what}: the executor recorded no bag (its '
                        f'run_dir parameter is empty?)')
        return res.bag_path

    def _send_and_wait(self, goal_handle, client, action: str, goal, timeout: float,
                       what: str):
        """Send ``goal`` to the executor's ``action`` through ``client`` and wait for its
        result message (EXECUTION_FAILED when it is not there, refuses the goal or gives no
        result within ``timeout`` s of the cell's clock; CANCELED with the identify goal)."""
        if not client.wait_for_server(timeout_sec=5.0):
            raise GoalFailed(EXECUTION_FAILED, f'executor action {action} is not available')
        done = threading.Event()
        send = client.send_goal_async(goal)
        send.add_done_callback(lambda _f: done.set())
        if not done.wait(15.0) or not send.result().accepted:
            raise GoalFailed(EXECUTION_FAILED, f'{what}: the executor did not accept the goal')
        handle = send.result()
        got = threading.Event()
        res_future = handle.get_result_async()
        res_future.add_done_callback(lambda _f: got.set())
        deadline = NodeDeadline(self, timeout)   # the cell's clock
        while not got.wait(0.1):
            if goal_handle.is_cancel_requested:
                handle.cancel_goal_async()
                got.wait(5.0)
                raise GoalFailed(CANCELED, f'canceled during {what}')
            if deadline.expired() or not rclpy.ok():
                why = ' (the clock stopped)' if deadline.stalled() else ''
                raise GoalFailed(EXECUTION_FAILED, f'{what}: no result from the executor '
                            f'{timeout:.0f} s after the goal{why}')
        return res_future.result().result

    def _excite(self, goal_handle, robot, n: int):
        from ...core.sysid.probes import ProbeError
        from ...core.sysid.stage import arm_probes
        q = self._current(robot)
        center_param = list(self.p.probe_center or [])
        center = np.asarray(center_param, float) if len(center_param) else q
        if center.shape != q.shape:
            raise GoalFailed(EXECUTION_FAILED, f'probe_center has {center.size} values for '
                        f'{q.size} joints')
        try:
            probes = arm_probes(robot, center, n, duration=self.p.probe_duration,
                                amplitude=self.p.probe_amplitude,
                                velocity_fraction=self.p.probe_velocity_fraction)
        except ProbeError as exc:
            raise GoalFailed(EXECUTION_FAILED, f'cannot build probes: {exc}') from None
        if np.max(np.abs(center - q)) > 1e-3:
            self._feedback(goal_handle, 'move_to_center', 0.0)
            from ...core.sysid.probes import move_trajectory
            t, p, v = move_trajectory(q, center, robot.velocity_limits)
            self._execute(goal_handle, robot, t, p, v, False, 'move to the probe centre')
        bags = []
        for i, probe in enumerate(probes):
            time.sleep(self.p.settle_time)
            self._feedback(goal_handle, f'excite {i + 1}/{n}', i / n * 0.5)
            # An explicit point at t = 0 on the centre: the reference starts there whatever
            # the controller held before, so the bag alone defines the run.
            times = np.concatenate([[0.0], probe.times])
            pos = np.vstack([center, probe.positions])
            vel = np.vstack([np.zeros_like(center), probe.velocities])
            bags.append(self._execute(goal_handle, robot, times, pos, vel, True, probe.name))
        return bags, [p.name for p in probes]


    def _tracked_poses(self, ids, window: float = 0.4):
        """{id: (xyz, yaw)}: the mean of the tracked poses over the last ``window`` s, waiting
        up to the ``tracked_objects_wait`` parameter for one."""
        from ...core.sysid.stage import mean_tracked_poses
        timeout = float(self.p.tracked_objects_wait)
        deadline = time.monotonic() + timeout
        while True:
            now = self.get_clock().now().nanoseconds
            with self._lock:
                recent = [m for t, m in self._tracked if now - t <= window * 1e9]
            if recent or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if not recent:
            raise GoalFailed(MISSING_TOPICS, (
                f'no tracked object poses on {self.p.tracked_objects_topic} within '
                f'{timeout:.0f} s: object identification needs the object_tracker '
                f'(real2sim2real_msgs/TrackedObjects) running'))
        return mean_tracked_poses(
            ((oid, (pose.position.x, pose.position.y, pose.position.z),
              (pose.orientation.w, pose.orientation.x, pose.orientation.y, pose.orientation.z))
             for m in recent for oid, pose in zip(m.ids, m.poses)), ids)

class ExecutorStrikeCell:
    """core/sysid/stage.StrikeCell over the executor action and the tracked_objects topic: one
    bag per strike probe (executor recording + tracked poses + the plan)."""

    def __init__(self, node, goal_handle, robot):
        self.node, self.goal_handle, self.robot = node, goal_handle, robot
        self.bags: list[str] = []

    def tracked_poses(self, ids):
        return self.node._tracked_poses(ids)

    def current_positions(self):
        return self.node._current(self.robot)

    def strike(self, plan, index: int, info: dict):
        from rclpy.serialization import serialize_message as serialize_ros

        from ...core.sysid.bags import strike_recording_from_bag, write_strike_bag
        node = self.node
        with node._lock:
            node._tracked = []
        p = plan.probe
        t_send = node.get_clock().now().nanoseconds
        bag = node._execute(self.goal_handle, self.robot, p.times, p.positions, p.velocities,
                            True, p.name)
        time.sleep(0.3)    # the last frames of the settle time
        with node._lock:
            tracked = [(t, serialize_ros(m)) for t, m in node._tracked if t >= t_send - 1e9]
        out = write_strike_bag(bag, Path(bag).parent / 'strike_probe', tracked,
                               {**info, 'tracked_topic': node.p.tracked_objects_topic})
        self.bags.append(out)
        return strike_recording_from_bag(out, self.robot.joint_names, name=f'strike_{index}')
