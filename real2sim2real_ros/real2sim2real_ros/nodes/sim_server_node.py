"""sim_server: the MuJoCo twin as a ROS node.

Robot from ``robot_description_file`` or the latched ``robot_description`` topic, an optional
scene MJCF (``scene_file`` or ``~/load_scene``), starting parameters from ``parameters_file``
(an identification config: known values + priors, or an identified parameter set). 1 ms
timestep by default (2 ms biases damping fits: see core/twin.py).

Interfaces (node-relative, so they never collide with the cell's ``/joint_states``):

* ``~/joint_states`` (sensor_msgs/JointState, qos.STATE) at ``joint_state_rate`` Hz of sim time
* ``~/<controller_name>/joint_trajectory`` (trajectory_msgs/JointTrajectory, qos.COMMAND):
  the same JTC topic interface as the cell, so a robot_executor with
  ``__ns:=<ns>/sim_server`` drives the twin
* ``/clock`` when ``publish_clock`` is true (the twin owns time; others use_sim_time)
* services ``~/reset`` (ResetSim), ``~/set_pause`` (std_srvs/SetBool), ``~/step`` (StepSim,
  paused only, at most MAX_STEPS_PER_CALL = 100000 steps a call),
  ``~/set_physical_parameters``, ``~/get_physical_parameters``, ``~/load_scene``
* action ``~/rollout`` (Rollout): one batched ``mujoco.rollout`` per chunk of parameter
  samples over ``nthread`` threads, feedback per chunk, cancel between chunks; at most the
  MAX_ROLLOUT_* bounds of core/rollout_goal.py per goal (more is INVALID_GOAL). See
  twin_rollout.py.
* the twin seen through real cameras (``camera_names``; off and free when empty):
  ``~/<name>/color/image_raw``, ``~/<name>/depth/image_rect_raw`` and
  ``~/<name>/color/camera_info`` from the real camera's ``<name>/color/camera_info`` and
  ``<name>/extrinsics``, at ``camera_rate`` Hz of wall time and once per camera on
  ``~/render`` (std_srvs/Trigger; works with camera_rate 0). See twin_cameras.py.

The live loop runs ``real_time_factor`` times faster than the wall clock (0: as fast as it
can). Bad input answers success=false / an error code with a message; the node keeps
running. A twin that diverges is named UNSTABLE_TWIN (Rollout: UNSTABLE): a
``~/set_physical_parameters`` batch that cannot hold the arm still for
twin.STABILITY_PROBE_S = 0.3 s changes nothing; ``~/step`` answers it; the live loop
pauses (``~/reset`` to recover). Parameters that are not read-only follow ``ros2 param set``.
Exit code 2 with one line on stderr for unusable parameters or files (ConfigurationError).
"""
from __future__ import annotations

import math
import threading
import time

import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from std_srvs.srv import SetBool, Trigger
from trajectory_msgs.msg import JointTrajectory

from real2sim2real_msgs.msg import PhysicalParameter
from real2sim2real_msgs.srv import (
    GetPhysicalParameters,
    LoadScene,
    ResetSim,
    SetPhysicalParameters,
    StepSim,
)

from ..core.joint_trajectory import TrajectoryError, TrajectoryFollower
from ..core.parameters import EstimateBook, ParameterError, UnknownParameterError
from ..core.rollout_goal import object_poses, state_vector_problem
from ..core.twin import Twin, TwinError, UnstableTwinError
from ..ros import qos
from ..ros.params import CONTROLLER_CONFIG, Param, bind_checked
from ..ros.ros_main import ConfigurationError, run_node
from .cell_messages import stamp, trajectory_command_from_msg
from .twin_cameras import TwinCameras
from .twin_rollout import RolloutAction

