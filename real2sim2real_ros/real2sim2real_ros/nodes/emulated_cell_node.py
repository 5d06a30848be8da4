"""emulated_cell: the stand-in for a physical cell (arm + ros2_control JTC + RealSense camera).

Offers the ROS surface a real cell has, so the pipeline cannot tell it apart:

* ``joint_states`` (sensor_msgs/JointState, qos.STATE, ``joint_state_rate`` Hz, noisy)
* ``robot_description`` (std_msgs/String, latched): the URDF text
* ``<controller>/joint_trajectory`` (trajectory_msgs/JointTrajectory, qos.COMMAND): the
  ros2_control joint_trajectory_controller topic interface (see core/joint_trajectory.py)
* action ``<controller>/follow_joint_trajectory`` (control_msgs/action/FollowJointTrajectory,
  when control_msgs is importable: the real package or the stand-in ``make setup`` builds):
  JTC's goal check, tolerances, feedback, preemption and cancel = hold (ros/fjt_server.py,
  core/trajectory_goal.py); parameters ``constraints.*``, ``controller_active``,
  ``invalid_goal_response``, ``action_monitor_rate``
* a robot with a gripper (core/grasping/jaw.py), as ``gripper_action_type`` says: action
  ``<gripper_controller>/gripper_cmd`` (ParallelGripperCommand or GripperCommand:
  ros/gripper_server.py) or ``<gripper_controller>/follow_joint_trajectory`` (a JTC on the
  finger joint: ros/gripper_jtc_server.py); the jaw's driven joint in ``joint_states``
* ``<controller>/controller_state``: control_msgs/JointTrajectoryControllerState when
  control_msgs is importable; otherwise two sensor_msgs/JointState topics
  ``<controller>/controller_state/reference`` (positions, velocities, efforts = accelerations)
  and ``<controller>/controller_state/error`` (reference - feedback)
* per camera (realsense-ros names): ``<cam>/color/image_raw`` (rgb8),
  ``<cam>/color/camera_info``, ``<cam>/depth/image_rect_raw`` (32FC1 m or 16UC1 mm),
  ``<cam>/depth/camera_info``; frames ``<cam>_color_optical_frame`` /
  ``<cam>_depth_optical_frame`` (coincident; same intrinsics: the depth is registered).
  A frame is rendered only while one of its topics has a subscriber, and colour only while
  the colour topic has one (rendering is this node's largest CPU cost)
* ``<cam>/extrinsics`` (geometry_msgs/PoseStamped, latched): the calibrated pose of the colour
  optical frame in ``world_frame``, with the spec's calibration error (a real calibration is
  never exact); also ``/tf_static`` when tf2_msgs is importable
* ``/clock`` (rosgraph_msgs/Clock) in fast mode (``real_time: false``): the cell steps as fast as
  it can and is the clock; other nodes run with use_sim_time
* service ``~/reset_objects`` (real2sim2real_msgs/srv/ResetObjects): who puts objects back
* ``~/true_object_poses`` (real2sim2real_msgs/TrackedObjects, ``truth_rate`` Hz, only while
  someone subscribes): the objects' TRUE poses, stamped on the cell's clock. HIDDEN TRUTH for
  the evaluator (tests, benchmarks) only, like the cell spec; a real cell has no such topic
  and no pipeline node may read it.

Clock: every stamp is ``t0 + world time`` and a trajectory's non-zero header.stamp is a start
time on that same clock (JTC semantics: hold until then), so ``joint_state stamp - start stamp``
is exactly the time into the trajectory, whatever the delivery delays. In real time, ``t0`` is
the ROS time of world time 0, anchored when the physics loop starts, so the cell's clock equals
ROS time minus the physics loop's lag (< 0.25 s; the loop catches up). When overload makes the
loop let time slip, ``t0`` moves by the slip once no trajectory is running (moving it during
one would break that trajectory's time axis). Fast mode: ``t0`` = 0 and /clock is world time.

Threads: physics (and joint states) run on their own thread; in real-time mode cameras render
on another, so a slow frame never delays ``joint_states``. The executor only serves the
trajectory subscription and the service. In real time the physics thread, the executor and
the DDS threads run at nice -10 where the process may raise its priority (root /
CAP_SYS_NICE), the camera thread at nice 10 (docs/cell_spec.md); core/pacing.py keeps the
physics on the wall clock. Parameters that are not read-only (the rates) follow ``ros2 param
set``. Exit code 2 with one line on stderr for an unusable cell spec or parameter.
"""
from __future__ import annotations

