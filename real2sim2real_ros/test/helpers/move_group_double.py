"""TEST DOUBLE of MoveIt's move_group ``execute_trajectory`` action (moveit_msgs/action/
ExecuteTrajectory), for the robot executor's ``moveit`` backend where MoveIt is absent.

Not MoveIt: no planning scene, no collision or start-state checks, no time parameterisation.
It does only what move_group's TrajectoryExecutionManager does with a goal through
moveit_simple_controller_manager's FollowJointTrajectory handler: forward
``trajectory.joint_trajectory`` to ``<controller>/follow_joint_trajectory`` (the first of
``controller_names``, else ``default_controller``) and map the outcome: SUCCESS, CONTROL_FAILED
(goal rejected or aborted; the controller's error_string in ``message``), PREEMPTED (a newer
goal replaced it: the newer one is forwarded, which preempts it at the controller too);
cancel cancels the controller goal. An empty or multi-DOF trajectory is
INVALID_MOTION_PLAN. ``source`` is 'move_group_double'.
"""
from __future__ import annotations

import threading

import rclpy
from rclpy.action import ActionClient, ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import MultiThreadedExecutor


class MoveGroupDouble:
    """Serves ``execute_trajectory`` in a private rclpy context until :meth:`close`."""

    def __init__(self, default_controller: str = 'joint_trajectory_controller',
                 action_name: str = 'execute_trajectory'):
        from control_msgs.action import FollowJointTrajectory
        from moveit_msgs.action import ExecuteTrajectory
        self.FJT, self.ET = FollowJointTrajectory, ExecuteTrajectory
        self.default_controller = default_controller
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node('move_group_double', context=self.ctx)
        self._group = ReentrantCallbackGroup()
        self._clients: dict[str, ActionClient] = {}
        self._lock = threading.Lock()
        self._generation = 0
        self.goals = 0
        self._server = ActionServer(
            self.node, ExecuteTrajectory, action_name, execute_callback=self._execute,
            goal_callback=lambda _g: GoalResponse.ACCEPT,
            cancel_callback=lambda _h: CancelResponse.ACCEPT, callback_group=self._group)
        self._executor = MultiThreadedExecutor(num_threads=4, context=self.ctx)
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._executor.spin, daemon=True)
        self._thread.start()
        # move_group's controller manager makes its controllers' action clients at start-up;
        # one made at the first goal spends that goal's first ~0.5-1 s on discovery, late
        # enough that the executor measured 0.153 rad of tracking error on it.
        self._client(default_controller)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Block until the default controller's follow_joint_trajectory server is seen."""
        if not self._client(self.default_controller).wait_for_server(timeout_sec=timeout):
            raise TimeoutError(f'/{self.default_controller}/follow_joint_trajectory not seen '
                               f'within {timeout:.0f} s')

    def _client(self, controller: str) -> ActionClient:
        with self._lock:
            if controller not in self._clients:
                self._clients[controller] = ActionClient(
                    self.node, self.FJT, f'/{controller}/follow_joint_trajectory',
                    callback_group=self._group)
            return self._clients[controller]

    def _result(self, val: int, message: str = ''):
        res = self.ET.Result()
        res.error_code.val = val
        res.error_code.message = message
        res.error_code.source = 'move_group_double'
        return res

    @staticmethod
    def _wait(future, timeout: float, cancelled=lambda: False):
        done = threading.Event()
        future.add_done_callback(lambda _f: done.set())
        while not done.wait(0.02):
            timeout -= 0.02
            if timeout <= 0 or cancelled():
                return False
        return True

    def _execute(self, handle):
        codes = self.ET.Result().error_code
        with self._lock:
            self._generation += 1
            gen = self._generation
            self.goals += 1
        traj = handle.request.trajectory
        if not traj.joint_trajectory.points or traj.multi_dof_joint_trajectory.joint_names:
            handle.abort()
            return self._result(codes.INVALID_MOTION_PLAN, 'empty or multi-DOF trajectory')
        controller = (list(handle.request.controller_names) or [self.default_controller])[0]
        client = self._client(controller)
        if not client.wait_for_server(timeout_sec=5.0):
            handle.abort()
            return self._result(codes.CONTROL_FAILED, f'{controller}: no action server')
        goal = self.FJT.Goal(trajectory=traj.joint_trajectory)
        sent = client.send_goal_async(goal)
        if not self._wait(sent, 10.0):
            handle.abort()
            return self._result(codes.CONTROL_FAILED, f'{controller}: no goal response')
        fjt = sent.result()
        if not fjt.accepted:
            handle.abort()
            return self._result(codes.CONTROL_FAILED, f'{controller} rejected the trajectory')
        result = fjt.get_result_async()
        handle.publish_feedback(self.ET.Feedback(state='MONITOR'))
        while not self._wait(result, 0.05):
            if handle.is_cancel_requested:
                self._wait(fjt.cancel_goal_async(), 5.0)
                handle.canceled()
                return self._result(codes.PREEMPTED, 'canceled')
            if gen != self._generation:
                handle.abort()
                return self._result(codes.PREEMPTED, 'preempted by a newer goal')
        res = result.result().result
        if gen != self._generation:
            handle.abort()
            return self._result(codes.PREEMPTED, 'preempted by a newer goal')
        if res.error_code == self.FJT.Result.SUCCESSFUL:
            handle.succeed()
            return self._result(codes.SUCCESS)
        handle.abort()
        return self._result(codes.CONTROL_FAILED, f'{controller}: error_code '
                            f'{res.error_code}: {res.error_string}')

    def close(self):
        self._server.destroy()
        with self._lock:   # destroy_node would leave them to the garbage collector
            for client in self._clients.values():
                client.destroy()
            self._clients.clear()
        self._executor.shutdown(timeout_sec=2.0)
        rclpy.try_shutdown(context=self.ctx)
        self._thread.join(timeout=2.0)