NODE_NAME = 'sim_server'
# The name of a diverged twin in service messages (the Rollout action's code: UNSTABLE; the
# Identify and Train actions': UNSTABLE_TWIN).
UNSTABLE = 'UNSTABLE_TWIN'
CHUNK_WALL = 0.02      # s of wall time per live-loop slice (then services get the lock)
# ~/step holds the twin's lock while it steps: bounded so one call cannot stall the node.
MAX_STEPS_PER_CALL = 100_000
PARAMETERS = (
    Param('robot_description_file', '',
          "URDF of the robot; '' = the latched robot_description topic.", read_only=True),
    Param('scene_file', '', "MJCF scene (table, objects) around the robot; '' = none.",
          read_only=True),
    Param('parameters_file', '',
          'Starting parameters: identification config (known + priors) or an identified '
          "parameter set; '' = the robot description's values.", read_only=True),
    CONTROLLER_CONFIG,
    Param('timestep', 0.001, 'Physics step (s).', lo=0.0001, hi=0.01, read_only=True),
    Param('real_time_factor', 2.0, 'Live loop speed over the wall clock; 0 = as fast as it '
          'can.', lo=0.0, hi=1000.0),
    Param('start_paused', False, 'Start with the live loop paused.', read_only=True),
    Param('joint_state_rate', 100.0, '~/joint_states rate, Hz of sim time.', lo=1.0,
          hi=1000.0),
    Param('publish_clock', False, 'Publish /clock (the twin owns time).', read_only=True),
    Param('controller_name', 'joint_trajectory_controller', 'Prefix of the JTC topic under ~/.',
          read_only=True),
    Param('nthread', 2, 'Threads of batched rollouts.', lo=1, hi=64),
    Param('rollout_chunk', 8, 'Parameter samples per batched rollout call (feedback and '
          'cancel happen between calls).', lo=1, hi=4096),
    # Typed, no default: an empty list default would be a BYTE_ARRAY in rclpy.
    Param('camera_names', Parameter.Type.STRING_ARRAY,
          'Real cameras (namespaces of <name>/color/camera_info and <name>/extrinsics) the '
          'twin is rendered through on ~/<name>/...; empty = off.', read_only=True,
          type_='string_array'),
    Param('camera_rate', 0.0, 'Twin camera frames per second of wall time; 0 = only on '
          '~/render.', lo=0.0, hi=60.0, read_only=True),
)


