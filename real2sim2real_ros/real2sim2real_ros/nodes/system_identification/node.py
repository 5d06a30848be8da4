"""The system_identification node: parameters, robot model, scene, the identify action.

Probes on the cell are probes.py; the stage itself (probe plans, fits, the folder) is
core/sysid/stage.py. The package docstring has the whole contract.
"""
from __future__ import annotations

import contextlib
import math
import threading
import time
from pathlib import Path

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from real2sim2real_msgs.action import ExecuteTrajectory, Grip, Identify
from real2sim2real_msgs.msg import PhysicalParameterSet, Scene, TrackedObjects
from real2sim2real_msgs.srv import SetPhysicalParameters

from ...core.parameters import InvalidBoundsError, ParameterError, UnknownParameterError
from ...core.sysid.bags import BagRecordingError, MissingTopicsError
from ...core.sysid.fit import NotConvergedError
from ...core.sysid.stage import ProbeExecutionError
from ...core.twin import TwinError, UnstableTwinError
from ...ros import qos
from ...ros.goal_client import GoalClient
from ...ros.params import CONTROLLER_CONFIG, Param, bind_checked, shipped_config
from ...ros.ros_main import ConfigurationError, run_node
from ...ros.subscriptions import subscribed
from .failure import GoalFailed
from .grip_probe import PARAMETER as GRIP_PARAMETER
from .grip_probe import GripProbe, amend_identify, grip_plan
from .probes import ExecutorProbes, ExecutorStrikeCell
from .report import IdentifyReport

NODE_NAME = 'system_identification'
IdentifyResult = Identify.Result
MAX_PROBES = 50        # live probes per identify goal (and the num_probes parameter)
MAX_IDENTIFY_BAGS = 1000   # bag_paths per identify goal
PARAMETERS = (
    Param('parameters_file', '',
          "Identification config (known: values, parameters: priors/bounds); '' = the "
          "package's config/identification.yaml."),
    CONTROLLER_CONFIG,
    Param('robot_description_file', '',
          "URDF of the robot; '' = the latched robot_description topic.", read_only=True),
    Param('joint_states_topic', 'joint_states', 'Joint states of the cell.', read_only=True),
    Param('executor_action', 'robot_executor/execute_trajectory',
          'ExecuteTrajectory action that runs the probes.', read_only=True),
    Param('sim_server', 'sim_server', 'Node whose set_physical_parameters gets the result.',
          read_only=True),
    Param('num_probes', 3, 'Probes per live identification (the last is held out).',
          lo=1, hi=MAX_PROBES),
    Param('max_probes', 5,
          'Most probe executions of a live identification: with object strike probes the arm '
          'gets at most max_probes - strike_probes.', lo=1, hi=MAX_PROBES),
    Param('probe_duration', 4.0, 'Seconds per probe.', lo=1.5, hi=60.0),
    Param('probe_amplitude', 0.35, 'Peak joint excursion (rad) about the centre.',
          lo=0.01, hi=1.5),
    Param('probe_velocity_fraction', 0.8,
          'Peak probe speed as a fraction of the velocity limits.', lo=0.05, hi=1.0),
    # A typed, unset default: rclpy would type an empty list default as bytes.
    Param('probe_center', Parameter.Type.DOUBLE_ARRAY,
          'Joint positions (rad) the probes move about; unset = where the arm is.',
          type_='double_array'),
    Param('settle_time', 0.5, 'Rest (s) after the move to the centre and between probes.',
          lo=0.0, hi=10.0),
    Param('nthread', 2, 'Threads of batched rollouts.', lo=1, hi=64),
    Param('max_iter', 30, 'Least-squares iterations.', lo=1, hi=1000),
    Param('fit_restarts', 3,
          'Extra least-squares starts of the least_squares arm fit, random inside the bounds '
          '(core/sysid/fit.py); 0 = from the priors only.', lo=0, hi=20),
    Param('fit_method', 'auto',
          'Arm fit (core/sysid/fit.identify): auto = regression + one rollout polish; '
          'least_squares = the multi-start rollout fit; regression = the regression alone.',
          choices=('auto', 'least_squares', 'regression')),
    Param('timestep', 0.001, 'Twin timestep (s).', lo=0.0001, hi=0.01),
    Param('run_dir', '', "Run directory for identify_<n>; '' = a temporary one."),
    Param('tracked_objects_topic', 'tracked_objects',
          'Tracked object poses (real2sim2real_msgs/TrackedObjects), subscribed only while '
          'an identify goal with strike probes runs.', read_only=True),
    Param('tracked_objects_wait', 10.0,
          'Seconds to wait for a fresh tracked pose before a strike is planned (the lazy '
          'tracker starts when it sees the subscription; 3 s missed it on a loaded PC).',
          lo=0.5, hi=120.0),
    Param('scene_file', '',
          "MJCF scene whose objects are identified; '' = the latest message on the latched "
          'scene topic (scene_reconstruction). Read at each goal.'),
    Param('grip_task', '',
          "Grasping task whose grasp the slip probe makes; set: every live identify goal of a "
          "robot with a gripper ends with it. '' = only when a goal names "
          'global/finger_friction (then pick_and_place).'),
    Param('grip_action', 'robot_executor/grip', 'Grip action that drives the jaw.',
          read_only=True),
    Param('grip_goal_timeout', 20.0, 'Seconds for one grip goal of the slip probe.',
          lo=1.0, hi=600.0),
)


