"""system_identification: probe motions (through the executor) or recorded bags -> the twin's
physical parameters with 95% intervals.

Action ``~/identify`` (real2sim2real_msgs/action/Identify):

* live (no bag_paths): moves the arm to ``probe_center`` (current position when empty), then
  runs ``num_probes`` multi-sine probes (inside the joint limits, ``probe_velocity_fraction``
  of the velocity limits) through the executor's ``execute_trajectory`` action with
  record=true, and reads the bags it returns. The node never arms the executor: the operator
  does; a disarmed executor gives EXECUTION_FAILED with the executor's message;
* offline: the given bags (any executor recording: commanded JointTrajectory + JointState);
* fit (core.sysid.fit.identify) of the parameters declared in ``parameters_file`` (or the
  goal's subset) on all recordings but the last, which is held out to score the fit;
* writes ``<run_dir>/identify_<n>/`` (parameters.yaml, report.png, manifest.json), publishes
  the latched ``physical_parameters`` and pushes them to ``<sim_server>/set_physical_parameters``
  when that service is up.

The twin's servo gains are the controller configuration the lab knows (``known:`` in the
parameters file), not identified. Error codes map one to one onto the core's exceptions
(:func:`error_code_for`). Exit code 2 with one line on stderr for unusable parameters.
"""
from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import numpy as np
import rclpy
from rclpy.action import ActionClient, ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from real2sim2real_msgs.action import ExecuteTrajectory, Identify
from real2sim2real_msgs.msg import PhysicalParameter, PhysicalParameterSet
from real2sim2real_msgs.srv import SetPhysicalParameters

from .. import qos
from ..core.parameters import InvalidBoundsError, ParameterError, UnknownParameterError
from ..core.sysid.bags import BagRecordingError, MissingTopicsError
from ..core.sysid.fit import NotConvergedError
from ..core.twin import UnstableTwinError
from ..params import declare
from ..ros_main import ConfigurationError, run_node
from ..ros_time import duration_msg
from ..subscriptions import subscribed

NODE_NAME = 'system_identification'
IR = Identify.Result


