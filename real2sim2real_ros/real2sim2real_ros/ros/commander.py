"""Operator facade over the graph, in the manner of nav2_simple_commander.

Scripts, the ``r2s2r`` CLI, the demo and the integration tests all drive the nodes through
this class: it calls the nodes' real services and actions over DDS and nothing else.

    from real2sim2real_ros.ros.commander import Commander
    with Commander() as cmd:
        cmd.wait_until_up(timeout=30)
        cmd.arm()
        result = cmd.execute_trajectory(names, points, feedback=print)
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import rclpy
from rclpy.executors import (
    ExternalShutdownException,
    ShutdownException,
    SingleThreadedExecutor,
)
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_srvs.srv import SetBool, Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from real2sim2real_msgs.action import (
    Evaluate,
    ExecutePolicy,
    ExecuteTrajectory,
    Identify,
    Rollout,
    RunLoop,
    Train,
)
from real2sim2real_msgs.msg import PhysicalParameter, PhysicalParameterSet
from real2sim2real_msgs.srv import (
    GetPhysicalParameters,
    GetStatus,
    ResetObjects,
    ResetSim,
    SetPhysicalParameters,
    StepSim,
)

from . import qos
from .goal_client import GoalClient
from .ros_time import duration_msg

# What a complete graph offers, per node: (services, actions). Relative to the namespace.
GRAPH = {
    'emulated_cell': (['emulated_cell/reset_objects'], []),
    'robot_executor': (
        ['robot_executor/arm', 'robot_executor/disarm', 'robot_executor/stop',
         'robot_executor/get_status'],
        ['robot_executor/execute_trajectory', 'robot_executor/execute_policy',
         'robot_executor/grip']),
    'sim_server': (
        ['sim_server/reset', 'sim_server/set_pause', 'sim_server/step',
         'sim_server/set_physical_parameters', 'sim_server/get_physical_parameters',
         'sim_server/load_scene'],
        ['sim_server/rollout']),
    'system_identification': ([], ['system_identification/identify']),
    'camera_capture': ([], ['camera_capture/capture']),
    'scene_reconstruction': ([], ['scene_reconstruction/reconstruct']),
    'object_tracker': (['object_tracker/reset'], []),
    'policy_trainer': ([], ['policy_trainer/train', 'policy_trainer/evaluate']),
    'loop_coordinator': ([], ['loop_coordinator/run_loop']),
}
# Only the emulated cell has these; a physical cell brings its own drivers instead.
EMULATED_ONLY = ('emulated_cell',)
# Refusals of robot_executor/arm that pass on their own right after bringup (Commander.arm).
TRANSIENT_ARM_REFUSALS = ('waiting', 'is not available', 'no joint_states within')


def expected_graph(cell: str = 'emulated') -> dict:
    """The nodes, services and actions bringup.launch.xml starts for ``cell:=<cell>``."""
    return {k: v for k, v in GRAPH.items() if cell == 'emulated' or k not in EMULATED_ONLY}


UINT32_MAX = 2**32 - 1


def count_field(name: str, value, upper: int = UINT32_MAX) -> int:
    """``value`` as a count for a uint32 goal/request field, refused (ValueError naming the
    field) when it is not a whole number in [0, ``upper``]: rosidl would otherwise send -1 as
    4294967295."""
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ValueError(f'{name} must be a whole number, got {value!r}') from None
    if n != value or not 0 <= n <= upper:
        raise ValueError(f'{name} must be a whole number in [0, {upper}], got {value!r}')
    return n


class CommanderError(RuntimeError):
    """A service or action could not be reached or answered in time."""


@dataclass
class GraphStatus:
    nodes: dict[str, bool]
    services: dict[str, bool]
    actions: dict[str, bool]

    @property
    def complete(self) -> bool:
        return all(self.nodes.values()) and all(self.services.values()) and all(
            self.actions.values())


FEEDBACK_QUIET_S = 0.3
FEEDBACK_DRAIN_MAX_S = 3.0


def _drain_feedback(last_feedback: list[float]):
    """Feedback is a topic and the result a service reply, so the server's last feedback
    messages can reach this client after the result. Wait until no feedback has come for
    FEEDBACK_QUIET_S (at most FEEDBACK_DRAIN_MAX_S), so a caller's list or progress bar holds
    them; CI on 0dee789 returned a reconstruct result before its 'meshes' and 'scene'
    feedback."""
    deadline = time.monotonic() + FEEDBACK_DRAIN_MAX_S
    while time.monotonic() < deadline:
        quiet = time.monotonic() - last_feedback[0]
        if quiet >= FEEDBACK_QUIET_S:
            return
        time.sleep(FEEDBACK_QUIET_S - quiet)


class Commander:
    """Owns an rclpy context of its own, so it can live inside any script or test."""

    def __init__(self, namespace: str = '', node_name: str = 'r2s2r_commander',
                 domain_id: int | None = None, expected: dict | None = None):
        self._ns = '/' + namespace.strip('/') if namespace.strip('/') else ''
        self._ctx = rclpy.Context()
        kwargs = {'context': self._ctx}
        if domain_id is not None:
            kwargs['domain_id'] = domain_id
        rclpy.init(**kwargs)
        self.node = Node(node_name, context=self._ctx)
        self._executor = SingleThreadedExecutor(context=self._ctx)
        self._executor.add_node(self.node)
        self._closing = threading.Event()
        self._spin_thread = threading.Thread(target=self._spin, daemon=True)
        self._spin_thread.start()
        self._expected = expected or GRAPH
        self._clients: dict[tuple, object] = {}
        self._goal_handle = None

    # -- lifecycle ---------------------------------------------------------------------------
    def _spin(self):
        # spin() would end on the first exception a callback raises, and every later answer
        # would then time out with no trace; log it and keep spinning instead.
        while not self._closing.is_set():
            try:
                self._executor.spin_once(timeout_sec=0.1)
            except (ShutdownException, ExternalShutdownException):
                return
            except Exception as exc:  # noqa: BLE001 - see above
                if self._closing.is_set() or not self._ctx.ok():
                    return
                self.node.get_logger().error(f'a callback failed: {exc!r}')

    def close(self):
        self._closing.set()
        self._spin_thread.join(timeout=2.0)   # spin_once returns within 0.1 s
        self._executor.shutdown(timeout_sec=1.0)
        # Node.destroy_node leaves action clients alive; the garbage collector then destroys
        # their DDS readers at a random later moment, and Fast DDS 3.2 can deadlock there
        # against its own discovery thread (seen: a CI run hung in ResourceEvent::
        # unregister_timer under gc, while the previous graph's participants went away;
        # eProsima/Fast-DDS#6502). Destroy them here, while this participant is quiet.
        for key, client in list(self._clients.items()):
            if key[0] != 'srv':
                client.destroy()
        self._clients.clear()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self._ctx)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- graph ---------------------------------------------------------------------------------
    def name(self, relative: str) -> str:
        return f'{self._ns}/{relative}'

    def graph_status(self) -> GraphStatus:
        nodes = {f'{ns.rstrip("/")}/{n}' for n, ns in self.node.get_node_names_and_namespaces()}
        services = {n for n, _ in self.node.get_service_names_and_types()}
        # An action server shows up as its hidden services <name>/_action/send_goal.
        actions = {n.rsplit('/_action/', 1)[0] for n in services if '/_action/' in n}
        return GraphStatus(
            nodes={self.name(n): self.name(n) in nodes for n in self._expected},
            services={self.name(s): self.name(s) in services
                      for svcs, _ in self._expected.values() for s in svcs},
            actions={self.name(a): self.name(a) in actions
                     for _, acts in self._expected.values() for a in acts},
        )

    def wait_until_up(self, timeout: float = 30.0) -> GraphStatus:
        deadline = time.monotonic() + timeout
        while True:
            status = self.graph_status()
            if status.complete:
                return status
            if time.monotonic() > deadline:
                missing = [k for d in (status.nodes, status.services, status.actions)
                           for k, v in d.items() if not v]
                raise CommanderError(f'graph not up after {timeout:.0f} s; missing: {missing}')
            time.sleep(0.2)

    # -- plumbing ------------------------------------------------------------------------------
    def _client(self, kind, srv_type, relative):
        key = (kind, relative)
        if key not in self._clients:
            make = self.node.create_client if kind == 'srv' else (
                lambda t, n: GoalClient(self.node, t, n))
            self._clients[key] = make(srv_type, self.name(relative))
        return self._clients[key]

    def _wait(self, future, timeout: float, what: str):
        done = threading.Event()
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(timeout):
            raise CommanderError(f'{what}: no answer within {timeout:.1f} s')
        return future.result()

    def call(self, srv_type, relative: str, request=None, timeout: float = 10.0,
             resend: bool = False):
        """Call a service and return its response; CommanderError when it is not available
        or no answer comes within ``timeout`` s.

        ``resend``: for a request that may be carried out twice (reads, resets, stop): when
        no answer comes, send it once more and wait ``timeout`` s again. A response can be
        lost when the client's response reader is not yet matched on the server's side
        (discovery runs separately on each side; ``wait_for_service`` sees only the client's
        side): the bad-input sweep lost ``reset_objects``'s answer once in an idle CI run
        (the service discovered, no answer within 10 s)."""
        client = self._client('srv', srv_type, relative)
        if not client.wait_for_service(timeout_sec=timeout):
            raise CommanderError(f'service {self.name(relative)} is not available')
        request = request or srv_type.Request()
        future = client.call_async(request)
        try:
            return self._wait(future, timeout, self.name(relative))
        except CommanderError:
            if not resend:
                raise
            client.remove_pending_request(future)
        self.node.get_logger().warning(
            f'{self.name(relative)}: no answer within {timeout:.1f} s; sending it once more')
        return self._wait(client.call_async(request), timeout,
                          f'{self.name(relative)} (sent twice)')

    def run_action(self, action_type, relative: str, goal, *,
                   feedback: Callable | None = None, timeout: float = 120.0,
                   cancel_after: float | None = None):
        """Send a goal, stream feedback to ``feedback(msg)``, return the result message.

        ``cancel_after`` seconds after acceptance the goal is cancelled (tests, Ctrl-C).
        """
        client = self._client('action', action_type, relative)
        if not client.wait_for_server(timeout_sec=min(timeout, 15.0)):
            raise CommanderError(f'action {self.name(relative)} is not available')
        last_feedback = [time.monotonic()]

        def on_feedback(m):
            last_feedback[0] = time.monotonic()
            feedback(m.feedback)
        handle = self._wait(
            client.send_goal_async(goal, feedback_callback=on_feedback if feedback else None),
            15.0, f'{self.name(relative)} goal')
        if not handle.accepted:
            raise CommanderError(f'{self.name(relative)} rejected the goal')
        self._goal_handle = handle
        result_future = handle.get_result_async()
        if cancel_after is not None:
            time.sleep(cancel_after)
            self._wait(handle.cancel_goal_async(), 10.0, 'cancel')
        try:
            result = self._wait(result_future, timeout, f'{self.name(relative)} result').result
        finally:
            self._goal_handle = None
        if feedback:
            _drain_feedback(last_feedback)
        return result

    def cancel_current_goal(self, timeout: float = 5.0):
        if self._goal_handle is not None:
            self._wait(self._goal_handle.cancel_goal_async(), timeout, 'cancel')

    # -- robot executor ------------------------------------------------------------------------
    def arm(self, wait: float = 10.0) -> Trigger.Response:
        """Arm the executor. It refuses until it has the robot description (a latched topic
        that may still be on its way right after bringup) and until it has discovered its
        controller backend's server (discovery runs separately on each side), and until its
        joint_states are fresh (the cell's stream is discovered separately too, and on a
        loaded PC it can pause past the executor's ``state_timeout``): retry for up to
        ``wait`` s while the refusal is one of those."""
        deadline = time.monotonic() + wait
        while True:
            resp = self.call(Trigger, 'robot_executor/arm')
            transient = any(m in resp.message for m in TRANSIENT_ARM_REFUSALS)
            if resp.success or not transient or time.monotonic() > deadline:
                return resp
            time.sleep(0.2)

    def disarm(self) -> Trigger.Response:
        return self.call(Trigger, 'robot_executor/disarm', resend=True)

    def stop(self) -> Trigger.Response:
        return self.call(Trigger, 'robot_executor/stop', resend=True)

    def executor_status(self) -> GetStatus.Response:
        return self.call(GetStatus, 'robot_executor/get_status', resend=True)

    def execute_trajectory(self, joint_names: Sequence[str],
                           points: Sequence[tuple[float, Sequence[float]]], *,
                           record: bool = True, feedback: Callable | None = None,
                           timeout: float = 120.0, cancel_after: float | None = None):
        """``points``: (time_from_start s, positions) pairs. Returns the action result."""
        traj = JointTrajectory(joint_names=list(joint_names))
        for t, q in points:
            traj.points.append(JointTrajectoryPoint(
                positions=[float(v) for v in q], time_from_start=duration_msg(t)))
        goal = ExecuteTrajectory.Goal(trajectory=traj, record=record)
        return self.run_action(ExecuteTrajectory, 'robot_executor/execute_trajectory', goal,
                               feedback=feedback, timeout=timeout, cancel_after=cancel_after)

    def execute_policy(self, checkpoint, goal: Sequence[float] = (), *, task: str = '',
                       max_duration: float = 0.0, record: bool = True,
                       feedback: Callable | None = None, timeout: float | None = None,
                       cancel_after: float | None = None):
        """Run the policy checkpoint (folder with policy.pt + policy.json) closed-loop on the
        robot through the ARMED executor. ``goal``: the task goal (slide_to_target /
        push_to_pose: x y [yaw], world frame; empty = the task's default); ``task``: the task
        the checkpoint must be for ('' = any); ``max_duration`` 0 = the node's default.
        Feedback carries ``step`` and ``elapsed``. Returns the ExecutePolicy result."""
        req = ExecutePolicy.Goal(checkpoint_path=str(checkpoint), task=str(task),
                                 task_goal=[float(v) for v in goal],
                                 max_duration=float(max_duration), record=bool(record))
        if timeout is None:
            timeout = max(120.0, float(max_duration) + 60.0)
        return self.run_action(ExecutePolicy, 'robot_executor/execute_policy', req,
                               feedback=feedback, timeout=timeout, cancel_after=cancel_after)

    def joint_state(self, timeout: float = 5.0):
        """The next /joint_states message (names, positions, velocities)."""
        got = threading.Event()
        box = {}

        def on_msg(msg):
            box.setdefault('msg', msg)
            got.set()
        sub = self.node.create_subscription(JointState, self.name('joint_states'), on_msg,
                                            qos.STATE)
        try:
            if not got.wait(timeout):
                raise CommanderError(f'no {self.name("joint_states")} within {timeout:.1f} s')
            return box['msg']
        finally:
            self.node.destroy_subscription(sub)

    # -- emulated cell -------------------------------------------------------------------------
    def reset_objects(self, object_ids: Sequence[str] = ()) -> ResetObjects.Response:
        return self.call(ResetObjects, 'emulated_cell/reset_objects',
                         ResetObjects.Request(object_ids=list(object_ids)), resend=True)

    # -- twin (sim_server) ---------------------------------------------------------------------
    def sim_reset(self, qpos: Sequence[float] = (), qvel: Sequence[float] = (),
                  keyframe: str = '') -> ResetSim.Response:
        return self.call(ResetSim, 'sim_server/reset', ResetSim.Request(
            keyframe=keyframe, qpos=[float(v) for v in qpos], qvel=[float(v) for v in qvel]))

    def sim_pause(self, paused: bool = True) -> SetBool.Response:
        return self.call(SetBool, 'sim_server/set_pause', SetBool.Request(data=bool(paused)))

    def sim_step(self, steps: int = 1, timeout: float = 60.0) -> StepSim.Response:
        """Advance the paused twin by ``steps`` physics steps."""
        req = StepSim.Request(steps=count_field('steps', steps))
        return self.call(StepSim, 'sim_server/step', req, timeout=timeout)

    def set_physical_parameters(self, values) -> SetPhysicalParameters.Response:
        """``values``: {name: value} or PhysicalParameter messages."""
        params = list(values) if not isinstance(values, dict) else [
            PhysicalParameter(name=n, value=float(v), lower_95=float(v), upper_95=float(v),
                              prior=float(v)) for n, v in values.items()]
        return self.call(SetPhysicalParameters, 'sim_server/set_physical_parameters',
                         SetPhysicalParameters.Request(parameters=params))

    def get_physical_parameters(self, names: Sequence[str] = ()
                                ) -> GetPhysicalParameters.Response:
        return self.call(GetPhysicalParameters, 'sim_server/get_physical_parameters',
                         GetPhysicalParameters.Request(names=list(names)), resend=True)

    def rollout(self, joint_names: Sequence[str],
                points: Sequence[tuple[float, Sequence[float]]], *,
                initial_qpos: Sequence[float] = (), initial_qvel: Sequence[float] = (),
                parameter_samples: Sequence[dict] = (), sample_period: float = 0.0,
                feedback: Callable | None = None, timeout: float = 120.0,
                cancel_after: float | None = None):
        """Twin rollout of ``points`` ((t, positions) pairs), once per {name: value} sample.
        Result positions are flat: num_rollouts x num_samples x len(joint_names)."""
        traj = JointTrajectory(joint_names=list(joint_names))
        for t, q in points:
            traj.points.append(JointTrajectoryPoint(
                positions=[float(v) for v in q], time_from_start=duration_msg(t)))
        samples = [PhysicalParameterSet(parameters=[
            PhysicalParameter(name=n, value=float(v)) for n, v in s.items()])
            for s in parameter_samples]
        goal = Rollout.Goal(initial_qpos=[float(v) for v in initial_qpos],
                            initial_qvel=[float(v) for v in initial_qvel], commands=traj,
                            parameter_samples=samples, sample_period=float(sample_period))
        return self.run_action(Rollout, 'sim_server/rollout', goal, feedback=feedback,
                               timeout=timeout, cancel_after=cancel_after)

    # -- system identification -----------------------------------------------------------------
    def identify(self, bag_paths: Sequence[str] = (), parameter_names: Sequence[str] = (),
                 num_probes: int = 0, run_dir: str = '', *, feedback: Callable | None = None,
                 timeout: float = 600.0, cancel_after: float | None = None):
        """Identify the twin's parameters (live probes through the ARMED executor when no bags
        are given). Returns the Identify result."""
        goal = Identify.Goal(bag_paths=[str(b) for b in bag_paths],
                             parameter_names=list(parameter_names),
                             num_probes=count_field('num_probes', num_probes),
                             run_dir=str(run_dir))
        return self.run_action(Identify, 'system_identification/identify', goal,
                               feedback=feedback, timeout=timeout, cancel_after=cancel_after)

    # -- policy trainer ------------------------------------------------------------------------
    def train(self, task: str, parameters_path: str = '', randomize: bool = False,
              total_steps: int = 0, demo_bags: Sequence[str] = (), run_dir: str = '', *,
              feedback: Callable | None = None, timeout: float = 1800.0,
              cancel_after: float | None = None):
        """Train ``task`` in the twin (identified ``parameters_path`` or the nominal twin;
        ``total_steps`` 0 = the node's budget). Feedback: stage, progress, twin_success_rate.
        Returns the Train result (checkpoint_path, twin_result)."""
        goal = Train.Goal(task=str(task), parameters_path=str(parameters_path),
                          randomize=bool(randomize),
                          total_steps=count_field('total_steps', total_steps),
                          demo_bags=[str(b) for b in demo_bags], run_dir=str(run_dir))
        return self.run_action(Train, 'policy_trainer/train', goal, feedback=feedback,
                               timeout=timeout, cancel_after=cancel_after)

    def evaluate_policy(self, checkpoint_path: str, trials: int = 0, task: str = '', *,
                        feedback: Callable | None = None, timeout: float = 600.0,
                        cancel_after: float | None = None):
        """Evaluate a checkpoint in the twin it was trained in (``trials`` 0 = the node's
        eval_trials). Feedback: trials_done, success_rate. Returns the Evaluate result."""
        goal = Evaluate.Goal(checkpoint_path=str(checkpoint_path), task=str(task),
                             trials=count_field('trials', trials))
        return self.run_action(Evaluate, 'policy_trainer/evaluate', goal, feedback=feedback,
                               timeout=timeout, cancel_after=cancel_after)

    # -- loop coordinator ----------------------------------------------------------------------
    def run_loop(self, task: str = '', run_dir: str = '', skip_stages: Sequence[str] = (),
                 resume: bool = False, *, demo_bags: Sequence[str] = (),
                 feedback: Callable | None = None,
                 timeout: float = 7200.0, cancel_after: float | None = None):
        """The whole loop (capture -> reconstruct -> identify -> train -> execute ->
        evaluate) through loop_coordinator's ``~/run_loop``. ``task``/``run_dir`` '' = the
        node's; ``skip_stages``: stages to skip (their artifacts must exist); ``resume``:
        skip the leading stages whose artifacts exist; ``demo_bags``: recorded demonstrations
        for the train stage. Feedback: stage ("<stage>[: detail]"), progress 0..1. Returns the
        RunLoop result (error_code, failed_stage, summary_path)."""
        goal = RunLoop.Goal(task=str(task), run_dir=str(run_dir),
                            skip_stages=[str(s) for s in skip_stages], resume=bool(resume),
                            demo_bags=[str(b) for b in demo_bags])
        return self.run_action(RunLoop, 'loop_coordinator/run_loop', goal, feedback=feedback,
                               timeout=timeout, cancel_after=cancel_after)