import math
import os
import threading
import time

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory

from real2sim2real_msgs.msg import TrackedObjects
from real2sim2real_msgs.srv import ResetObjects

from ..core import camera_model
from ..core.cell_spec import CellSpecError, default_cell_spec_path, load_cell_spec
from ..core.depth_noise import encode_depth
from ..core.emulated_world import WorldBuildError
from ..core.geometry import matrix_to_quat_wxyz
from ..core.grasping.gripper_goal import ACTION_TYPES as GRIPPER_ACTION_TYPES
from ..core.joint_trajectory import TrajectoryError
from ..core.pacing import RealTimePacer
from ..core.world import make_world
from ..ros import qos
from ..ros.gripper_server import gripper_server_for
from ..ros.params import Param, bind_checked
from ..ros.ros_main import ConfigurationError, run_node
from . import cell_messages
from .cell_messages import JointTrajectoryControllerState, trajectory_command_from_msg
from .cell_messages import seconds as _seconds
from .cell_messages import stamp as _stamp

try:  # The controller's action: the real control_msgs or the stand-in make setup builds.
    from control_msgs.action import FollowJointTrajectory

    from ..ros.fjt_server import FollowJointTrajectoryServer
except ImportError:  # pragma: no cover - depends on the machine
    FollowJointTrajectory = None
try:
    from geometry_msgs.msg import TransformStamped
    from tf2_msgs.msg import TFMessage
except ImportError:  # pragma: no cover
    TFMessage = None

NODE_NAME = 'emulated_cell'
PHYSICS_NICE = -10     # real time: the physics thread's CPU priority (see _raise_physics_priority)
PARAMETERS = (
    Param('cell_spec', '', 'cell spec YAML (hidden truth); empty = the package default '
          'config/cells/default.yaml', read_only=True),
    Param('robot_description_file', '', "URDF overriding the spec's robot.urdf; empty = spec",
          read_only=True),
    Param('controller_name', 'joint_trajectory_controller', 'namespace of the JTC topics',
          read_only=True),
    Param('gripper_controller_name', 'gripper_controller', 'namespace of the gripper action',
          read_only=True),
    Param('gripper_action_type', 'parallel_gripper_command', "the gripper's controller: "
          'ParallelGripperCommand, GripperCommand or a JTC on the finger joint',
          choices=GRIPPER_ACTION_TYPES, read_only=True),
    Param('real_time', True, 'true: step in wall-clock time; false: fast mode, step as fast as '
          'possible and publish /clock', read_only=True),
    Param('joint_state_rate', 100.0, 'joint_states and controller_state rate, Hz', lo=1.0,
          hi=1000.0),
    Param('clock_rate', 500.0, '/clock rate in fast mode, Hz (sim time)', lo=10.0, hi=1000.0),
    Param('camera_rate', 0.0, "camera frame rate, Hz; 0 = each camera's spec rate", lo=0.0,
          hi=90.0),
    Param('enable_cameras', True, 'render and publish the cameras', read_only=True),
    Param('image_qos', 'images', 'QoS of images and camera_info',
          choices=('images', 'sensor_data'), read_only=True),
    Param('depth_format', '', 'depth encoding; empty = spec', choices=('', '32FC1', '16UC1'),
          read_only=True),
    Param('truth_rate', 10.0, 'Hz of ~/true_object_poses (the hidden truth for evaluators; '
          'published only while subscribed); 0 = off', lo=0.0, hi=200.0),
    Param('world_frame', 'world', 'frame of the extrinsics (robot base at its origin)',
          read_only=True),
)


class _Due:
    """World times at which the physics loop publishes next."""
    __slots__ = ('joint', 'clock', 'truth', 'frame')

    def __init__(self, now: float, cameras):
        self.joint = self.clock = self.truth = now
        self.frame = {cam.name: now for cam, _, _ in cameras}