class _Fail(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def error_code_for(exc: BaseException) -> int:
    """Identify.Result error code of a core exception (order: most specific first)."""
    for cls, code in ((MissingTopicsError, IR.MISSING_TOPICS),
                      (BagRecordingError, IR.MISSING_TOPICS),
                      (UnknownParameterError, IR.UNKNOWN_PARAMETER),
                      (InvalidBoundsError, IR.INVALID_BOUNDS),
                      (NotConvergedError, IR.NOT_CONVERGED),
                      (UnstableTwinError, IR.UNSTABLE_TWIN)):
        if isinstance(exc, cls):
            return code
    return IR.INVALID_BOUNDS if isinstance(exc, ParameterError) else IR.NOT_CONVERGED


def _points(times, positions, velocities=None):
    out = []
    for i, t in enumerate(times):
        p = JointTrajectoryPoint(positions=[float(x) for x in positions[i]],
                                 time_from_start=duration_msg(float(t)))
        if velocities is not None:
            p.velocities = [float(x) for x in velocities[i]]
        out.append(p)
    return out


def move_trajectory(q_from, q_to, velocity_limits, fraction=0.25, rate=20.0):
    """Smooth (minimum-jerk) move at ``fraction`` of the velocity limits, at least 1 s."""
    q_from, q_to = np.asarray(q_from, float), np.asarray(q_to, float)
    peak = 1.875   # max of d/ds (10 s^3 - 15 s^4 + 6 s^5)
    duration = max(1.0, float(np.max(np.abs(q_to - q_from) * peak
                                      / (fraction * np.asarray(velocity_limits)))))
    t = np.linspace(0.0, duration, max(2, int(math.ceil(duration * rate))) + 1)[1:]
    s = t / duration
    shape = 10 * s ** 3 - 15 * s ** 4 + 6 * s ** 5
    dshape = (30 * s ** 2 - 60 * s ** 3 + 30 * s ** 4) / duration
    d = q_to - q_from
    return t, q_from + shape[:, None] * d, dshape[:, None] * d


class SystemIdentificationNode(Node):
    def __init__(self):
        super().__init__(NODE_NAME)
        self._lock = threading.Lock()
        self._read_parameters()
        self._robot = None
        self._robot_error = 'waiting for robot_description'
        self._q: np.ndarray | None = None
        self._q_names: list[str] = []
        self._runs = 0
        cb = ReentrantCallbackGroup()
        self.pub_params = self.create_publisher(PhysicalParameterSet, 'physical_parameters',
                                                qos.LATCHED)
        self._cb = cb  # /joint_states is subscribed only while a goal runs (subscriptions.py)
        if self.p_description_file:
            self._load_robot(self.p_description_file, fatal=True)
        else:
            self.create_subscription(String, 'robot_description', self._on_description,
                                     qos.LATCHED,
                                     callback_group=MutuallyExclusiveCallbackGroup())
        self._executor_client = ActionClient(self, ExecuteTrajectory, self.p_executor_action,
                                             callback_group=cb)
        self._sim_client = self.create_client(
            SetPhysicalParameters, f'{self.p_sim_server}/set_physical_parameters',
            callback_group=cb)
        self._action = ActionServer(
            self, Identify, '~/identify', self._on_identify,
            goal_callback=lambda _g: GoalResponse.ACCEPT,
            cancel_callback=lambda _g: CancelResponse.ACCEPT, callback_group=cb)
        self.get_logger().info(f'system_identification ready; parameters from '
                               f'{self.p_parameters_file}')

    # ------------------------------------------------------------------ setup
    def _read_parameters(self):
        try:
            self.p_parameters_file = declare(
                self, 'parameters_file', '',
                "Identification config (known: values, parameters: priors/bounds); '' = the "
                "package's config/identification.yaml.")
            if not self.p_parameters_file:
                from ament_index_python.packages import get_package_share_directory
                self.p_parameters_file = str(Path(get_package_share_directory(
                    'real2sim2real_ros')) / 'config' / 'identification.yaml')
            self.p_description_file = declare(
                self, 'robot_description_file', '',
                "URDF of the robot; '' = the latched robot_description topic.", read_only=True)
            self.p_joint_states_topic = declare(self, 'joint_states_topic', 'joint_states',
                                                'Joint states of the cell.', read_only=True)
            self.p_executor_action = declare(
                self, 'executor_action', 'robot_executor/execute_trajectory',
                'ExecuteTrajectory action that runs the probes.', read_only=True)
            self.p_sim_server = declare(self, 'sim_server', 'sim_server',
                                        'Node whose set_physical_parameters gets the result.',
                                        read_only=True)
            self.p_num_probes = declare(self, 'num_probes', 3,
                                        'Probes per live identification (the last is held '
                                        'out).', lo=1, hi=50)
            self.p_duration = declare(self, 'probe_duration', 3.0, 'Seconds per probe.',
                                      lo=1.5, hi=60.0)
            self.p_amplitude = declare(self, 'probe_amplitude', 0.35,
                                       'Peak joint excursion (rad) about the centre.',
                                       lo=0.01, hi=1.5)
            self.p_vel_fraction = declare(self, 'probe_velocity_fraction', 0.8,
                                          'Peak probe speed as a fraction of the velocity '
                                          'limits.', lo=0.05, hi=1.0)
            # A typed, unset default: rclpy would type an empty list default as bytes.
            self.p_center = declare(self, 'probe_center', Parameter.Type.DOUBLE_ARRAY,
                                    'Joint positions (rad) the probes move about; unset = '
                                    'where the arm is.', type_='double_array') or []
            self.p_settle = declare(self, 'settle_time', 0.5,
                                    'Rest (s) after the move to the centre and between probes.',
                                    lo=0.0, hi=10.0)
            self.p_nthread = declare(self, 'nthread', 2, 'Threads of batched rollouts.',
                                     lo=1, hi=64)
            self.p_max_iter = declare(self, 'max_iter', 30, 'Least-squares iterations.',
                                      lo=1, hi=1000)
            self.p_timestep = declare(self, 'timestep', 0.001, 'Twin timestep (s).',
                                      lo=0.0001, hi=0.01)
            self.p_run_dir = declare(self, 'run_dir', '', "Run directory for identify_<n>; "
                                     "'' = a temporary one.")
        except Exception as exc:  # noqa: BLE001
            err = ConfigurationError(f'system_identification parameters: {exc}')
            err.node_name = NODE_NAME
            raise err from None

    def _load_robot(self, source: str, fatal: bool):
        from ..core.robot_description import load_robot
        try:
            robot = load_robot(source)
        except Exception as exc:  # noqa: BLE001 - any unusable URDF
            text = f'robot description unusable: {str(exc).splitlines()[0]}'
            if fatal:
                err = ConfigurationError(text)
                err.node_name = NODE_NAME
                raise err from None
            self.get_logger().error(text)
            self._robot_error = text
            return
        with self._lock:
            self._robot, self._robot_error = robot, ''

    def _on_description(self, msg: String):
        self._load_robot(msg.data, fatal=False)

    def _on_joint_states(self, msg: JointState):
        with self._lock:
            self._q_names = list(msg.name)
            self._q = np.array(msg.position, float)

    # ------------------------------------------------------------------ action
    def _on_identify(self, goal_handle):
        result = IR()
        t0 = time.monotonic()
        try:
            with subscribed(self, JointState, self.p_joint_states_topic, self._on_joint_states,
                            qos.STATE, self._cb):
                self._identify(goal_handle, result)
            code, text = IR.NONE, ''
        except _Fail as exc:
            code, text = exc.code, exc.message
        except Exception as exc:  # noqa: BLE001 - core errors map onto codes; never crash
            code, text = error_code_for(exc), f'{type(exc).__name__}: {exc}'
        result.error_code, result.error_msg = code, text
        if code == IR.NONE:
            goal_handle.succeed()
            self.get_logger().info(f'identify: done in {time.monotonic() - t0:.1f} s, residual '
                                   f'{result.residual_before:.3g} -> {result.residual_after:.3g}'
                                   f' rad, report {result.report_path}')
        elif code == IR.CANCELED and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        else:
            goal_handle.abort()
            self.get_logger().warning(f'identify failed ({code}): {text}')
        return result

    def _feedback(self, goal_handle, stage, progress, residual=math.nan):
        fb = Identify.Feedback(stage=stage, progress=float(progress), residual=float(residual))
        goal_handle.publish_feedback(fb)
        if goal_handle.is_cancel_requested:
            raise _Fail(IR.CANCELED, f'canceled during {stage}')

    def _identify(self, goal_handle, result):
        from ..core.artifacts import RunDirectory
        from ..core.sysid.bags import recording_from_bag
        from ..core.sysid.config import load_identification_config
        from ..core.sysid.fit import identify
        from ..core.twin import Twin
        goal = goal_handle.request
        config = load_identification_config(self.p_parameters_file)
        specs = config.select(list(goal.parameter_names))
        # A goal sent right after bringup may arrive before the latched robot_description:
        # give it a few seconds rather than failing at once.
        deadline = time.monotonic() + 10.0
        while True:
            with self._lock:
                robot = self._robot
            if robot is not None or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if robot is None:
            raise _Fail(IR.EXECUTION_FAILED, f'no robot model: {self._robot_error}')
        twin = Twin(robot, timestep=self.p_timestep)
        twin.validate_names(list(config.known) + [s.name for s in specs])
        twin.set_parameters(config.known)
        run_dir = goal.run_dir or self.p_run_dir
        if not run_dir:
            import tempfile
            run_dir = tempfile.mkdtemp(prefix='r2s2r_identify_')
        bags = list(goal.bag_paths)
        probes = []
        if not bags:
            bags, probes = self._excite(goal_handle, robot, int(goal.num_probes)
                                        or self.p_num_probes)
        self._feedback(goal_handle, 'read_bags', 0.0)
        recs = [recording_from_bag(b, robot.joint_names, name=f'probe_{i}')
                for i, b in enumerate(bags)]
        fit_recs, heldout = (recs[:-1], recs[-1:]) if len(recs) > 1 else (recs, [])
        self._feedback(goal_handle, 'fit', 0.0)
        fit = identify(twin, specs, fit_recs, heldout=heldout, nthread=self.p_nthread,
                       max_iter=self.p_max_iter,
                       progress=lambda stage, p, r: self._feedback(goal_handle, 'fit', p, r))
        self._feedback(goal_handle, 'report', 0.95, fit.residual_after)
        priors = {s.name: s.prior for s in specs}
        stage = RunDirectory(run_dir).new_stage('identify', inputs={
            'bag_paths': [str(b) for b in bags], 'live_probes': probes,
            'heldout': [str(bags[-1])] if heldout else [],
        }, parameters={
            'parameters_file': self.p_parameters_file, 'known': config.known,
            'declared': [vars(s) for s in specs], 'timestep': self.p_timestep,
            'nthread': self.p_nthread, 'max_iter': self.p_max_iter})
        params_path = fit.parameters.save(stage.folder / 'parameters.yaml')
        from ..core.sysid.report import write_report
        report = write_report(stage.folder / 'report.png', twin, fit,
                              (heldout or fit_recs)[-1], priors)
        stage.add_output('parameters', params_path)
        stage.add_output('report', report)
        stage.results = {
            'residual_before': fit.residual_before, 'residual_after': fit.residual_after,
            'heldout_error_before': fit.heldout_error_before,
            'heldout_error_after': fit.heldout_error_after, 'fit_wall_s': fit.wall_time,
            'rollouts': fit.n_rollouts, 'method': fit.method, 'iterations': fit.iterations,
            'estimates': fit.parameters.to_dict()['parameters']}
        stage.finish()
        msg = PhysicalParameterSet(artifact_dir=str(stage.folder))
        msg.header.stamp = self.get_clock().now().to_msg()
        for e in fit.parameters:
            msg.parameters.append(PhysicalParameter(
                name=e.name, value=e.value, lower_95=e.lower_95, upper_95=e.upper_95,
                prior=e.prior, unit=e.unit, identified=e.identified))
        self.pub_params.publish(msg)
        self._push_to_sim(msg)
        result.parameters = msg
        result.residual_before, result.residual_after = fit.residual_before, fit.residual_after
        result.heldout_error_before = fit.heldout_error_before
        result.heldout_error_after = fit.heldout_error_after
        result.report_path = str(report)
        self._feedback(goal_handle, 'done', 1.0, fit.residual_after)

    def _push_to_sim(self, msg: PhysicalParameterSet):
        if not self._sim_client.service_is_ready():
            self.get_logger().info('sim_server not up: parameters not pushed to the twin')
            return
        done = threading.Event()
        future = self._sim_client.call_async(
            SetPhysicalParameters.Request(parameters=list(msg.parameters)))
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(5.0) or not future.result().success:
            why = 'no answer' if not done.is_set() else future.result().message
            self.get_logger().warning(f'pushing parameters to the twin failed: {why}')

    # ------------------------------------------------------------------ excitation
    def _current(self, robot) -> np.ndarray:
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            with self._lock:
                q, names = self._q, self._q_names
            if q is not None and all(n in names for n in robot.joint_names):
                return np.array([q[names.index(n)] for n in robot.joint_names])
            time.sleep(0.05)
        raise _Fail(IR.EXECUTION_FAILED,
                    f'no {self.p_joint_states_topic} with joints {list(robot.joint_names)}')

    def _execute(self, goal_handle, robot, times, pos, vel, record: bool, what: str):
        if not self._executor_client.wait_for_server(timeout_sec=5.0):
            raise _Fail(IR.EXECUTION_FAILED, f'executor action {self.p_executor_action} is '
                        f'not available')
        traj = JointTrajectory(joint_names=list(robot.joint_names),
                               points=_points(times, pos, vel))
        goal = ExecuteTrajectory.Goal(trajectory=traj, record=record)
        done = threading.Event()
        send = self._executor_client.send_goal_async(goal)
        send.add_done_callback(lambda _f: done.set())
        if not done.wait(15.0) or not send.result().accepted:
            raise _Fail(IR.EXECUTION_FAILED, f'{what}: the executor did not accept the goal')
        handle = send.result()
        got = threading.Event()
        res_future = handle.get_result_async()
        res_future.add_done_callback(lambda _f: got.set())
        deadline = time.monotonic() + float(times[-1]) + 30.0
        while not got.wait(0.1):
            if goal_handle.is_cancel_requested:
                handle.cancel_goal_async()
                got.wait(5.0)
                raise _Fail(IR.CANCELED, f'canceled during {what}')
            if time.monotonic() > deadline or not rclpy.ok():
                raise _Fail(IR.EXECUTION_FAILED, f'{what}: no result from the executor')
        res = res_future.result().result
        if res.error_code != ExecuteTrajectory.Result.NONE:
            raise _Fail(IR.EXECUTION_FAILED,
                        f'{what}: executor error {res.error_code}: {res.error_msg}')
        if record and not res.bag_path:
            raise _Fail(IR.EXECUTION_FAILED, f'{what}: the executor recorded no bag (its '
                        f'run_dir parameter is empty?)')
        return res.bag_path

    def _excite(self, goal_handle, robot, n: int):
        from ..core.sysid.probes import ProbeError, multisine_probe
        q = self._current(robot)
        center = np.asarray(self.p_center, float) if len(self.p_center) else q
        if center.shape != q.shape:
            raise _Fail(IR.EXECUTION_FAILED, f'probe_center has {center.size} values for '
                        f'{q.size} joints')
        try:
            probes = [multisine_probe(robot.joint_names, center, robot.lower, robot.upper,
                                      robot.velocity_limits, duration=self.p_duration,
                                      amplitude=self.p_amplitude,
                                      velocity_fraction=self.p_vel_fraction, seed=s,
                                      name=f'probe_{s}') for s in range(n)]
        except ProbeError as exc:
            raise _Fail(IR.EXECUTION_FAILED, f'cannot build probes: {exc}') from None
        if np.max(np.abs(center - q)) > 1e-3:
            self._feedback(goal_handle, 'move_to_center', 0.0)
            t, p, v = move_trajectory(q, center, robot.velocity_limits)
            self._execute(goal_handle, robot, t, p, v, False, 'move to the probe centre')
        bags = []
        for i, probe in enumerate(probes):
            time.sleep(self.p_settle)
            self._feedback(goal_handle, f'excite {i + 1}/{n}', i / n * 0.5)
            # An explicit point at t = 0 on the centre: the reference starts there whatever
            # the controller held before, so the bag alone defines the run.
            times = np.concatenate([[0.0], probe.times])
            pos = np.vstack([center, probe.positions])
            vel = np.vstack([np.zeros_like(center), probe.velocities])
            bags.append(self._execute(goal_handle, robot, times, pos, vel, True, probe.name))
        return bags, [p.name for p in probes]

    def close(self):
        self._action.destroy()


def main(args=None):
    return run_node(SystemIdentificationNode, args=args)


if __name__ == '__main__':
    raise SystemExit(main())
