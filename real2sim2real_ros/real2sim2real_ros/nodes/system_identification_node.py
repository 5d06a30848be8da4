"""system_identification: probe motions (through the executor) or recorded bags -> the twin's
physical parameters with 95% intervals.

Action ``~/identify`` (real2sim2real_msgs/action/Identify):

* live (no bag_paths): moves the arm to ``probe_center`` (current position when empty), then
  runs ``num_probes`` multi-sine probes (inside the joint limits, ``probe_velocity_fraction``
  of the velocity limits) through the executor's ``execute_trajectory`` action with
  record=true, and reads the bags it returns. The node never arms the executor: the operator
  does; a disarmed executor gives EXECUTION_FAILED with the executor's message;
* objects: when ``parameters_file`` declares ``objects:`` templates and a scene is known
  (``scene_file``, else the latched ``scene`` topic of scene_reconstruction), each box or
  cylinder of the scene gets ``geom/<id>/friction`` and ``body/<id>/mass``. Live, after the
  arm probes, ``strike_probes`` strike probes (core/sysid/object_probes.py: each strikes every
  object once, planned from the poses on ``tracked_objects_topic``, the friction bounds from
  the fit of the probes before) run through the same executor action; the arm gets
  ``max_probes`` - strike probes. Each strike probe's bag (``<execute_n>/strike_probe``) holds
  the executor's recording, the tracked poses received meanwhile and the plan, so the bags
  alone reproduce the fit. No tracked poses: MISSING_TOPICS; an object that left the table or
  the camera's view: EXECUTION_FAILED naming it;
* offline: the given bags (any executor recording: commanded JointTrajectory + JointState;
  strike probe bags are recognised by their plan);
* fit (core.sysid.fit.identify: regression + one rollout polish for the arm, see there; its
  warnings -- estimates pinned at a bound, residual above the joint-state noise, contact
  spikes -- are logged and written to the manifest, and such estimates come back with
  identified=false) of the parameters declared in ``parameters_file`` (or the
  goal's subset) on all recordings but the last, which is held out to score the fit (with
  strike probes: on all arm probes, scored on the held-out strike probe's joints); then the
  objects (core.sysid.object_fit.final_object_fits) on a fresh twin with the arm's estimates;
* writes ``<run_dir>/identify_<n>/`` (parameters.yaml, report.png, objects.png with tracked
  vs simulated object paths, manifest.json), publishes the latched ``physical_parameters`` and
  pushes them to ``<sim_server>/set_physical_parameters`` when that service is up (the arm's
  and the objects' in two calls: a twin without the scene still takes the arm's).

The twin's servo gains are the controller configuration the lab knows (the parameters file's
``controller_config``, a ros2_control YAML: core/controller_config.py), not identified. The
stage itself (probes, fits, the folder) is core/sysid/stage.py, which the evaluation harness
runs too; the manifest's results carry its per-sub-stage wall times (``profile``). Error
codes map one to one onto the core's exceptions (:func:`error_code_for`). Exit code 2 with
one line on stderr for unusable parameters.
"""
from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import numpy as np
import rclpy
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from real2sim2real_msgs.action import ExecuteTrajectory, Identify
from real2sim2real_msgs.msg import PhysicalParameter, PhysicalParameterSet, Scene, TrackedObjects
from real2sim2real_msgs.srv import SetPhysicalParameters

from ..core.parameters import InvalidBoundsError, ParameterError, UnknownParameterError
from ..core.sysid.bags import BagRecordingError, MissingTopicsError
from ..core.sysid.fit import NotConvergedError
from ..core.sysid.stage import ProbeExecutionError
from ..core.twin import TwinError, UnstableTwinError
from ..ros import qos
from ..ros.goal_client import GoalClient
from ..ros.params import declare
from ..ros.ros_main import ConfigurationError, run_node
from ..ros.ros_time import NodeDeadline, duration_msg
from ..ros.subscriptions import subscribed

