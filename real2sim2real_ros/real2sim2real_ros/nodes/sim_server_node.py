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
  samples over ``nthread`` threads, feedback per chunk, cancel between chunks. At most
  MAX_ROLLOUT_SAMPLES = 10000 parameter samples, MAX_ROLLOUT_DURATION = 600 s of sim time
  and MAX_ROLLOUT_VALUES = 50000000 floats in the result per goal (more is INVALID_GOAL).
* the twin seen through real cameras (``camera_names``; off and free when empty): per camera
  it reads the REAL camera's ``<name>/color/camera_info`` (intrinsics) and latched
  ``<name>/extrinsics`` (PoseStamped of the colour optical frame in the twin's world) and
  publishes ``~/<name>/color/image_raw`` (rgb8), ``~/<name>/depth/image_rect_raw`` (32FC1 m,
  NaN = nothing) and ``~/<name>/color/camera_info`` (qos.IMAGES, stamped with the twin's time)
  at ``camera_rate`` Hz of wall time, and once per camera on ``~/render`` (std_srvs/Trigger;
  works with camera_rate 0). Rendering (core/twin_camera.py: the pinhole model exactly,
  distortion ignored) runs on its own thread; the twin's lock is held only to snapshot it.

The live loop runs ``real_time_factor`` times faster than the wall clock (0: as fast as it
can). Bad input answers success=false / an error code with a message; the node keeps
running. A twin that diverges is named UNSTABLE_TWIN (Rollout: UNSTABLE): a
``~/set_physical_parameters`` batch that cannot hold the arm still for
twin.STABILITY_PROBE_S = 0.3 s changes nothing; ``~/step`` answers it; the live loop
pauses (``~/reset`` to recover).
Exit code 2 with one line on stderr for unusable parameters or files (ConfigurationError).
"""
from __future__ import annotations

import math
import threading
import time

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import String
from std_srvs.srv import SetBool, Trigger
from trajectory_msgs.msg import JointTrajectory

from real2sim2real_msgs.action import Rollout
from real2sim2real_msgs.msg import PhysicalParameter
from real2sim2real_msgs.srv import (
    GetPhysicalParameters,
    LoadScene,
    ResetSim,
    SetPhysicalParameters,
    StepSim,
)

from ..core import camera_model
from ..core.joint_trajectory import TrajectoryError, TrajectoryFollower
from ..core.parameters import ParameterError, UnknownParameterError, default_unit
from ..core.twin import InvalidRolloutError, Twin, TwinError, UnstableTwinError
from ..ros import qos
from ..ros.params import declare
from ..ros.ros_main import ConfigurationError, run_node
from ..ros.ros_time import duration_to_sec
from .emulated_cell_node import _stamp, trajectory_command_from_msg

NODE_NAME = 'sim_server'
# The name of a diverged twin in service messages (the Rollout action's code: UNSTABLE; the
# Identify and Train actions': UNSTABLE_TWIN).
UNSTABLE = 'UNSTABLE_TWIN'
RR = Rollout.Result
CHUNK_WALL = 0.02      # s of wall time per live-loop slice (then services get the lock)
# ~/step holds the twin's lock while it steps: bounded so one call cannot stall the node.
MAX_STEPS_PER_CALL = 100_000
# ~/rollout: what one goal may ask for (the result is one DDS message; the controls one array).
MAX_ROLLOUT_SAMPLES = 10_000          # parameter samples per goal
MAX_ROLLOUT_DURATION = 600.0          # s of sim time (trajectory end + 0.2 s)
MAX_ROLLOUT_VALUES = 50_000_000       # floats in the result (positions + object poses)

class _Estimate:
    """What ~/set_physical_parameters said about a value beyond the value itself."""

    def __init__(self, lower, upper, prior, identified, unit):
        self.lower, self.upper, self.prior = lower, upper, prior
        self.identified, self.unit = identified, unit


class SimServerNode(Node):
    def __init__(self):
        super().__init__(NODE_NAME)
        self._lock = threading.RLock()
        self._read_parameters()
        self.twin: Twin | None = None
        self.follower: TrajectoryFollower | None = None
        self._scene = self.p_scene or None
        self._values: dict[str, float] = {}
        self._estimates: dict[str, _Estimate] = {}
        self._priors: dict[str, float] = {}
        self._paused = self.p_start_paused
        self._problem = 'waiting for robot_description'
        if self.p_parameters_file:
            from ..core.sysid.config import load_parameter_values
            try:
                self._values = load_parameter_values(self.p_parameters_file)
            except (ParameterError, ValueError) as exc:
                raise self._config_error(f'parameters_file: {exc}') from None
        cb = ReentrantCallbackGroup()
        self.pub_joints = self.create_publisher(JointState, '~/joint_states', qos.STATE)
        self.pub_clock = (self.create_publisher(Clock, '/clock', qos.CLOCK)
                          if self.p_publish_clock else None)
        self.create_subscription(JointTrajectory, f'~/{self.p_controller}/joint_trajectory',
                                 self._on_trajectory, qos.COMMAND, callback_group=cb)
        if self.p_description_file:
            self._build(self.p_description_file, fatal=True)
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
        self._action = ActionServer(
            self, Rollout, '~/rollout', self._on_rollout,
            goal_callback=lambda _g: GoalResponse.ACCEPT,
            cancel_callback=lambda _g: CancelResponse.ACCEPT, callback_group=cb)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name='sim', daemon=True)
        self._thread.start()
        self._cameras: dict[str, dict] = {}
        self._cam_thread = None
        if self.p_camera_names:
            self._make_cameras(cb)
        self.get_logger().info(
            f'sim_server ready: timestep {self.p_timestep * 1e3:.1f} ms, real_time_factor '
            f'{self.p_rtf or "max"}, {"paused" if self._paused else "running"}, '
            f'{self._problem or "twin built"}')

    # ------------------------------------------------------------------ setup
    def _config_error(self, text: str) -> ConfigurationError:
        err = ConfigurationError(text)
        err.node_name = NODE_NAME
        return err

    def _read_parameters(self):
        try:
            self.p_description_file = declare(
                self, 'robot_description_file', '',
                "URDF of the robot; '' = the latched robot_description topic.", read_only=True)
            self.p_scene = declare(self, 'scene_file', '',
                                   "MJCF scene (table, objects) around the robot; '' = none.",
                                   read_only=True)
            self.p_parameters_file = declare(
                self, 'parameters_file', '',
                "Starting parameters: identification config (known + priors) or an identified "
                "parameter set; '' = the robot description's values.", read_only=True)
            self.p_timestep = declare(self, 'timestep', 0.001, 'Physics step (s).',
                                      lo=0.0001, hi=0.01, read_only=True)
            self.p_rtf = declare(self, 'real_time_factor', 2.0,
                                 'Live loop speed over the wall clock; 0 = as fast as it can.',
                                 lo=0.0, hi=1000.0)
            self.p_start_paused = declare(self, 'start_paused', False,
                                          'Start with the live loop paused.', read_only=True)
            self.p_rate = declare(self, 'joint_state_rate', 100.0,
                                  '~/joint_states rate, Hz of sim time.', lo=1.0, hi=1000.0)
            self.p_publish_clock = declare(self, 'publish_clock', False,
                                           'Publish /clock (the twin owns time).',
                                           read_only=True)
            self.p_controller = declare(self, 'controller_name', 'joint_trajectory_controller',
                                        'Prefix of the JTC topic under ~/.', read_only=True)
            self.p_nthread = declare(self, 'nthread', 2, 'Threads of batched rollouts.',
                                     lo=1, hi=64)
            self.p_chunk = declare(self, 'rollout_chunk', 8,
                                   'Parameter samples per batched rollout call (feedback and '
                                   'cancel happen between calls).', lo=1, hi=4096)
            # Typed, no default: an empty list default would be a BYTE_ARRAY in rclpy.
            self.p_camera_names = [str(n).strip('/') for n in declare(
                self, 'camera_names', Parameter.Type.STRING_ARRAY,
                'Real cameras (namespaces of <name>/color/camera_info and <name>/extrinsics) '
                'the twin is rendered through on ~/<name>/...; empty = off.',
                type_='string_array', read_only=True) or [] if str(n).strip('/')]
            self.p_camera_rate = declare(
                self, 'camera_rate', 0.0,
                'Twin camera frames per second of wall time; 0 = only on ~/render.',
                lo=0.0, hi=60.0, read_only=True)
        except Exception as exc:  # noqa: BLE001 - rclpy range/type errors
            raise self._config_error(f'sim_server parameters: {exc}') from None

    def _build(self, robot_source: str, fatal: bool) -> str:
        """(Re)build the twin; returns '' or the problem (raises when fatal)."""
        from ..core.robot_description import load_robot
        try:
            robot = load_robot(robot_source)
            twin = Twin(robot, scene=self._scene, timestep=self.p_timestep)
            if self.p_parameters_file:   # joint templates expanded for this robot's arm
                from ..core.sysid.config import load_parameter_values
                self._values = load_parameter_values(self.p_parameters_file, robot)
            known = {n: v for n, v in self._values.items() if self._known_name(twin, n)}
            twin.set_parameters(known)
            if known:
                twin.check_stable()
        except UnstableTwinError as exc:
            text = (f'cannot build the twin: {UNSTABLE}: parameters_file '
                    f'{self.p_parameters_file or "(none)"}: {exc}')
            if fatal:
                raise self._config_error(text) from None
            self.get_logger().error(text)
            return text
        except (TwinError, ParameterError, ValueError, OSError) as exc:
            text = f'cannot build the twin: {str(exc).splitlines()[0]}'
            if fatal:
                raise self._config_error(text) from None
            self.get_logger().error(text)
            return text
        with self._lock:
            if self.twin is not None:
                self.twin.close()
            self.twin = twin
            self._robot_source = robot_source
            self._priors = twin.get_parameters()
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

    # ------------------------------------------------------------------ twin cameras
    def _make_cameras(self, cb):
        for name in self.p_camera_names:
            cam = {'intrinsics': None, 'pose': None, 'renderer': None, 'info': None}
            cam['pub_color'] = self.create_publisher(Image, f'~/{name}/color/image_raw',
                                                     qos.IMAGES)
            cam['pub_depth'] = self.create_publisher(Image, f'~/{name}/depth/image_rect_raw',
                                                     qos.IMAGES)
            cam['pub_info'] = self.create_publisher(CameraInfo, f'~/{name}/color/camera_info',
                                                    qos.IMAGES)
            # Best effort reads a reliable or a best-effort (sensor_data) driver alike.
            self.create_subscription(CameraInfo, f'{name}/color/camera_info',
                                     lambda m, c=cam: self._on_camera_info(c, m),
                                     qos.SENSOR_DATA, callback_group=cb)
            self.create_subscription(PoseStamped, f'{name}/extrinsics',
                                     lambda m, c=cam: self._on_extrinsics(c, m),
                                     qos.LATCHED, callback_group=cb)
            self._cameras[name] = cam
        self._render_request = threading.Event()
        self._render_done = threading.Condition()
        self._render_count = 0
        self._render_report = ''
        self._cam_thread = threading.Thread(target=self._camera_loop, name='cameras',
                                            daemon=True)
        self._cam_thread.start()

    @staticmethod
    def _on_camera_info(cam: dict, msg: CameraInfo):
        k = msg.k
        if msg.width and msg.height and k[0] > 0 and k[4] > 0:
            cam['intrinsics'] = camera_model.Intrinsics(
                int(msg.width), int(msg.height), float(k[0]), float(k[4]), float(k[2]),
                float(k[5]))

    @staticmethod
    def _on_extrinsics(cam: dict, msg: PoseStamped):
        p, o = msg.pose.position, msg.pose.orientation
        w, x, y, z = o.w, o.x, o.y, o.z
        n = math.sqrt(w * w + x * x + y * y + z * z) or 1.0
        w, x, y, z = w / n, x / n, y / n, z / n
        rot = np.array([
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])
        cam['pose'] = (rot, np.array([p.x, p.y, p.z]))

    def _camera_loop(self):
        period = 1.0 / self.p_camera_rate if self.p_camera_rate > 0 else None
        next_due = time.monotonic()
        try:
            while not self._stop.is_set() and self.context.ok():
                timeout = 0.2 if period is None else max(0.0, next_due - time.monotonic())
                self._render_request.wait(timeout)
                if self._stop.is_set():
                    break
                asked = self._render_request.is_set()
                if not asked and (period is None or time.monotonic() < next_due):
                    continue
                self._render_request.clear()
                report = self._render_all()
                if asked:
                    with self._render_done:
                        self._render_count += 1
                        self._render_report = report
                        self._render_done.notify_all()
                if period is not None and not asked:
                    next_due = max(next_due + period, time.monotonic())
        except Exception as exc:  # noqa: BLE001
            if not self._stop.is_set() and self.context.ok():
                self.get_logger().error(f'twin camera loop stopped: {exc!r}')
        finally:
            for cam in self._cameras.values():   # GL contexts belong to this thread
                if cam['renderer'] is not None:
                    cam['renderer'].close()
                    cam['renderer'] = None

    def _render_all(self) -> str:
        """Render and publish every ready camera; '' or what is missing."""
        from ..core.twin_camera import TwinCamera
        missing = []
        for name, cam in self._cameras.items():
            intr, pose = cam['intrinsics'], cam['pose']
            if intr is None or pose is None:
                missing.append(f'{name}: no {"camera_info" if intr is None else "extrinsics"}')
                continue
            with self._lock:
                twin = self.twin
                if twin is None:
                    return f'no twin: {self._problem}'
                r = cam['renderer']
                if r is None or r.model is not twin.model or r.intrinsics != intr:
                    if r is not None:
                        r.close()
                    r = cam['renderer'] = TwinCamera(twin.model, intr)
                r.update(twin.data, *pose)       # snapshot of the twin; pixels outside
                stamp = _stamp(twin.data.time)
            rgb, depth = r.render_pixels()
            self._publish_camera(name, cam, intr, stamp, rgb, depth)
        return '; '.join(missing)

    def _publish_camera(self, name, cam, intr, stamp, rgb, depth):
        frame = camera_model.color_optical_frame(name)
        img = Image(height=intr.height, width=intr.width, encoding='rgb8',
                    step=intr.width * 3)
        img.header.stamp, img.header.frame_id = stamp, frame
        img.data = np.ascontiguousarray(rgb).tobytes()
        cam['pub_color'].publish(img)
        dimg = Image(height=intr.height, width=intr.width, encoding='32FC1',
                     step=intr.width * 4, is_bigendian=0)
        dimg.header.stamp, dimg.header.frame_id = stamp, frame
        dimg.data = np.ascontiguousarray(depth, dtype=np.float32).tobytes()
        cam['pub_depth'].publish(dimg)
        info = CameraInfo(**intr.camera_info_fields())
        info.header.stamp, info.header.frame_id = stamp, frame
        cam['pub_info'].publish(info)

    def _on_render(self, req, resp):
        if not self._cameras:
            resp.success, resp.message = False, 'no cameras configured (camera_names)'
            return resp
        with self._render_done:
            target = self._render_count + 1
            self._render_request.set()
            ok = self._render_done.wait_for(lambda: self._render_count >= target, timeout=10.0)
            report = self._render_report
        if not ok:
            resp.success, resp.message = False, 'rendering did not finish within 10 s'
        elif report:
            resp.success, resp.message = False, report
        else:
            resp.success = True
            resp.message = f'rendered {", ".join(self._cameras)}'
        return resp

    # ------------------------------------------------------------------ live loop
    def _loop(self):
        wall0, sim0 = time.monotonic(), 0.0
        next_js = 0.0
        while not self._stop.is_set() and self.context.ok():
            with self._lock:
                twin, paused, rtf = self.twin, self._paused, self.p_rtf
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
                            next_js = twin.data.time + 1.0 / self.p_rate
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
        msg.header.stamp = _stamp(d.time)
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
                problem = _state_vector_problem(field, getattr(req, field), twin.joint_names)
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
                twin.check_stable(object_poses=self._object_poses(twin))
            except UnstableTwinError as exc:
                twin.restore(saved)
                resp.success = False
                resp.message = (f'{UNSTABLE}: these {len(values)} parameter value(s) make the '
                                f'twin diverge in a small move of the arm ({exc}); nothing '
                                f'changed')
                return resp
            for p in req.parameters:
                self._values[p.name] = p.value
                bounded = p.lower_95 <= p.value <= p.upper_95 and p.lower_95 < p.upper_95
                self._estimates[p.name] = _Estimate(
                    p.lower_95 if bounded else p.value, p.upper_95 if bounded else p.value,
                    p.prior if p.identified else self._priors.get(p.name, p.value),
                    bool(p.identified), p.unit or default_unit(p.name))
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
                est = self._estimates.get(name)
                resp.parameters.append(PhysicalParameter(
                    name=name, value=float(value),
                    lower_95=float(est.lower if est else value),
                    upper_95=float(est.upper if est else value),
                    prior=float(est.prior if est else self._priors.get(name, value)),
                    unit=est.unit if est else default_unit(name),
                    identified=bool(est.identified) if est else False))
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

    # ------------------------------------------------------------------ rollout action
    def _on_rollout(self, goal_handle):
        result = RR()
        code, text = self._rollout(goal_handle, result)
        result.error_code, result.error_msg = code, text
        if code == RR.NONE:
            goal_handle.succeed()
        elif code == RR.CANCELED:
            goal_handle.canceled()
        else:
            goal_handle.abort()
            self.get_logger().warning(f'rollout failed ({code}): {text}')
        return result

    def _rollout(self, goal_handle, result):
        goal = goal_handle.request
        with self._lock:
            twin = self.twin
            if twin is None:
                return RR.INVALID_GOAL, f'no twin: {self._problem}'
            nj = len(twin.joint_names)
            q0 = (np.asarray(goal.initial_qpos, float) if len(goal.initial_qpos)
                  else twin.joint_positions())
            qd0 = (np.asarray(goal.initial_qvel, float) if len(goal.initial_qvel)
                   else twin.data.qvel[twin._dadr].copy())
            objects = self._object_poses(twin)
        if q0.shape != (nj,) or qd0.shape != (nj,):
            return RR.INVALID_GOAL, (f'initial_qpos/initial_qvel need {nj} values '
                                     f'(joints {twin.joint_names}) or none')
        cmd = goal.commands
        index = {n: i for i, n in enumerate(cmd.joint_names)}
        missing = [n for n in twin.joint_names if n not in index]
        if missing or not cmd.points:
            return RR.INVALID_GOAL, (f'commands must name every joint {twin.joint_names} and '
                                     f'have points; missing {missing}')
        order = [index[n] for n in twin.joint_names]
        try:
            times = np.array([duration_to_sec(p.time_from_start) for p in cmd.points])
            pos = np.array([np.asarray(p.positions, float)[order] for p in cmd.points])
            vel = (np.array([np.asarray(p.velocities, float)[order] for p in cmd.points])
                   if all(len(p.velocities) == len(index) for p in cmd.points) else None)
        except (IndexError, ValueError) as exc:
            return RR.INVALID_GOAL, f'commands: {exc}'
        problem = _rollout_size_problem(times, goal.sample_period, twin.timestep, nj,
                                        len(twin.object_ids), len(goal.parameter_samples))
        if problem:
            return RR.INVALID_GOAL, problem
        samples = [{p.name: p.value for p in s.parameters} for s in goal.parameter_samples]
        samples = samples or [{}]
        chunk = max(1, int(self.p_chunk))
        out_pos, out_obj, res = [], [], None
        feedback = Rollout.Feedback()
        for start in range(0, len(samples), chunk):
            if goal_handle.is_cancel_requested:
                return RR.CANCELED, f'canceled after {start} of {len(samples)} rollouts'
            batch = samples[start:start + chunk]
            try:
                with self._lock:
                    res = twin.rollout(q0, qd0, times, pos, goal.sample_period,
                                       param_samples=batch if batch != [{}] else None,
                                       nthread=self.p_nthread, traj_velocities=vel,
                                       object_poses=objects or None)
            except UnknownParameterError as exc:
                return RR.UNKNOWN_PARAMETER, str(exc)
            except UnstableTwinError as exc:
                return RR.UNSTABLE, str(exc)
            except (InvalidRolloutError, ParameterError, ValueError) as exc:
                return RR.INVALID_GOAL, str(exc)
            out_pos.append(res.positions)
            out_obj.append(res.object_poses)
            feedback.progress = min(1.0, (start + len(batch)) / len(samples))
            goal_handle.publish_feedback(feedback)
        positions = np.concatenate(out_pos)
        poses = np.concatenate(out_obj)
        result.joint_names = list(res.joint_names)
        result.num_rollouts = int(positions.shape[0])
        result.num_samples = int(positions.shape[1])
        result.times = res.times.tolist()
        result.positions = positions.ravel().tolist()
        result.object_ids = list(res.object_ids)
        result.object_poses = poses.ravel().tolist()
        return RR.NONE, ''

    @staticmethod
    def _object_poses(twin: Twin) -> dict:
        """{object id: (xyz, quat)} of the twin's objects now."""
        return {oid: (twin.data.qpos[a:a + 3].copy(), twin.data.qpos[a + 3:a + 7].copy())
                for oid, a in zip(twin.object_ids, twin._obj_qadr)}

    def close(self):
        self._stop.set()
        self._thread.join(timeout=2.0)
        if self._cam_thread is not None:
            self._render_request.set()
            self._cam_thread.join(timeout=5.0)
        self._action.destroy()
        with self._lock:
            if self.twin is not None:
                self.twin.close()


def _rollout_size_problem(times, sample_period: float, timestep: float, n_joints: int,
                          n_objects: int, n_samples: int) -> str:
    """'' when a rollout goal's size is within the MAX_ROLLOUT_* bounds; else what is wrong."""
    if not np.all(np.isfinite(times)):
        return 'commands: a time_from_start is not finite'
    if not (math.isfinite(sample_period) and sample_period >= 0.0):
        return f'sample_period {sample_period} must be a finite number >= 0 s'
    if n_samples > MAX_ROLLOUT_SAMPLES:
        return (f'{n_samples} parameter_samples is more than the {MAX_ROLLOUT_SAMPLES} allowed '
                f'per goal; send several goals')
    duration = float(np.max(times)) + 0.2
    if duration > MAX_ROLLOUT_DURATION:
        return (f'commands last {duration:g} s of sim time, more than the '
                f'{MAX_ROLLOUT_DURATION:g} s allowed per rollout')
    period = max(sample_period, timestep)
    values = max(1, n_samples) * (int(duration / period) + 2) * (n_joints + 7 * n_objects)
    if values > MAX_ROLLOUT_VALUES:
        return (f'the result would hold {values} values, more than the {MAX_ROLLOUT_VALUES} '
                f'allowed: raise sample_period or send fewer parameter_samples')
    return ''


def _state_vector_problem(field: str, values, joint_names) -> str:
    """'' when ``values`` is empty or one finite value per joint; else what is wrong."""
    n = len(values)
    if n == 0:
        return ''
    if n != len(joint_names):
        return (f'{field} has {n} values; the twin has {len(joint_names)} joints '
                f'{list(joint_names)}')
    bad = [f'{name}={v}' for name, v in zip(joint_names, values) if not math.isfinite(v)]
    if bad:
        return f'{field} holds NaN or infinite values: {", ".join(bad)}'
    return ''


def main(args=None):
    return run_node(SimServerNode, args=args)


if __name__ == '__main__':
    raise SystemExit(main())
