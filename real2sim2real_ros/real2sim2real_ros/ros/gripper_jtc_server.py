"""The emulated cell's finger joint under a joint_trajectory_controller (rclpy side).

Serves ``<gripper_controller>/follow_joint_trajectory`` (control_msgs/action/
FollowJointTrajectory) for the jaw's driven finger joint when the cell's
``gripper_action_type`` is ``follow_joint_trajectory``: the setup of labs that drive a
gripper with ros2_control's JTC. The goal check and the jaw command are
core/grasping/finger_trajectory.py; acceptance, tolerances, feedback, preemption and cancel
are the arm's server (ros/fjt_server.py) with the finger as its one joint, so both behave as
JTC does. A cancel or a violated bound holds the jaw where it is (a loaded jaw keeps
squeezing; nothing opens it).

Parameters on the cell node, JTC's names under ``gripper.``: ``gripper.controller_active``,
``gripper.invalid_goal_response``, ``gripper.action_monitor_rate``,
``gripper.constraints.goal_time``, ``gripper.constraints.stopped_velocity_tolerance`` (m/s),
``gripper.constraints.<finger>.trajectory`` / ``.goal`` (m, 0 = unchecked), and
``gripper.max_effort`` (N, what the position-driven jaw squeezes with; 0 = the finger's
URDF effort limit).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..core import trajectory_goal as tg
from ..core.grasping.finger_trajectory import finger_goal
from .fjt_server import FollowJointTrajectoryServer
from .params import declare


def _seconds(duration) -> float:
    return duration.sec + duration.nanosec * 1e-9


class FingerTrajectoryServer(FollowJointTrajectoryServer):
    """``<controller>/follow_joint_trajectory`` for ``world``'s finger joint on ``node``;
    ``clock_offset()`` is the cell clock at world time 0. Call :meth:`update` with the jaw's
    state at every controller update."""

    prefix = 'gripper.'
    label = 'gripper follow_joint_trajectory'
    unit = 'm'

    def __init__(self, node, world, controller: str, action_type, clock_offset):
        self._jaw = world.gripper_joints()
        self.joint = self._jaw.joint
        self._finger = None                 # the active goal's FingerTrajectory
        super().__init__(node, world, controller, action_type, None, clock_offset)
        declare(node, 'gripper.max_effort', 0.0, 'effort the position-driven jaw squeezes '
                "with, N; 0 = the finger joint's effort limit", lo=0.0, hi=1e4)

    def _joints(self) -> list[str]:
        return [self.joint]

    def _hold(self):
        self.world.hold_gripper()

    def _prepare(self, goal):
        traj = goal.trajectory
        stamp = _seconds(traj.header.stamp)
        start = None if stamp == 0.0 else stamp - self._offset()
        last = _seconds(traj.points[-1].time_from_start) if traj.points else 0.0
        tg.check_goal([self.joint], list(traj.joint_names), len(traj.points), start, last,
                      self.world.time)
        if goal.multi_dof_trajectory.joint_names:
            raise tg.GoalRefused(tg.INVALID_JOINTS, 'multi_dof_trajectory: this controller '
                                 'has no multi-DOF joints')
        now = self.world.time
        cmd = finger_goal(traj.joint_names,
                          [(p.positions, _seconds(p.time_from_start)) for p in traj.points],
                          self._jaw, self.world.gripper_state()[0],
                          now if start is None else max(start, now))

        def entries(tols):
            return [tg.ToleranceEntry(t.name, t.position, t.velocity, t.acceleration)
                    for t in tols]
        tol = tg.resolve_tolerances([self.joint], self._constraints(),
                                    entries(goal.path_tolerance),
                                    entries(goal.goal_tolerance),
                                    _seconds(goal.goal_time_tolerance))
        return cmd, tol

    def _start(self, cmd) -> tuple[float, float]:
        # The check read the jaw a moment ago; the reference starts where it is now.
        cmd = replace(cmd, start_position=self.world.gripper_state()[0],
                      start_time=max(cmd.start_time, self.world.time))
        effort = float(self._param('max_effort')) or None
        self.world.command_gripper(cmd.target, effort, cmd.speed(self._jaw.max_velocity))
        self._finger = cmd
        return cmd.start_time, cmd.end_time

    def update(self, t: float, jaw: tuple[float, float, float]):
        """One controller update: the jaw's (position, velocity, effort) at world time t."""
        finger = self._finger
        if finger is None:
            return
        ref_p, ref_v = finger.reference(t)
        arr = lambda x: np.array([x], float)   # noqa: E731 - a one-joint state
        super().update({'time': t, 'joint_names': [self.joint],
                        'reference_positions': arr(ref_p), 'reference_velocities': arr(ref_v),
                        'reference_accelerations': arr(0.0),
                        'feedback_positions': arr(jaw[0]), 'feedback_velocities': arr(jaw[1]),
                        'error_positions': arr(ref_p - jaw[0]),
                        'error_velocities': arr(ref_v - jaw[1])})