def error_code_for(exc: BaseException) -> int:
    """Identify.Result error code of a core exception (order: most specific first)."""
    for cls, code in ((MissingTopicsError, IdentifyResult.MISSING_TOPICS),
                      (BagRecordingError, IdentifyResult.MISSING_TOPICS),
                      (UnknownParameterError, IdentifyResult.UNKNOWN_PARAMETER),
                      (InvalidBoundsError, IdentifyResult.INVALID_BOUNDS),
                      (NotConvergedError, IdentifyResult.NOT_CONVERGED),
                      (UnstableTwinError, IdentifyResult.UNSTABLE_TWIN),
                      (ProbeExecutionError, IdentifyResult.EXECUTION_FAILED)):
        if isinstance(exc, cls):
            return code
    return (IdentifyResult.INVALID_BOUNDS if isinstance(exc, ParameterError)
            else IdentifyResult.NOT_CONVERGED)


class SystemIdentificationNode(ExecutorProbes, GripProbe, IdentifyReport, Node):
    def __init__(self):
        super().__init__(NODE_NAME)
        self._lock = threading.Lock()
        self._read_parameters()
        self._robot = None
        self._robot_error = 'waiting for robot_description'
        self._js: JointState | None = None
        self._runs = 0
        self._scene_path = ''
        self._tracked: list = []
        self._arm_values: dict = {}
        cb = ReentrantCallbackGroup()
        self.pub_params = self.create_publisher(PhysicalParameterSet, 'physical_parameters',
                                                qos.LATCHED)
        self._cb = cb  # /joint_states is subscribed only while a goal runs (ros/subscriptions.py)
        if self.p.robot_description_file:
            self._load_robot(self.p.robot_description_file, fatal=True)
        else:
            self.create_subscription(String, 'robot_description', self._on_description,
                                     qos.LATCHED,
                                     callback_group=MutuallyExclusiveCallbackGroup())
        # The reconstructed scene (latched; one message per reconstruction).
        self.create_subscription(Scene, 'scene', self._on_scene, qos.LATCHED,
                                 callback_group=MutuallyExclusiveCallbackGroup())
        self._executor_client = GoalClient(self, ExecuteTrajectory, self.p.executor_action,
                                           callback_group=cb)
        self._grip_client = GoalClient(self, Grip, self.p.grip_action, callback_group=cb)
        self._sim_client = self.create_client(
            SetPhysicalParameters, f'{self.p.sim_server}/set_physical_parameters',
            callback_group=cb)
        self._action = ActionServer(
            self, Identify, '~/identify', self._on_identify,
            goal_callback=lambda _g: GoalResponse.ACCEPT,
            cancel_callback=lambda _g: CancelResponse.ACCEPT, callback_group=cb)
        self.get_logger().info(f'system_identification ready; parameters from '
                               f'{self._parameters_file}')

    # ------------------------------------------------------------------ setup
    def _read_parameters(self):
        # Tunables follow `ros2 param set` between goals.
        self.p = bind_checked(self, PARAMETERS, NODE_NAME)
        self._parameters_file = self.p.parameters_file or shipped_config('identification.yaml')

    def _load_robot(self, source: str, fatal: bool):
        from ...core.robot_description import load_robot
        try:
            robot = load_robot(source)
        except Exception as exc:  # noqa: BLE001 - any unusable URDF
            text = f'robot description unusable: {str(exc).splitlines()[0]}'
            if fatal:
                raise ConfigurationError(text, NODE_NAME) from None
            self.get_logger().error(text)
            self._robot_error = text
            return
        with self._lock:
            self._robot, self._robot_error = robot, ''

    def _on_description(self, msg: String):
        self._load_robot(msg.data, fatal=False)

    def _on_joint_states(self, msg: JointState):
        with self._lock:
            self._js = msg

    def _on_identify(self, goal_handle):
        result = IdentifyResult()
        t0 = time.monotonic()
        try:
            with subscribed(self, JointState, self.p.joint_states_topic, self._on_joint_states,
                            qos.STATE, self._cb):
                self._identify(goal_handle, result)
            code, text = IdentifyResult.NONE, ''
        except GoalFailed as exc:
            code, text = exc.code, exc.message
        except Exception as exc:  # noqa: BLE001 - core errors map onto codes; never crash
            code, text = error_code_for(exc), f'{type(exc).__name__}: {exc}'
        result.error_code, result.error_msg = code, text
        if code == IdentifyResult.NONE:
            goal_handle.succeed()
            self.get_logger().info(f'identify: done in {time.monotonic() - t0:.1f} s, residual '
                                   f'{result.residual_before:.3g} -> {result.residual_after:.3g}'
                                   f' rad, report {result.report_path}')
        elif code == IdentifyResult.CANCELED and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        else:
            goal_handle.abort()
            self.get_logger().warning(f'identify failed ({code}): {text}')
        return result

    def _feedback(self, goal_handle, stage, progress, residual=math.nan):
        fb = Identify.Feedback(stage=stage, progress=float(progress), residual=float(residual))
        goal_handle.publish_feedback(fb)
        if goal_handle.is_cancel_requested:
            raise GoalFailed(IdentifyResult.CANCELED, f'canceled during {stage}')

    def _identify(self, goal_handle, result):
        from ...core.grasping.jaw import gripper_joints
        from ...core.sysid.bags import is_strike_bag
        from ...core.sysid.config import load_identification_config
        goal = goal_handle.request
        _check_goal(goal)
        robot = self._wait_for_robot()
        # Joint templates and controller gains expanded for this robot's arm joints.
        config = load_identification_config(self._parameters_file, robot,
                                            self.p.controller_config or None)
        bags = list(goal.bag_paths)
        names = [n for n in goal.parameter_names if n != GRIP_PARAMETER]
        grip, rest = grip_plan(goal.parameter_names, bags, self.p.grip_task,
                               gripper_joints(robot) is not None)
        if grip and bags:
            raise GoalFailed(IdentifyResult.INVALID_BOUNDS, f'{GRIP_PARAMETER}: the slip probe '
                             'runs on the cell only; a goal with bag_paths cannot ask for it')
        strike_given = [b for b in bags if is_strike_bag(b)]
        scene_path = self._scene_for(robot, strike_given)
        out, probe = None, []

        def grip_on_cell():      # after the arm probes, before the strikes move the object
            probe.append(self._grip_on_cell(goal_handle, robot, config, scene_path))
        if rest:
            out = self._arm_and_objects(goal_handle, robot, config, names, bags, strike_given,
                                        scene_path, grip_on_cell if grip else None)
        extra = None
        if grip:
            if not probe:
                grip_on_cell()
            extra = self._grip_fit(goal_handle, robot, config, scene_path, probe[0],
                                   out.estimates if out else None, self._run_dir(goal_handle))
            if out is not None:
                amend_identify(out, extra)
        self._report(goal_handle, result, out, extra)

    def _arm_and_objects(self, goal_handle, robot, config, names, bags, strike_given,
                         scene_path, before_strikes=None):
        """The arm and object identification of a goal (core/sysid/stage.py): live probes
        (``before_strikes()`` between the arm's and the strikes) or the given bags, then the
        fits and the identify_<n> folder."""
        from ...core.sysid import stage as ident
        timer = ident.StageTimer()
        settings = ident.FitSettings(self.p.nthread, self.p.max_iter, self.p.fit_restarts,
                                     self.p.fit_method, self.p.timestep)
        obj_twin, specs, obj_specs, object_note = self._what_to_identify(
            robot, config, scene_path, goal_handle.request, names, strike_given, timer)
        # The names are checked before any probe moves the arm.
        twin = ident.arm_twin(robot, config, specs, settings, timer)
        with self._lock:
            last = dict(self._arm_values)
        live = {}
        if bags:
            probes = []
            arm_bags, strike_bags, specs = ident.split_offline_bags(
                bags, strike_given, specs, obj_specs, bool(names))
        else:
            probes, arm_bags, strike_bags, live = self._live_probes(
                goal_handle, robot, config, specs, obj_specs, obj_twin, twin,
                settings=settings, last=last, timer=timer, scene_path=scene_path,
                before_strikes=before_strikes)
        if obj_twin is not None:
            obj_twin.close()
        return self._fit_and_write(
            goal_handle, robot, config, specs, obj_specs, arm_bags, strike_bags,
            settings=settings, last=last, timer=timer, twin=twin, scene_path=scene_path,
            inputs={'live_probes': probes, 'object_note': object_note}, **live)

    def _what_to_identify(self, robot, config, scene_path, goal, names, strike_given, timer):
        """(object twin, arm specs, object specs, note on the objects) of the goal: the
        config's parameters (or the goal's subset), the scene's objects' where declared."""
        from ...core.sysid import stage as ident
        try:
            obj_twin, object_specs, object_note = ident.object_setup(
                robot, config, scene_path, timestep=self.p.timestep, timer=timer)
        except TwinError as exc:
            raise GoalFailed(IdentifyResult.EXECUTION_FAILED, f'scene {scene_path}: {exc}') \
                from None
        try:
            specs, obj_specs = config.split(list(names), object_specs)
        except UnknownParameterError as exc:    # an object's name before the scene came
            raise UnknownParameterError(f'{exc}; {object_note}' if object_note else str(exc)) \
                from None
        if goal.bag_paths and not strike_given and not names:
            obj_specs = []      # offline arm bags only: the arm
        if not specs and not obj_specs:
            raise GoalFailed(IdentifyResult.UNKNOWN_PARAMETER, 'nothing to identify: ' + (
                object_note or 'no parameters declared'))
        return obj_twin, specs, obj_specs, object_note

    def _live_probes(self, goal_handle, robot, config, specs, obj_specs, obj_twin, twin, *,
                     settings, last, timer, scene_path, before_strikes=None):
        """(probe names, arm bags, strike bags, {'arm_fit', 'validation', 'strike_recs'}:
        fit_and_write's keywords): the arm probes, then the strike probes while the arm fit
        (core/sysid/stage.ArmFit) runs beside them; the objects' validation fit waits for it
        before the last strike."""
        from ...core.sysid import stage as ident
        goal = goal_handle.request
        n_arm, n_strike = ident.probe_counts(
            goal.num_probes, self.p.num_probes, config.strike_probes, self.p.max_probes,
            arm=bool(specs), objects=bool(obj_specs))
        probes, arm_bags, strike_bags, arm_fit = [], [], [], None
        strikes = bool(obj_specs and n_strike)
        # Subscribed from the goal's start: discovery and the (lazy) tracker's first frames
        # happen during the arm probes, not in the strikes' first wait (CI once saw no pose
        # in 3 s when subscribing after them, with the arm fit starting beside it).
        with contextlib.ExitStack() as stack:
            if strikes:
                stack.enter_context(subscribed(self, TrackedObjects,
                                               self.p.tracked_objects_topic, self._on_tracked,
                                               qos.STATE, self._cb))
            if specs:
                with timer('arm_probes'):
                    arm_bags, probes = self._excite(goal_handle, robot, n_arm)
            if specs and strikes:    # else fit_and_write fits the arm in line
                arm_fit = ident.ArmFit(twin, specs,
                                       self._arm_recordings(robot, arm_bags, timer),
                                       strikes_follow=True, settings=settings, timer=timer)
            if before_strikes is not None:
                with ident.cancel_on_error(arm_fit), timer('slip_probe'):
                    before_strikes()
            if not strikes:
                return probes, arm_bags, strike_bags, {'arm_fit': arm_fit}
            cell = ExecutorStrikeCell(self, goal_handle, robot)
            with ident.cancel_on_error(arm_fit):
                done = ident.run_strikes(
                    cell, robot, obj_twin, obj_specs, config, n_strike, settings=settings,
                    values=ident.arm_values(config, specs, None, last),
                    final_values=lambda: ident.arm_values(
                        config, specs, arm_fit.result() if arm_fit else None, last),
                    progress=lambda st, p: self._feedback(goal_handle, st, p),
                    log=self.get_logger().warning, timer=timer, scene=scene_path or '')
            strike_bags = cell.bags
            probes += [Path(b).parent.name for b in strike_bags]
        return probes, arm_bags, strike_bags, {'arm_fit': arm_fit, 'strike_recs': done.recordings,
                                               'validation': done.validation}

    @staticmethod
    def _arm_recordings(robot, arm_bags, timer):
        from ...core.sysid.bags import recording_from_bag
        with timer('read_bags'):
            return [recording_from_bag(b, robot.joint_names, name=f'probe_{i}')
                    for i, b in enumerate(arm_bags)]

    def _fit_and_write(self, goal_handle, robot, config, specs, obj_specs, arm_bags,
                       strike_bags, *, settings, last, timer, twin, scene_path, inputs,
                       arm_fit=None, validation=None, strike_recs=None):
        """core/sysid/stage.fit_and_write on the bags' recordings (the identify_<n> folder);
        ``arm_fit``: the live arm fit already running on the arm bags; ``validation``: the
        objects' validation fit made during the strikes; ``strike_recs``: the strike bags as
        read when recorded."""
        from ...core.sysid import stage as ident
        from ...core.sysid.bags import strike_recording_from_bag
        run_dir = self._run_dir(goal_handle)
        self._feedback(goal_handle, 'read_bags', 0.0)
        recs = ((arm_fit.fit_recs + arm_fit.heldout) if arm_fit is not None else
                self._arm_recordings(robot, arm_bags, timer) if specs else [])
        with timer('read_bags'):
            srecs = [] if not obj_specs else strike_recs if strike_recs is not None else [
                strike_recording_from_bag(b, robot.joint_names, name=f'strike_{i}')
                for i, b in enumerate(strike_bags)]
        arm_heldout = bool(specs) and len(recs) > 1 and not (obj_specs and strike_bags)
        return ident.fit_and_write(
            robot, config, run_dir, arm_specs=specs, object_specs=obj_specs,
            scene=scene_path or '', arm_recs=recs, strike_recs=srecs, settings=settings,
            last_arm_values=last, timer=timer, twin=twin, arm_fit=arm_fit,
            validation=validation,
            inputs={'bag_paths': [str(b) for b in arm_bags + strike_bags],
                    'live_probes': inputs['live_probes'],
                    'arm_bags': [str(b) for b in arm_bags],
                    'strike_bags': [str(b) for b in strike_bags],
                    'heldout': [str(arm_bags[-1])] if arm_heldout else (
                        [str(strike_bags[-1])] if len(strike_bags) > 1 else []),
                    'scene': scene_path or ''},
            parameters={'parameters_file': self._parameters_file,
                        'objects_note': inputs['object_note']},
            progress=lambda st, p, r: self._feedback(goal_handle, st, p, r),
            log=lambda m: self.get_logger().warning(f'identify: {m}'))

    def _run_dir(self, goal_handle) -> str:
        run_dir = goal_handle.request.run_dir or self.p.run_dir
        if not run_dir:
            import tempfile
            run_dir = tempfile.mkdtemp(prefix='r2s2r_identify_')
        return run_dir

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
            raise GoalFailed(IdentifyResult.EXECUTION_FAILED,
                             f'no robot model: {self._robot_error}')
        return robot

    def _scene_for(self, robot, strike_bags) -> str:
        """The scene: the one offline strikes were planned in, else scene_file, else the
        latched scene topic's ('' = none)."""
        from ...core.sysid.bags import strike_recording_from_bag
        for b in strike_bags:
            info = strike_recording_from_bag(b, robot.joint_names).info
            if info.get('scene') and Path(info['scene']).is_file():
                return info['scene']
        scene = self.p.scene_file or ''
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

    def close(self):
        self._action.destroy()


def _check_goal(goal):
    """INVALID_BOUNDS for counts past the limits (a negative count sent as uint32 wraps)."""
    if int(goal.num_probes) > MAX_PROBES:
        raise GoalFailed(IdentifyResult.INVALID_BOUNDS, f'num_probes {goal.num_probes} is more '
                         f'than the {MAX_PROBES} allowed (a negative count sent as uint32 wraps '
                         f'to 4294967295)')
    if len(goal.bag_paths) > MAX_IDENTIFY_BAGS:
        raise GoalFailed(IdentifyResult.INVALID_BOUNDS, f'{len(goal.bag_paths)} bag_paths is '
                         f'more than the {MAX_IDENTIFY_BAGS} allowed')


def main(args=None):
    return run_node(SystemIdentificationNode, args=args)


if __name__ == '__main__':
    raise SystemExit(main())