class SimServerNode(Node):
    def __init__(self):
        super().__init__(NODE_NAME)
        self._lock = threading.RLock()
        self._bind_parameters()
        self.twin: Twin | None = None
        self.follower: TrajectoryFollower | None = None
        self._scene = self.p.scene_file or None
        self._values: dict[str, float] = {}
        self._estimates = EstimateBook()   # intervals, priors, identified flags
        self._paused = self.p.start_paused
        self._problem = 'waiting for robot_description'
        if self.p.parameters_file:
            from ..core.sysid.config import load_parameter_values
            try:
                self._values = load_parameter_values(self.p.parameters_file, None,
                                                     self.p.controller_config or None)
            except (ParameterError, ValueError) as exc:
                raise ConfigurationError(f'parameters_file: {exc}', NODE_NAME) from None
        cb = ReentrantCallbackGroup()
        self._make_interfaces(cb)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name='sim', daemon=True)
        self._thread.start()
        self._cameras = (TwinCameras(self, self.camera_names, self.p.camera_rate, self._lock,
                                     lambda: (self.twin, self._problem), cb)
                         if self.camera_names else None)
        self.get_logger().info(
            f'sim_server ready: timestep {self.p.timestep * 1e3:.1f} ms, real_time_factor '
            f'{self.p.real_time_factor or "max"}, {"paused" if self._paused else "running"}, '
            f'{self._problem or "twin built"}')

    def _make_interfaces(self, cb):
        self.pub_joints = self.create_publisher(JointState, '~/joint_states', qos.STATE)
        self.pub_clock = (self.create_publisher(Clock, '/clock', qos.CLOCK)
                          if self.p.publish_clock else None)
        self.create_subscription(JointTrajectory,
                                 f'~/{self.p.controller_name}/joint_trajectory',
                                 self._on_trajectory, qos.COMMAND, callback_group=cb)
        if self.p.robot_description_file:
            self._build(self.p.robot_description_file, fatal=True)
        else:
            self.create_subscription(String, 'robot_description', self._on_description,
                                     qos.LATCHED,
                                     callback_group=MutuallyExclusiveCallbackGroup())
        for srv, name, handler in (
                (ResetSim, '~/reset', self._on_reset), (SetBool, '~/set_pause', self._on_pause),
                (StepSim, '~/step', self._on_step),
                (SetPhysicalParameters, '~/set_physical_parameters', self._on_set_params),
                (GetPhysicalParameters, '~/get_physical_parameters', self._on_get_params),
                (LoadScene, '~/load_scene', self._on_load_scene),
                (Trigger, '~/render', self._on_render)):
            self.create_service(srv, name, handler, callback_group=cb)
        self._action = RolloutAction(self, self._lock, lambda: (self.twin, self._problem),
                                     self.p, cb)

    # ------------------------------------------------------------------ setup
    def _bind_parameters(self):
        # The tunables (real_time_factor, joint_state_rate, nthread, rollout_chunk) follow
        # ros2 param set: the live loop and the next rollout read them from self.p.
        self.p = bind_checked(self, PARAMETERS, NODE_NAME)
        self.camera_names = [str(n).strip('/') for n in self.p.camera_names or []
                             if str(n).strip('/')]

    def _build(self, robot_source: str, fatal: bool) -> str:
        """(Re)build the twin; returns '' or the problem (raises when fatal)."""
        from ..core.robot_description import load_robot
        try:
            robot = load_robot(robot_source)
            twin = Twin(robot, scene=self._scene, timestep=self.p.timestep)
            if self.p.parameters_file:   # joint templates expanded for this robot's arm
                from ..core.sysid.config import load_parameter_values
                self._values = load_parameter_values(self.p.parameters_file, robot,
                                                     self.p.controller_config or None)
            known = {n: v for n, v in self._values.items() if self._known_name(twin, n)}
            twin.set_parameters(known)
            if known:
                twin.check_stable()
        except UnstableTwinError as exc:
            text = (f'cannot build the twin: {UNSTABLE}: parameters_file '
                    f'{self.p.parameters_file or "(none)"}: {exc}')
            if fatal:
                raise ConfigurationError(text, NODE_NAME) from None
            self.get_logger().error(text)
            return text
        except (TwinError, ParameterError, ValueError, OSError) as exc:
            text = f'cannot build the twin: {str(exc).splitlines()[0]}'
            if fatal:
                raise ConfigurationError(text, NODE_NAME) from None
            self.get_logger().error(text)
            return text
        with self._lock:
            if self.twin is not None:
                self.twin.close()
            self.twin = twin
            self._robot_source = robot_source
            self._estimates.priors = twin.get_parameters()
            self.follower = TrajectoryFollower(twin.joint_names, twin.joint_positions(),
                                               robot.lower, robot.upper)
            self._problem = ''
        self.get_logger().info(f'twin: robot {robot.name}, {len(twin.joint_names)} joints, '
                               f'objects {twin.object_ids}')
        return ''

    def _known_name(self, twin: Twin, name: str) -> bool:
        try:
            twin.validate_names([name])
            return True
        except UnknownParameterError:
            self.get_logger().warning(f'parameters_file: {name} is not in this twin; ignored')
            return False

    def _on_description(self, msg: String):
        self._build(msg.data, fatal=False)

    def _on_render(self, req, resp):
        if self._cameras is None:
            resp.success, resp.message = False, 'no cameras configured (camera_names)'
            return resp
        resp.success, resp.message = self._cameras.render()
        return resp

    # ------------------------------------------------------------------ live loop
    def _loop(self):
        wall0, sim0 = time.monotonic(), 0.0
        next_js = 0.0
        while not self._stop.is_set() and self.context.ok():
            with self._lock:
                twin, paused, rtf = self.twin, self._paused, self.p.real_time_factor
            if twin is None or paused:
                time.sleep(0.01)
                wall0, sim0 = time.monotonic(), None
                continue
            with self._lock:
                if sim0 is None:
                    sim0 = twin.data.time
                target = (sim0 + (time.monotonic() - wall0) * rtf) if rtf > 0 else math.inf
                steps = 0
                t_end = time.monotonic() + CHUNK_WALL
                try:
                    while twin.data.time + 1e-12 < target and time.monotonic() < t_end:
                        self._step_once(twin)
                        steps += 1
                        if twin.data.time + 1e-9 >= next_js:
                            self._publish_state(twin)
                            next_js = twin.data.time + 1.0 / self.p.joint_state_rate
                except UnstableTwinError as exc:
                    self._paused = True
                    self.get_logger().error(f'{UNSTABLE}: {exc}; live loop paused (call '
                                            f'~/reset)')
                    continue
                if rtf > 0 and target - twin.data.time > 0.25 * rtf:
                    wall0, sim0 = time.monotonic(), twin.data.time   # behind: slip, no burst
                if next_js > twin.data.time + 1.0:
                    next_js = twin.data.time
            if steps == 0:
                time.sleep(0.002)

    def _step_once(self, twin: Twin):
        q, v, _ = self.follower.sample(twin.data.time)
        twin.step(q, v)

    def _publish_state(self, twin: Twin):
        d = twin.data
        msg = JointState()
        msg.header.stamp = stamp(d.time)
        msg.name = list(twin.joint_names)
        msg.position = twin.joint_positions().tolist()
        msg.velocity = d.qvel[twin._dadr].tolist()
        self.pub_joints.publish(msg)
        if self.pub_clock is not None:
            self.pub_clock.publish(Clock(clock=msg.header.stamp))

    def _on_trajectory(self, msg: JointTrajectory):
        with self._lock:
            if self.twin is None:
                self.get_logger().error('trajectory ignored: no twin yet')
                return
            try:
                cmd = trajectory_command_from_msg(msg, None)
                self.follower.set_trajectory(cmd, self.twin.data.time)
            except TrajectoryError as exc:
                self.get_logger().error(f'rejected trajectory: {exc}')

    # ------------------------------------------------------------------ services
    def _twin_or_fail(self, resp):
        if self.twin is None:
            resp.success, resp.message = False, f'no twin: {self._problem}'
            return None
        return self.twin

    def _on_pause(self, req, resp):
        with self._lock:
            if self._twin_or_fail(resp) is None:
                return resp
            self._paused = bool(req.data)
        resp.success, resp.message = True, 'paused' if req.data else 'running'
        return resp

    def _on_step(self, req, resp):
        with self._lock:
            twin = self._twin_or_fail(resp)
            if twin is None:
                return resp
            if int(req.steps) > MAX_STEPS_PER_CALL:
                resp.success = False
                span = MAX_STEPS_PER_CALL * twin.model.opt.timestep
                resp.message = (f'steps {req.steps} is more than the {MAX_STEPS_PER_CALL} '
                                f'allowed per call ({span:g} s of sim time); step in several '
                                f'calls')
                resp.sim_time = float(twin.data.time)
                return resp
            if not self._paused:
                resp.success = False
                resp.message = 'the twin is running: ~/set_pause true before stepping'
                resp.sim_time = float(twin.data.time)
                return resp
            try:
                if self.follower.is_done(twin.data.time):
                    # Holding the last point: one constant reference, MuJoCo-speed stepping.
                    q, v, _ = self.follower.sample(twin.data.time)
                    twin.step_held(int(req.steps), q, v)
                else:
                    for _ in range(int(req.steps)):
                        self._step_once(twin)
            except UnstableTwinError as exc:
                resp.success, resp.message = False, f'{UNSTABLE}: {exc}; call ~/reset'
                resp.sim_time = float(twin.data.time)
                return resp
            self._publish_state(twin)
            resp.success, resp.message = True, f'{req.steps} steps'
            resp.sim_time = float(twin.data.time)
        return resp

    def _on_reset(self, req, resp):
        with self._lock:
            twin = self._twin_or_fail(resp)
            if twin is None:
                return resp
            q0, qd0 = None, None
            if req.keyframe:
                import mujoco
                k = mujoco.mj_name2id(twin.model, mujoco.mjtObj.mjOBJ_KEY, req.keyframe)
                if k < 0:
                    resp.success = False
                    resp.message = f'no keyframe {req.keyframe!r} in the twin'
                    return resp
                q0 = twin.model.key_qpos[k][twin._qadr].copy()
            for field in ('qpos', 'qvel'):
                problem = state_vector_problem(field, getattr(req, field), twin.joint_names)
                if problem:
                    resp.success, resp.message = False, problem
                    return resp
            if len(req.qpos):
                q0 = np.asarray(req.qpos, float)
            if len(req.qvel):
                qd0 = np.asarray(req.qvel, float)
            twin.reset(q0, qd0)
            self.follower = TrajectoryFollower(twin.joint_names, twin.joint_positions(),
                                               twin.robot.lower, twin.robot.upper)
            self._publish_state(twin)
        resp.success, resp.message = True, f'reset at t = {twin.data.time:.3f} s'
        return resp

    def _on_set_params(self, req, resp):
        with self._lock:
            twin = self._twin_or_fail(resp)
            if twin is None:
                return resp
            values = {p.name: p.value for p in req.parameters}
            saved = twin.snapshot()
            try:
                twin.set_parameters(values)
            except (ParameterError, ValueError) as exc:
                resp.success, resp.message = False, str(exc)
                return resp
            try:   # all or nothing: a set that blows up in a small move changes nothing
                twin.check_stable(object_poses=object_poses(twin))
            except UnstableTwinError as exc:
                twin.restore(saved)
                resp.success = False
                resp.message = (f'{UNSTABLE}: these {len(values)} parameter value(s) make the '
                                f'twin diverge in a small move of the arm ({exc}); nothing '
                                f'changed')
                return resp
            for p in req.parameters:
                self._values[p.name] = p.value
                self._estimates.record(p.name, p.value, p.lower_95, p.upper_95, p.prior,
                                       p.identified, p.unit)
        resp.success, resp.message = True, f'set {len(values)} parameter(s)'
        return resp

    def _on_get_params(self, req, resp):
        with self._lock:
            twin = self._twin_or_fail(resp)
            if twin is None:
                return resp
            names = list(req.names) or twin.parameter_names()
            try:
                values = twin.get_parameters(names)
            except ParameterError as exc:
                resp.success, resp.message = False, str(exc)
                return resp
            for name, value in values.items():
                est = self._estimates.describe(name, value)
                resp.parameters.append(PhysicalParameter(
                    name=name, value=est.value, lower_95=est.lower_95, upper_95=est.upper_95,
                    prior=est.prior, unit=est.unit, identified=est.identified))
        resp.success, resp.message = True, f'{len(resp.parameters)} parameter(s)'
        return resp

    def _on_load_scene(self, req, resp):
        with self._lock:
            if self.twin is None:
                resp.success, resp.message = False, f'no twin: {self._problem}'
                return resp
            old = self._scene
            self._scene = req.mjcf_path or None
            problem = self._build(self._robot_source, fatal=False)
            if problem:
                self._scene = old
                resp.success, resp.message = False, problem
                return resp
            try:
                self.twin.set_parameters({n: v for n, v in self._values.items()
                                          if self._known_name(self.twin, n)})
            except (ParameterError, ValueError) as exc:
                self.get_logger().warning(f'parameters not re-applied: {exc}')
        resp.success = True
        resp.message = f'scene {req.mjcf_path or "(none)"}: objects {self.twin.object_ids}'
        return resp

    def close(self):
        self._stop.set()
        self._thread.join(timeout=2.0)
        if getattr(self, '_cameras', None) is not None:
            self._cameras.close()
        self._action.destroy()
        with self._lock:
            if self.twin is not None:
                self.twin.close()


def main(args=None):
    return run_node(SimServerNode, args=args)


if __name__ == '__main__':
    raise SystemExit(main())
