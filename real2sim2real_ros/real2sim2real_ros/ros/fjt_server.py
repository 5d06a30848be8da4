"""The emulated cell's ``<controller>/follow_joint_trajectory`` action server (rclpy side).

A thin shell over core/trajectory_goal.py (the goal check, tolerances and monitoring of
ros2_control's joint_trajectory_controller) and the cell's trajectory follower
(core/joint_trajectory.py). Served beside the ``joint_trajectory`` topic; the action type is
control_msgs/action/FollowJointTrajectory (the real package, or the wire-compatible stand-in
``make setup`` builds where no registry has it).

Parameters it declares on the cell node (JTC's names; read at each goal, so they can be set
at run time):

* ``constraints.<joint>.trajectory`` / ``constraints.<joint>.goal`` (rad, 0 = unchecked):
  path and goal position bounds; ``constraints.stopped_velocity_tolerance`` (rad/s, the goal
  velocity bound); ``constraints.goal_time`` (s, 0 = wait indefinitely);
* ``action_monitor_rate`` (Hz): feedback rate (tolerances are checked at every controller
  update, i.e. every joint state);
* ``controller_active``: false = the controller is inactive (as after ``ros2 control
  switch_controllers --deactivate``): goals are rejected, topic trajectories ignored;
* ``invalid_goal_response``: ``reject`` (ros2_control JTC: a goal failing the check is
  rejected and the reason logged) or ``abort`` (accepted, then aborted with its error_code and
  error_string, as ROS 1's JTC and several vendor drivers do).

Semantics: one goal at a time, a new goal (or a topic trajectory) preempts the active one
(it is aborted with INVALID_GOAL, "preempted"); cancel holds the current position and ends
the goal canceled; a path or goal tolerance violation holds position and aborts with
PATH_TOLERANCE_VIOLATED / GOAL_TOLERANCE_VIOLATED; success once within the goal bounds after
the last point. Feedback (desired, actual, error) at ``action_monitor_rate``.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from trajectory_msgs.msg import JointTrajectoryPoint

from ..core import trajectory_goal as tg
from ..core.joint_trajectory import TrajectoryError, validate_trajectory
from .params import declare


@dataclass
class _Active:
    monitor: tg.GoalMonitor
    done: threading.Event = field(default_factory=threading.Event)
    outcome: tg.Outcome | None = None
    state: dict | None = None          # the latest controller state, for feedback


class FollowJointTrajectoryServer:
    """Serves ``<controller>/follow_joint_trajectory`` for ``world`` on ``node``.

    ``to_command(msg, start)`` turns a JointTrajectory into a JointTrajectoryCommand;
    ``clock_offset()`` is the cell clock at world time 0 (stamps = offset + world time).
    Call :meth:`update` with the world's controller_state() at every controller update and
    :meth:`preempt` when a topic trajectory replaces the motion."""

    prefix = ''    # of the parameters' names (a subclass serving another controller)
    label = 'follow_joint_trajectory'     # of its log lines
    unit = 'rad'                          # of its joints' positions

    def __init__(self, node, world, controller: str, action_type, to_command, clock_offset):
        self.node, self.world, self.action_type = node, world, action_type
        self._to_command, self._offset = to_command, clock_offset
        self._lock = threading.Lock()
        self._active: _Active | None = None
        self._started: dict[bytes, _Active | tg.Outcome] = {}   # goal id -> run or refusal
        self._declare_parameters()
        self._server = ActionServer(
            node, action_type, f'{controller}/follow_joint_trajectory',
            execute_callback=self._execute, goal_callback=self._on_goal,
            handle_accepted_callback=self._on_accepted,
            cancel_callback=lambda _h: CancelResponse.ACCEPT,
            callback_group=ReentrantCallbackGroup())

    # ------------------------------------------------------------------ parameters
    def _joints(self) -> list[str]:
        return list(self.world.joint_names)

    def _hold(self):
        """Hold where the controlled joints are (cancel, a violated bound)."""
        self.world.hold()

    def _start(self, cmd) -> tuple[float, float]:
        """Start ``cmd`` (under the lock); its (start, end) on the controller's clock."""
        traj = self.world.set_trajectory(cmd)
        return traj.start_time, traj.end_time

    def _declare_parameters(self):
        n, px = self.node, self.prefix
        declare(n, px + 'controller_active', True, 'false: the controller is inactive; goals are '
                'rejected and topic trajectories ignored')
        declare(n, px + 'invalid_goal_response', 'reject', 'a goal failing the check: reject '
                '(ros2_control JTC) or abort with its error_code (ROS 1 JTC, some drivers)',
                choices=['reject', 'abort'])
        declare(n, px + 'action_monitor_rate', 20.0, 'follow_joint_trajectory feedback rate, Hz',
                lo=1.0, hi=500.0)
        declare(n, px + 'constraints.goal_time', 0.0, 'seconds after the last point to reach the '
                'goal bounds; 0 = wait indefinitely', lo=0.0, hi=1e6)
        # JTC's default is 0.01 rad/s; the cell's encoder-derived velocity carries ~0.02 rad/s
        # of noise (the spec's joint_state_noise_std / 10 ms), which 0.01 would rarely meet.
        declare(n, px + 'constraints.stopped_velocity_tolerance', 0.05, 'goal velocity bound, '
                'rad/s; 0 = unchecked', lo=0.0, hi=1e6)
        for j in self._joints():
            declare(n, f'{px}constraints.{j}.trajectory', 0.0, f'path position bound of {j}, rad; '
                    '0 = unchecked', lo=0.0, hi=1e6)
            declare(n, f'{px}constraints.{j}.goal', 0.0, f'goal position bound of {j}, rad; '
                    '0 = unchecked', lo=0.0, hi=1e6)

    def _param(self, name):
        return self.node.get_parameter(self.prefix + name).value

    def controller_active(self) -> bool:
        return bool(self._param('controller_active'))

    def _constraints(self) -> tg.ControllerConstraints:
        stopped = float(self._param('constraints.stopped_velocity_tolerance'))
        joints = self._joints()
        return tg.ControllerConstraints(
            path={j: tg.Bound(float(self._param(f'constraints.{j}.trajectory'))) for j in joints},
            goal={j: tg.Bound(float(self._param(f'constraints.{j}.goal')), stopped)
                  for j in joints},
            goal_time=float(self._param('constraints.goal_time')))

    # ------------------------------------------------------------------ goal check
    def _prepare(self, goal):
        """(command, tolerances) for an acceptable goal; GoalRefused otherwise."""
        traj = goal.trajectory
        joints = list(self.world.joint_names)
        stamp = traj.header.stamp.sec + traj.header.stamp.nanosec * 1e-9
        start = None if stamp == 0.0 else stamp - self._offset()
        last = (traj.points[-1].time_from_start.sec
                + traj.points[-1].time_from_start.nanosec * 1e-9) if traj.points else 0.0
        tg.check_goal(joints, list(traj.joint_names), len(traj.points), start, last,
                      self.world.time)
        try:
            cmd = self._to_command(traj, start)
            f = self.world.follower
            validate_trajectory(cmd, joints, f.lower, f.upper, f.velocity_limits,
                                f.allow_partial)
        except TrajectoryError as exc:
            raise tg.GoalRefused(tg.INVALID_GOAL, str(exc)) from None

        def entries(tols):
            return [tg.ToleranceEntry(t.name, t.position, t.velocity, t.acceleration)
                    for t in tols]
        if goal.multi_dof_trajectory.joint_names:
            raise tg.GoalRefused(tg.INVALID_JOINTS, 'multi_dof_trajectory: this controller '
                                 'has no multi-DOF joints')
        gtt = goal.goal_time_tolerance.sec + goal.goal_time_tolerance.nanosec * 1e-9
        tol = tg.resolve_tolerances(joints, self._constraints(), entries(goal.path_tolerance),
                                    entries(goal.goal_tolerance), gtt)
        return cmd, tol

    def _on_goal(self, goal):
        if not self.controller_active():
            self.node.get_logger().error(f'{self.label}: goal rejected: the '
                                         'controller is not active')
            return GoalResponse.REJECT
        if self._param('invalid_goal_response') == 'abort':
            return GoalResponse.ACCEPT    # checked again in _execute, which aborts with it
        try:
            self._prepare(goal)
        except tg.GoalRefused as exc:
            self.node.get_logger().error(
                f'{self.label}: goal rejected ({tg.error_name(exc.code)}): '
                f'{exc.message}')
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    # ------------------------------------------------------------------ execution
    def _finish(self, handle, code: int, message: str, how: str):
        result = self.action_type.Result(error_code=int(code), error_string=message)
        getattr(handle, how)()
        text = f'{self.label}: {how}: {tg.error_name(code)}' + (
            f': {message}' if message else '')
        if how == 'succeed':
            self.node.get_logger().info(text)
        else:
            self.node.get_logger().warning(text)
        return result

    def _on_accepted(self, handle):
        """Like JTC, the trajectory takes over as the goal is accepted (the execute callback
        only supervises): no executor scheduling delay between acceptance and motion."""
        key = bytes(handle.goal_id.uuid)
        try:
            cmd, tol = self._prepare(handle.request)
            with self._lock:
                start, end = self._start(cmd)
                self._preempt_locked('preempted by a newer follow_joint_trajectory goal')
                self._active = _Active(tg.GoalMonitor(tol, start, end, self.unit))
                self._started[key] = self._active
        except tg.GoalRefused as exc:
            self._started[key] = tg.Outcome(exc.code, exc.message)
        except TrajectoryError as exc:   # the world changed since the check
            self._started[key] = tg.Outcome(tg.INVALID_GOAL, str(exc))
        handle.execute()

    def _execute(self, handle):
        active = self._started.pop(bytes(handle.goal_id.uuid))
        if isinstance(active, tg.Outcome):
            return self._finish(handle, active.code, active.message, 'abort')
        period = 1.0 / float(self._param('action_monitor_rate'))
        feedback = self.action_type.Feedback()
        while not active.done.wait(period):
            if handle.is_cancel_requested:
                with self._lock:
                    if self._active is active:
                        self._active = None
                        self._hold()
                if active.outcome is None:
                    handle.canceled()
                    self.node.get_logger().info(f'{self.label}: canceled; '
                                                'holding position')
                    return self.action_type.Result(error_code=tg.SUCCESSFUL,
                                                   error_string='canceled; holding position')
            if not self.node.context.ok():
                return self._finish(handle, tg.INVALID_GOAL, 'controller shutting down',
                                    'abort')
            state = active.state
            if state is not None:
                self._fill_feedback(feedback, state, active.monitor.start_time)
                handle.publish_feedback(feedback)
        out = active.outcome
        return self._finish(handle, out.code, out.message,
                            'succeed' if out.succeeded else 'abort')

    def _fill_feedback(self, fb, state, start: float):
        def stamp(msg, seconds):
            whole = math.floor(seconds)
            msg.sec = int(whole)
            msg.nanosec = min(int(round((seconds - whole) * 1e9)), 999_999_999)
        stamp(fb.header.stamp, self._offset() + state['time'])
        fb.joint_names = list(state['joint_names'])
        fb.desired = JointTrajectoryPoint(
            positions=state['reference_positions'].tolist(),
            velocities=state['reference_velocities'].tolist(),
            accelerations=state['reference_accelerations'].tolist())
        fb.actual = JointTrajectoryPoint(positions=state['feedback_positions'].tolist(),
                                         velocities=state['feedback_velocities'].tolist())
        fb.error = JointTrajectoryPoint(positions=state['error_positions'].tolist(),
                                        velocities=state['error_velocities'].tolist())
        for p in (fb.desired, fb.actual, fb.error):
            stamp(p.time_from_start, max(0.0, state['time'] - start))

    def _preempt_locked(self, reason: str):
        old = self._active
        if old is not None and old.outcome is None:
            old.outcome = tg.Outcome(tg.INVALID_GOAL, reason)
            old.done.set()
        self._active = None

    def preempt(self, reason: str):
        """End the active goal (a topic trajectory replaced it); the motion is the new one's."""
        with self._lock:
            self._preempt_locked(reason)

    def update(self, state: dict):
        """One controller update (the physics thread): check the active goal's bounds."""
        with self._lock:
            active = self._active
            if active is None:
                return
            active.state = state
            out = active.monitor.update(state['time'], state['reference_positions'],
                                        state['reference_velocities'],
                                        state['feedback_positions'],
                                        state['feedback_velocities'])
            if out is None:
                return
            if not out.succeeded:
                self._hold()
            active.outcome = out
            self._active = None
        active.done.set()

    def destroy(self):
        self.preempt('controller shutting down')
        self._server.destroy()