class EmulatedCellNode(Node):
    def __init__(self):
        super().__init__(NODE_NAME)
        self.p = bind_checked(self, PARAMETERS, NODE_NAME, prefix='',
                              on_change=self._apply_rates)
        try:
            self.spec = load_cell_spec(self.p.cell_spec or default_cell_spec_path())
            self.world = make_world(self.spec, self.p.robot_description_file or None)
        except (CellSpecError, WorldBuildError) as exc:
            raise ConfigurationError(f'cell spec {self.p.cell_spec or "(default)"}: {exc}',
                                     NODE_NAME) from None
        self.real_time = self.p.real_time
        self.world_frame = self.p.world_frame
        self.controller = self.p.controller_name
        self._apply_rates(self.p)
        # ROS time of world time 0: wall clock at start in real time, 0 (sim time) in fast mode.
        self.t0 = self.get_clock().now().nanoseconds * 1e-9 if self.real_time else 0.0

        self._make_interfaces(self.p.image_qos)
        self.fjt = None if FollowJointTrajectory is None else FollowJointTrajectoryServer(
            self, self.world, self.controller, FollowJointTrajectory,
            trajectory_command_from_msg, lambda: self.t0)
        self.gripper = gripper_server_for(self, self.world, self.p)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._physics_loop, name='physics',
                                          daemon=True)]
        if self.real_time and self.cameras:
            self._threads.append(threading.Thread(target=self._camera_loop, name='cameras',
                                                  daemon=True))
        for th in self._threads:
            th.start()
        # Wakes the executor regularly: Python-level signal handlers (SIGTERM in ros_main) only
        # run when the main thread leaves the wait set, and this node has no other timer.
        self._reported_dead = set()
        self.create_timer(0.2, self._watchdog)
        self.get_logger().info(
            f'cell {self.spec.name!r}: {len(self.world.joint_names)} joints, '
            f'{len(self.spec.objects)} objects, cameras {[c[0].name for c in self.cameras]}, '
            f'{"real time" if self.real_time else "fast mode (publishing /clock)"}')

    # ------------------------------------------------------------------ setup
    def _apply_rates(self, p):
        """Publishing periods from the rate parameters (at start and after each set)."""
        self.joint_period = 1.0 / p.joint_state_rate
        self.truth_period = 1.0 / p.truth_rate if p.truth_rate > 0 else math.inf
        self.clock_period = 1.0 / p.clock_rate
        cameras = []
        if p.enable_cameras:
            for cam in self.spec.cameras:
                rate = p.camera_rate or cam.rate
                fmt = p.depth_format or cam.depth_format
                cameras.append((cam, 1.0 / rate, fmt))
        self.cameras = cameras

    def _make_interfaces(self, image_qos: str):
        self.pub_joints = self.create_publisher(JointState, 'joint_states', qos.STATE)
        self.pub_desc = self.create_publisher(String, 'robot_description', qos.LATCHED)
        self.pub_desc.publish(String(data=self.world.robot.urdf_text))
        ctrl = self.controller
        if JointTrajectoryControllerState is not None:
            self.pub_cstate = self.create_publisher(
                JointTrajectoryControllerState, f'{ctrl}/controller_state', qos.STATE)
        else:
            self.pub_cref = self.create_publisher(
                JointState, f'{ctrl}/controller_state/reference', qos.STATE)
            self.pub_cerr = self.create_publisher(
                JointState, f'{ctrl}/controller_state/error', qos.STATE)
        group = MutuallyExclusiveCallbackGroup()
        self.create_subscription(JointTrajectory, f'{ctrl}/joint_trajectory',
                                 self._on_trajectory, qos.COMMAND, callback_group=group)
        self.create_service(ResetObjects, '~/reset_objects', self._on_reset_objects,
                            callback_group=group)
        self.pub_truth = self.create_publisher(TrackedObjects, '~/true_object_poses',
                                               qos.STATE)
        self.pub_clock = (None if self.real_time
                          else self.create_publisher(Clock, '/clock', qos.CLOCK))
        self._make_camera_interfaces(qos.by_name(image_qos))

    def _make_camera_interfaces(self, image_qos):
        """Per camera its image publishers and its calibrated pose (latched, /tf_static)."""
        self.cam_pubs = {}
        rng = np.random.default_rng(np.random.SeedSequence([self.spec.seed, 3]))
        transforms = []
        for cam, _, _ in self.cameras:
            n = cam.name
            self.cam_pubs[n] = {
                'color': self.create_publisher(Image, f'{n}/color/image_raw', image_qos),
                'color_info': self.create_publisher(CameraInfo, f'{n}/color/camera_info',
                                                    image_qos),
                'depth': self.create_publisher(Image, f'{n}/depth/image_rect_raw', image_qos),
                'depth_info': self.create_publisher(CameraInfo, f'{n}/depth/camera_info',
                                                    image_qos),
                'extrinsics': self.create_publisher(PoseStamped, f'{n}/extrinsics',
                                                    qos.LATCHED),
            }
            rot, pos = camera_model.perturb_pose(
                cam.rotation_matrix, cam.position, cam.calibration_error_translation,
                cam.calibration_error_rotation, rng)
            pose = self._pose_stamped(rot, pos)
            self.cam_pubs[n]['extrinsics'].publish(pose)
            if TFMessage is not None:
                tf = TransformStamped()
                tf.header = pose.header
                tf.child_frame_id = camera_model.color_optical_frame(n)
                tf.transform.translation.x, tf.transform.translation.y, \
                    tf.transform.translation.z = map(float, pos)
                tf.transform.rotation = pose.pose.orientation
                transforms.append(tf)
        if transforms:
            self.pub_tf = self.create_publisher(TFMessage, '/tf_static', qos.LATCHED)
            self.pub_tf.publish(TFMessage(transforms=transforms))

    def _pose_stamped(self, rot, pos) -> PoseStamped:
        pose = PoseStamped()
        pose.header.frame_id = self.world_frame
        pose.header.stamp = _stamp(self.t0)
        pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = map(float, pos)
        o = pose.pose.orientation
        o.w, o.x, o.y, o.z = map(float, matrix_to_quat_wxyz(rot))
        return pose

    # ------------------------------------------------------------------ callbacks
    def _on_trajectory(self, msg: JointTrajectory):
        if self.fjt is not None and not self.fjt.controller_active():
            self.get_logger().warning('trajectory ignored: the controller is not active',
                                      throttle_duration_sec=1.0)
            return
        stamp = _seconds(msg.header.stamp)
        start = None if stamp == 0.0 else stamp - self.t0
        try:
            cmd = trajectory_command_from_msg(msg, start)
            with self.world.lock:
                now = self.world.time
                self.world.set_trajectory(cmd, now)
        except TrajectoryError as exc:
            self.get_logger().error(f'rejected trajectory: {exc}')
            return
        if start is not None and start < now:
            # JTC semantics: a start time in the past skips that much of the trajectory (the
            # reference jumps ahead of the arm). Say so: it is the sender's delay too short.
            self.get_logger().warning(
                f'trajectory arrived {now - start:.3f} s after its start time (header.stamp):'
                f' its first {now - start:.3f} s are skipped', throttle_duration_sec=1.0)
        if self.fjt is not None:
            self.fjt.preempt('preempted by a trajectory on the joint_trajectory topic')
        self.get_logger().debug(f'trajectory with {len(msg.points)} points accepted')

    def _on_reset_objects(self, request, response):
        poses = None
        if request.poses:
            poses = [((p.position.x, p.position.y, p.position.z),
                      (p.orientation.w, p.orientation.x, p.orientation.y, p.orientation.z))
                     for p in request.poses]
        try:
            self.world.reset_objects(list(request.object_ids) or None, poses)
        except (KeyError, ValueError) as exc:
            response.success = False
            response.message = str(exc).strip('"\'')
            return response
        response.success = True
        ids = list(request.object_ids) or [o.id for o in self.spec.objects]
        response.message = f'reset {ids}'
        return response

    def _watchdog(self):
        for th in self._threads:
            if not th.is_alive() and th.name not in self._reported_dead:
                self._reported_dead.add(th.name)
                self.get_logger().error(f'{th.name} thread is not running; the cell is frozen')

    # ------------------------------------------------------------------ loops
    def _raise_physics_priority(self):
        """A real cell's controller runs on its own machine (or a real-time thread) and never
        waits for the PC's other work; the emulated one shares the CPU with the whole graph.
        Give the controller side a higher CPU priority: the physics thread (it also publishes
        joint_states) and every thread still at the default priority (the executor that
        receives trajectories, the DDS threads), so that CPU load beside the graph neither
        makes the cell's clock fall behind wall time nor delays a stop command. The camera
        thread lowers itself (and its GL workers) to nice 10. Without the privilege
        (non-root, no CAP_SYS_NICE) everything keeps the default and it says so."""
        try:
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, PHYSICS_NICE)
        except (AttributeError, OSError) as exc:
            return f'physics thread at default priority ({exc})'
        raised = 0
        for task in os.listdir('/proc/self/task'):
            try:
                if os.getpriority(os.PRIO_PROCESS, int(task)) == 0:
                    os.setpriority(os.PRIO_PROCESS, int(task), PHYSICS_NICE)
                    raised += 1
            except OSError:   # the thread ended meanwhile
                continue
        return (f'physics thread at nice {os.getpriority(os.PRIO_PROCESS, tid)}, '
                f'{raised} more threads (executor, DDS) with it')

    def _physics_loop(self):
        w = self.world
        if self.real_time:
            self.get_logger().info(self._raise_physics_priority())
        due = _Due(w.time, self.cameras)
        chunk = max(w.timestep, 0.001)
        pacer = (RealTimePacer(w.time, chunk, on_slip=self._on_slip) if self.real_time
                 else None)
        if self.real_time:   # the cell's clock: ROS time now = world time now
            self.t0 = self.get_clock().now().nanoseconds * 1e-9 - w.time
        try:
            while not self._stop.is_set() and self.context.ok():
                if pacer is not None and not self._keep_pace(pacer):
                    continue
                w.step_for(chunk)
                self._publish_due(w.time, due)
        except Exception as exc:  # noqa: BLE001 - report, do not die silently in a thread
            if not self._stop.is_set() and self.context.ok():   # not a shutdown race
                self.get_logger().error(f'physics loop stopped: {exc!r}')
        finally:
            if not self.real_time:
                self.world.close()   # this thread's GL contexts (fast mode renders here)

    def _keep_pace(self, pacer: RealTimePacer) -> bool:
        """Real time: whether a chunk is due; a slip moves t0 once no trajectory runs."""
        if not pacer.due(self.world.time):
            return False
        if pacer.slipped and self.world.trajectory_done():
            self.t0 += pacer.take_slipped()    # back on ROS time, between trajectories
        return True

    def _on_slip(self, slips: int):
        if slips in (1, 10, 100):
            self.get_logger().warn(f'physics behind real time ({slips} slips)')

    def _publish_due(self, now: float, due: _Due):
        """Publish what is due at world time ``now`` and move ``due`` on."""
        if now + 1e-9 >= due.joint:
            self._publish_joint_state()
            due.joint += self.joint_period * max(1, math.floor(
                (now - due.joint) / self.joint_period) + 1)
        if now + 1e-9 >= due.truth:
            due.truth = now + self.truth_period
            if self.pub_truth.get_subscription_count():
                self._publish_truth()
        if self.pub_clock is not None and now + 1e-9 >= due.clock:
            self.pub_clock.publish(Clock(clock=_stamp(now)))
            due.clock = now + self.clock_period
        if not self.real_time:   # fast mode: frames are part of the sim loop
            for cam, period, fmt in self.cameras:
                if now + 1e-9 >= due.frame[cam.name]:
                    self._publish_frame(cam, fmt)
                    due.frame[cam.name] = now + period

    def _camera_loop(self):
        # Lower this thread's CPU priority before the GL context exists: Mesa's llvmpipe
        # workers inherit it, so rendering yields the CPU to physics and joint_states.
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        except (AttributeError, OSError):
            pass
        wall_next = {cam.name: time.monotonic() for cam, _, _ in self.cameras}
        try:
            while not self._stop.is_set() and self.context.ok():
                cam, period, fmt = min(self.cameras, key=lambda c: wall_next[c[0].name])
                delay = wall_next[cam.name] - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    break
                self._publish_frame(cam, fmt)
                # Next frame one period after this one was due; never queue a backlog.
                wall_next[cam.name] = max(wall_next[cam.name] + period, time.monotonic())
        except Exception as exc:  # noqa: BLE001
            if not self._stop.is_set() and self.context.ok():
                self.get_logger().error(f'camera loop stopped: {exc!r}')
        finally:
            self.world.close()   # GL contexts belong to this thread

    # ------------------------------------------------------------------ publishing
    def _publish_joint_state(self):
        w = self.world
        with w.lock:
            q, v, e = w.joint_positions(), w.joint_velocities(), w.joint_efforts()
            time_stamp = _stamp(self.t0 + w.time)
            state = w.controller_state()
            jaw = w.gripper_state() if w.has_gripper else None
        msg = JointState(name=list(w.joint_names), position=q.tolist(), velocity=v.tolist(),
                         effort=e.tolist())
        if jaw is not None:
            cell_messages.append_joint(msg, w.gripper_joints().joint, jaw)
            if self.gripper is not None:
                self.gripper.update(state['time'], jaw)
        msg.header.stamp = time_stamp
        self.pub_joints.publish(msg)
        if getattr(self, 'fjt', None) is not None:
            self.fjt.update(state)
        controller_state = cell_messages.controller_state_msgs(time_stamp, w.joint_names, state)
        publishers = ([self.pub_cstate] if JointTrajectoryControllerState is not None
                      else [self.pub_cref, self.pub_cerr])
        for pub, out in zip(publishers, controller_state, strict=True):
            pub.publish(out)

    def _publish_truth(self):
        w = self.world
        with w.lock, w.truth.scoring():     # the evaluators' topic
            poses = w.object_poses()
            time_stamp = _stamp(self.t0 + w.time)
        self.pub_truth.publish(cell_messages.tracked_objects_msg(poses, time_stamp,
                                                                 self.world_frame))

    def _publish_frame(self, cam, depth_format: str):
        """One frame of ``cam``, rendered only for the image streams someone subscribes to:
        the colour and depth images cost ~25 ms of CPU each at 640x480, and an idle graph
        has no reader (camera_capture subscribes during a goal, the tracker to depth only);
        each image is rendered only when its own stream has a reader.
        A camera_info reader alone gets its info stamped with the world's time, unrendered."""
        pubs = self.cam_pubs[cam.name]
        colour = pubs['color'].get_subscription_count() > 0
        depth_read = pubs['depth'].get_subscription_count() > 0
        info_read = (pubs['color_info'].get_subscription_count() > 0 or
                     pubs['depth_info'].get_subscription_count() > 0)
        if colour or depth_read:
            t, rgb, depth = self.world.render_with_time(cam.name, rgb=colour,
                                                        depth=depth_read)
        elif info_read:
            with self.world.lock:
                t = self.world.time
        else:
            return
        time_stamp = _stamp(self.t0 + t)
        color_frame = camera_model.color_optical_frame(cam.name)
        depth_frame = camera_model.depth_optical_frame(cam.name)
        if colour:
            pubs['color'].publish(cell_messages.image_msg(rgb, 'rgb8', cam.width, cam.height,
                                                          time_stamp, color_frame))
        if depth_read:
            pubs['depth'].publish(cell_messages.image_msg(
                encode_depth(depth, depth_format), depth_format, cam.width, cam.height,
                time_stamp, depth_frame))
        intr = self.world.intrinsics(cam.name)
        for key, frame in (('color_info', color_frame), ('depth_info', depth_frame)):
            pubs[key].publish(cell_messages.camera_info_msg(intr, time_stamp, frame))

    def close(self):
        """Stop the loops (called by ros_main before destroy_node)."""
        self._stop.set()
        if getattr(self, 'fjt', None) is not None:
            self.fjt.preempt('controller shutting down')
        if getattr(self, 'gripper', None) is not None:
            self.gripper.destroy()
        for th in getattr(self, '_threads', []):
            th.join(timeout=5.0)   # a frame in flight finishes; then publishers can go


def main(args=None) -> int:
    return run_node(EmulatedCellNode, args=args)


if __name__ == '__main__':
    raise SystemExit(main())