NODE_NAME = 'system_identification'
IR = Identify.Result
MAX_PROBES = 50        # live probes per identify goal (and the num_probes parameter)
MAX_IDENTIFY_BAGS = 1000   # bag_paths per identify goal


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
                      (UnstableTwinError, IR.UNSTABLE_TWIN),
                      (ProbeExecutionError, IR.EXECUTION_FAILED)):
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
        self._scene_path = ''
        self._tracked: list = []
        self._arm_values: dict = {}
        cb = ReentrantCallbackGroup()
        self.pub_params = self.create_publisher(PhysicalParameterSet, 'physical_parameters',
                                                qos.LATCHED)
        self._cb = cb  # /joint_states is subscribed only while a goal runs (ros/subscriptions.py)
        if self.p_description_file:
            self._load_robot(self.p_description_file, fatal=True)
        else:
            self.create_subscription(String, 'robot_description', self._on_description,
                                     qos.LATCHED,
                                     callback_group=MutuallyExclusiveCallbackGroup())
        # The reconstructed scene (latched; one message per reconstruction).
        self.create_subscription(Scene, 'scene', self._on_scene, qos.LATCHED,
                                 callback_group=MutuallyExclusiveCallbackGroup())
        self._executor_client = GoalClient(self, ExecuteTrajectory, self.p_executor_action,
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
                                        'out).', lo=1, hi=MAX_PROBES)
            self.p_max_probes = declare(
                self, 'max_probes', 5, 'Most probe executions of a live identification: with '
                'object strike probes the arm gets at most max_probes - strike_probes.',
                lo=1, hi=MAX_PROBES)
            self.p_duration = declare(self, 'probe_duration', 4.0, 'Seconds per probe.',
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
            self.p_fit_restarts = declare(
                self, 'fit_restarts', 3, 'Extra least-squares starts of the least_squares arm '
                'fit, random inside the bounds (core/sysid/fit.py); 0 = from the priors only.',
                lo=0, hi=20)
            self.p_fit_method = declare(
                self, 'fit_method', 'auto', 'Arm fit (core/sysid/fit.identify): auto = '
                'regression + one rollout polish; least_squares = the multi-start rollout fit; '
                'regression = the regression alone.',
                choices=('auto', 'least_squares', 'regression'))
            self.p_timestep = declare(self, 'timestep', 0.001, 'Twin timestep (s).',
                                      lo=0.0001, hi=0.01)
            self.p_run_dir = declare(self, 'run_dir', '', "Run directory for identify_<n>; "
                                     "'' = a temporary one.")
            self.p_tracked_topic = declare(
                self, 'tracked_objects_topic', 'tracked_objects',
                'Tracked object poses (real2sim2real_msgs/TrackedObjects), subscribed only '
                'while strike probes run.', read_only=True)
            declare(self, 'scene_file', '',
                    "MJCF scene whose objects are identified; '' = the latest message on the "
                    "latched scene topic (scene_reconstruction). Read at each goal.")
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
        from ..core.sysid import stage as ident
        from ..core.sysid.bags import is_strike_bag, recording_from_bag, strike_recording_from_bag
        from ..core.sysid.config import load_identification_config
        goal = goal_handle.request
        if int(goal.num_probes) > MAX_PROBES:
            raise _Fail(IR.INVALID_BOUNDS, f'num_probes {goal.num_probes} is more than the '
                        f'{MAX_PROBES} allowed (a negative count sent as uint32 wraps to '
                        f'4294967295)')
        if len(goal.bag_paths) > MAX_IDENTIFY_BAGS:
            raise _Fail(IR.INVALID_BOUNDS, f'{len(goal.bag_paths)} bag_paths is more than the '
                        f'{MAX_IDENTIFY_BAGS} allowed')
        robot = self._wait_for_robot()
        # Joint templates and controller gains expanded for this robot's arm joints.
        config = load_identification_config(self.p_parameters_file, robot)
        timer = ident.StageTimer()
        settings = ident.FitSettings(self.p_nthread, self.p_max_iter, self.p_fit_restarts,
                                     self.p_fit_method, self.p_timestep)
        bags = list(goal.bag_paths)
        strike_given = [b for b in bags if is_strike_bag(b)]
        scene_path = self._scene_for(robot, strike_given)
        try:
            obj_twin, object_specs, object_note = ident.object_setup(
                robot, config, scene_path, timestep=self.p_timestep, timer=timer)
        except TwinError as exc:
            raise _Fail(IR.EXECUTION_FAILED, f'scene {scene_path}: {exc}') from None
        specs, obj_specs = config.split(list(goal.parameter_names), object_specs)
        if bags and not strike_given and not goal.parameter_names:
            obj_specs = []      # offline arm bags only: the arm
        if not specs and not obj_specs:
            raise _Fail(IR.UNKNOWN_PARAMETER, 'nothing to identify: ' + (object_note or
                        'no parameters declared'))
        # The names are checked before any probe moves the arm.
        twin = ident.arm_twin(robot, config, specs, settings, timer)
        run_dir = goal.run_dir or self.p_run_dir
        if not run_dir:
            import tempfile
            run_dir = tempfile.mkdtemp(prefix='r2s2r_identify_')
        with self._lock:
            last = dict(self._arm_values)
        probes, strike_bags, arm_bags = [], [], []
        if not bags:
            n_arm = int(goal.num_probes) or self.p_num_probes
            n_strike = max(0, int(config.strike_probes)) if obj_specs else 0
            if n_strike:
                n_arm = max(1, min(n_arm, self.p_max_probes - n_strike))
                n_strike = min(n_strike, self.p_max_probes - (n_arm if specs else 0))
            if specs:
                with timer('arm_probes'):
                    arm_bags, probes = self._excite(goal_handle, robot, n_arm)
            if obj_specs and n_strike:
                cell = _ExecutorStrikeCell(self, goal_handle, robot)
                with subscribed(self, TrackedObjects, self.p_tracked_topic, self._on_tracked,
                                qos.STATE, self._cb):
                    ident.run_strikes(
                        cell, robot, obj_twin, obj_specs, config, n_strike, settings=settings,
                        values=ident.arm_values(config, specs, None, last),
                        progress=lambda st, p: self._feedback(goal_handle, st, p),
                        log=self.get_logger().warning, timer=timer, scene=scene_path or '')
                strike_bags = cell.bags
                probes += [Path(b).parent.name for b in strike_bags]
        else:
            arm_bags = [b for b in bags if b not in strike_given]
            strike_bags = strike_given if obj_specs else []
            if not arm_bags and strike_bags and not goal.parameter_names:
                specs = []      # strike bags only: the objects (arm as last identified)
        if obj_twin is not None:
            obj_twin.close()
        self._feedback(goal_handle, 'read_bags', 0.0)
        with timer('read_bags'):
            recs = [recording_from_bag(b, robot.joint_names, name=f'probe_{i}')
                    for i, b in enumerate(arm_bags)] if specs else []
            srecs = [strike_recording_from_bag(b, robot.joint_names, name=f'strike_{i}')
                     for i, b in enumerate(strike_bags)] if obj_specs else []
        arm_heldout = bool(specs) and len(recs) > 1 and not (obj_specs and strike_bags)
        out = ident.fit_and_write(
            robot, config, run_dir, arm_specs=specs, object_specs=obj_specs,
            scene=scene_path or '', arm_recs=recs, strike_recs=srecs, settings=settings,
            last_arm_values=last, timer=timer, twin=twin,
            inputs={'bag_paths': [str(b) for b in arm_bags + strike_bags],
                    'live_probes': probes, 'arm_bags': [str(b) for b in arm_bags],
                    'strike_bags': [str(b) for b in strike_bags],
                    'heldout': [str(arm_bags[-1])] if arm_heldout else (
                        [str(strike_bags[-1])] if len(strike_bags) > 1 else []),
                    'scene': scene_path or ''},
            parameters={'parameters_file': self.p_parameters_file,
                        'objects_note': object_note},
            progress=lambda st, p, r: self._feedback(goal_handle, st, p, r),
            log=lambda m: self.get_logger().warning(f'identify: {m}'))
        fit, ofit = out.fit, out.object_fit
        if fit is not None:
            with self._lock:
                self._arm_values = fit.parameters.values()
        msg = PhysicalParameterSet(artifact_dir=str(out.folder))
        msg.header.stamp = self.get_clock().now().to_msg()
        for e in out.estimates:
            msg.parameters.append(PhysicalParameter(
                name=e.name, value=e.value, lower_95=e.lower_95, upper_95=e.upper_95,
                prior=e.prior, unit=e.unit, identified=e.identified))
        self.pub_params.publish(msg)
        self._push_to_sim(msg, [e.name for e in (ofit.parameters if ofit else [])])
        result.parameters = msg
        first = fit if fit is not None else ofit
        result.residual_before, result.residual_after = (first.residual_before,
                                                         first.residual_after)
        if out.heldout_arm or ofit is None:
            result.heldout_error_before = fit.heldout_error_before
            result.heldout_error_after = fit.heldout_error_after
        else:   # the arm (and objects) scored on the held-out strike probe's joints
            result.heldout_error_before = ofit.heldout_joint_before
            result.heldout_error_after = ofit.heldout_joint_after
        result.report_path = str(out.report_path)
        self.get_logger().info('identify profile (s): ' + ', '.join(
            f'{k} {v:.1f}' for k, v in out.timings['seconds'].items()))
        self._feedback(goal_handle, 'done', 1.0, result.residual_after)

    def _wait_for_robot(self):
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
        return robot

    # ------------------------------------------------------------------ objects
    def _scene_for(self, robot, strike_bags) -> str:
        """The scene: the one offline strikes were planned in, else scene_file, else the
        latched scene topic's ('' = none)."""
        from ..core.sysid.bags import strike_recording_from_bag
        for b in strike_bags:
            info = strike_recording_from_bag(b, robot.joint_names).info
            if info.get('scene') and Path(info['scene']).is_file():
                return info['scene']
        scene = self.get_parameter('scene_file').value or ''
        with self._lock:
            return scene or self._scene_path

    def _on_scene(self, msg):
        with self._lock:
            self._scene_path = msg.mjcf_path

    def _on_tracked(self, msg):
        with self._lock:
            self._tracked.append((self.get_clock().now().nanoseconds, msg))
            if len(self._tracked) > 20000:
                del self._tracked[:10000]

    def _tracked_poses(self, ids, window: float = 0.4, timeout: float = 3.0):
        """{id: (xyz, yaw)}: the mean of the tracked poses over the last ``window`` s."""
        from ..core.sysid.object_fit import quat_yaw
        deadline = time.monotonic() + timeout
        while True:
            now = self.get_clock().now().nanoseconds
            with self._lock:
                recent = [m for t, m in self._tracked if now - t <= window * 1e9]
            if recent or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if not recent:
            raise _Fail(IR.MISSING_TOPICS, (
                f'no tracked object poses on {self.p_tracked_topic} within {timeout:.0f} s: '
                f'object identification needs the object_tracker (real2sim2real_msgs/'
                f'TrackedObjects) running'))
        acc: dict[str, list] = {}
        for m in recent:
            for oid, pose in zip(m.ids, m.poses):
                p, q = pose.position, pose.orientation
                acc.setdefault(oid, []).append(((p.x, p.y, p.z), quat_yaw((q.w, q.x, q.y, q.z))))
        out = {}
        for oid, items in acc.items():
            if oid in ids:
                yaws = np.array([i[1] for i in items])
                out[oid] = (np.mean([i[0] for i in items], axis=0),
                            float(np.arctan2(np.sin(yaws).mean(), np.cos(yaws).mean())))
        return out

    def _push_to_sim(self, msg: PhysicalParameterSet, object_names=()):
        """Arm and object parameters in two calls: a twin without the scene's objects still
        takes the arm's."""
        if not self._sim_client.service_is_ready():
            self.get_logger().info('sim_server not up: parameters not pushed to the twin')
            return
        objects = set(object_names)
        for part in ([p for p in msg.parameters if p.name not in objects],
                     [p for p in msg.parameters if p.name in objects]):
            if not part:
                continue
            done = threading.Event()
            future = self._sim_client.call_async(SetPhysicalParameters.Request(parameters=part))
            future.add_done_callback(lambda _f, d=done: d.set())
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
        deadline = NodeDeadline(self, float(times[-1]) + 30.0)   # the cell's clock
        while not got.wait(0.1):
            if goal_handle.is_cancel_requested:
                handle.cancel_goal_async()
                got.wait(5.0)
                raise _Fail(IR.CANCELED, f'canceled during {what}')
            if deadline.expired() or not rclpy.ok():
                why = ' (the clock stopped)' if deadline.stalled() else ''
                raise _Fail(IR.EXECUTION_FAILED, f'{what}: no result from the executor '
                            f'{float(times[-1]) + 30.0:.0f} s after the goal{why}')
        res = res_future.result().result
        if res.error_code != ExecuteTrajectory.Result.NONE:
            raise _Fail(IR.EXECUTION_FAILED,
                        f'{what}: executor error {res.error_code}: {res.error_msg}')
        if record and not res.bag_path:
            raise _Fail(IR.EXECUTION_FAILED, f'{what}: the executor recorded no bag (its '
                        f'run_dir parameter is empty?)')
        return res.bag_path

    def _excite(self, goal_handle, robot, n: int):
        from ..core.sysid.probes import ProbeError
        from ..core.sysid.stage import arm_probes
        q = self._current(robot)
        center = np.asarray(self.p_center, float) if len(self.p_center) else q
        if center.shape != q.shape:
            raise _Fail(IR.EXECUTION_FAILED, f'probe_center has {center.size} values for '
                        f'{q.size} joints')
        try:
            probes = arm_probes(robot, center, n, duration=self.p_duration,
                                amplitude=self.p_amplitude,
                                velocity_fraction=self.p_vel_fraction)
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


class _ExecutorStrikeCell:
    """core/sysid/stage.StrikeCell over the executor action and the tracked_objects topic: one
    bag per strike probe (executor recording + tracked poses + the plan)."""

    def __init__(self, node: SystemIdentificationNode, goal_handle, robot):
        self.node, self.goal_handle, self.robot = node, goal_handle, robot
        self.bags: list[str] = []

    def tracked_poses(self, ids):
        return self.node._tracked_poses(ids)

    def current_positions(self):
        return self.node._current(self.robot)

    def strike(self, plan, index: int, info: dict):
        from rclpy.serialization import serialize_message as serialize_ros

        from ..core.sysid.bags import strike_recording_from_bag, write_strike_bag
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
                               {**info, 'tracked_topic': node.p_tracked_topic})
        self.bags.append(out)
        return strike_recording_from_bag(out, self.robot.joint_names, name=f'strike_{index}')


def main(args=None):
    return run_node(SystemIdentificationNode, args=args)


if __name__ == '__main__':
    raise SystemExit(main())
