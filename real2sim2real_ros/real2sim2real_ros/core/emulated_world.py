"""The emulated physical cell ("reality"): a MuJoCo world built from a cell spec.

Deliberately unlike any twin: its own timestep and contact settings, rounded edges, COM
offsets, joint damping/friction/armature, a servo with finite stiffness and partial gravity
compensation, a command latency (delay queue between the controller reference and the
actuators) and noisy joint sensing. The pipeline must never read this object's truth: every
accessor of it (``spec``, ``model``, ``data``, ``object_poses``, ``true_joint_positions``,
``hidden_truth``, ``camera_spec``) goes through ``self.truth`` (core/truth.TruthDoor), which
records who reads and, strict, refuses a read outside ``truth.scoring()`` /
``truth.emulation(...)``. What a real cell gives (joint states, controller state, rendered
noisy frames, trajectories in) is read freely.

Thread safety: every public method takes ``self.lock``; rendering holds it only while copying
the scene, so a physics thread is blocked for well under a millisecond per frame.
"""
from __future__ import annotations

import collections
import threading
import warnings

import mujoco
import numpy as np

from . import camera_model
from .cell_spec import CameraSpec, CellSpec, ObjectSpec
from .depth_noise import apply_depth_noise
from .geometry import yaw_quat
from .grasping.jaw import MujocoJaw, gripper_joints
from .joint_trajectory import TrajectoryFollower
from .offscreen import mujoco_renderer
from .truth import TruthDoor
from .world import ServoCellBase, object_resets, sensor_noise_streams

ROBOT_PREFIX = 'robot/'
OBJECT_PREFIX = 'object/'
OBJECT_GEOM_PRIORITY = 1   # above the table's and the robot's default 0


class WorldBuildError(RuntimeError):
    """The cell spec could not be turned into a MuJoCo world (message says which part)."""


# ------------------------------------------------------------------------------ robot loading

class _RobotModel:
    """What the world needs from a robot: an MjSpec and joint limits, in joint order."""

    def __init__(self, spec, joint_names, lower, upper, velocity, effort, urdf_text,
                 description=None):
        self.spec = spec
        self.description = description   # core.robot_description.RobotDescription or None
        self.joint_names = list(joint_names)
        self.lower = np.asarray(lower, float)
        self.upper = np.asarray(upper, float)
        self.velocity_limits = np.asarray(velocity, float)
        self.effort_limits = np.asarray(effort, float)
        self.urdf_text = urdf_text


def load_robot_model(urdf_path: str | None) -> _RobotModel:
    """Robot from ``urdf_path`` (None = the package's default cell arm).

    Uses core.robot_description.load_robot; falls back to MuJoCo's own URDF parser when that
    module is absent, so this file does not hard-depend on it.
    """
    try:
        from . import robot_description as rd
    except ImportError:
        rd = None
    if urdf_path is None:
        if rd is not None and hasattr(rd, 'default_cell_urdf'):
            urdf_path = str(rd.default_cell_urdf())
        else:
            from pathlib import Path
            urdf_path = str(Path(__file__).resolve().parents[2] / 'urdf' / 'cell_arm.urdf')
    try:
        with open(urdf_path, encoding='utf-8') as fh:
            urdf_text = fh.read()
    except OSError as exc:
        raise WorldBuildError(f'robot.urdf: cannot read {urdf_path}: {exc.strerror}') from None
    if rd is not None and hasattr(rd, 'load_robot'):
        try:
            robot = rd.load_robot(urdf_path)
        except rd.RobotDescriptionError as exc:
            raise WorldBuildError(f'robot.urdf: {exc}') from None
        return _RobotModel(robot.spec, robot.joint_names, robot.lower, robot.upper,
                           robot.velocity_limits, robot.effort_limits, urdf_text, robot)
    import xml.etree.ElementTree as ET
    spec = mujoco.MjSpec.from_file(urdf_path)
    root = ET.fromstring(urdf_text)
    names, lo, hi, vel, eff = [], [], [], [], []
    for joint in root.iter('joint'):
        if joint.get('type') not in ('revolute', 'prismatic', 'continuous'):
            continue
        lim = joint.find('limit')
        attrs = lim.attrib if lim is not None else {}

        def get(key, default, a=attrs):
            return float(a.get(key, default))
        names.append(joint.get('name'))
        lo.append(get('lower', -np.pi))
        hi.append(get('upper', np.pi))
        vel.append(get('velocity', 3.0))
        eff.append(get('effort', 100.0))
    return _RobotModel(spec, names, lo, hi, vel, eff, urdf_text)


# ------------------------------------------------------------------------------ geometry

def _rounded_vertices(obj: ObjectSpec, n_ring: int = 16) -> np.ndarray:
    """Vertices whose convex hull is the object with edges rounded by ``edge_radius``."""
    r = obj.edge_radius
    # Sphere directions (latitude-longitude) to sweep around the inner core.
    lat = np.linspace(-np.pi / 2, np.pi / 2, 7)
    lon = np.linspace(0, 2 * np.pi, 12, endpoint=False)
    la, lo = np.meshgrid(lat, lon)
    sphere = np.column_stack([(np.cos(la) * np.cos(lo)).ravel(),
                              (np.cos(la) * np.sin(lo)).ravel(), np.sin(la).ravel()])
    if obj.shape == 'box':
        hx, hy, hz = (s / 2 - r for s in obj.size)
        core = np.array([[sx * hx, sy * hy, sz * hz] for sx in (-1, 1) for sy in (-1, 1)
                         for sz in (-1, 1)])
    else:
        rad, hz = obj.size[0] / 2 - r, obj.size[1] / 2 - r
        ang = np.linspace(0, 2 * np.pi, 4 * n_ring, endpoint=False)
        ring = np.column_stack([rad * np.cos(ang), rad * np.sin(ang)])
        core = np.vstack([np.column_stack([ring, np.full(len(ring), z)]) for z in (-hz, hz)])
    return (core[:, None, :] + r * sphere[None, :, :]).reshape(-1, 3)


def _solid_inertia(obj: ObjectSpec) -> list[float]:
    m = obj.mass
    if obj.shape == 'box':
        x, y, z = obj.size
        return [m * (y * y + z * z) / 12, m * (x * x + z * z) / 12, m * (x * x + y * y) / 12]
    r, h = obj.size[0] / 2, obj.size[1]
    ixx = m * (3 * r * r + h * h) / 12
    return [ixx, ixx, m * r * r / 2]


# ------------------------------------------------------------------------------ the world

class EmulatedWorld(ServoCellBase):
    """A running emulated cell: physics, controller, sensors, cameras."""

    def __init__(self, spec: CellSpec, robot_urdf: str | None = None,
                 truth: TruthDoor | None = None, noise_seed: int | None = None):
        self._spec = spec
        self.truth = truth if truth is not None else TruthDoor()
        self.lock = threading.RLock()
        self.robot = load_robot_model(robot_urdf if robot_urdf else spec.urdf_path())
        self.joint_names = self.robot.joint_names
        n = len(self.joint_names)
        rs = spec.robot
        try:
            self.kp = rs.per_joint('kp', n)
            self.kv = rs.per_joint('kv', n)
            damping = rs.per_joint('joint_damping', n)
            frictionloss = rs.per_joint('joint_frictionloss', n)
            armature = rs.per_joint('armature', n)
        except ValueError as exc:
            raise WorldBuildError(str(exc)) from None
        if rs.initial_positions is not None:
            if len(rs.initial_positions) != n:
                raise WorldBuildError(f'robot.initial_positions: has {len(rs.initial_positions)}'
                                      f' values, the robot has {n} joints')
            q0 = np.asarray(rs.initial_positions, float)
        else:
            q0 = np.clip(np.zeros(n), self.robot.lower, self.robot.upper)
        self.initial_positions = q0
        self._model = self._build(damping, frictionloss, armature)
        self._data = mujoco.MjData(self._model)
        self._index()
        desc = self.robot.description
        self._jaw = (MujocoJaw(self._model, desc, ROBOT_PREFIX)
                     if desc is not None and gripper_joints(desc) is not None else None)
        self.noise_seed = noise_seed       # the run's (world.sensor_noise_streams)
        self._rng, self._depth_rngs = sensor_noise_streams(spec, noise_seed)
        self._renderers = threading.local()
        self._noise_lock = threading.Lock()
        self.follower = TrajectoryFollower(self.joint_names, q0, self.robot.lower,
                                           self.robot.upper)
        self._latency_steps = int(round(rs.command_latency / self._model.opt.timestep))
        self.reset()

    # -------------------------------------------------------------------- building
    def _build(self, damping, frictionloss, armature) -> mujoco.MjModel:
        spec = self._spec
        world = mujoco.MjSpec()
        world.modelname = f'emulated_cell_{spec.name}'
        opt = world.option
        c = spec.contact
        opt.timestep = c.timestep
        opt.integrator = getattr(mujoco.mjtIntegrator, f'mjINT_{c.integrator.upper()}')
        opt.cone = getattr(mujoco.mjtCone, f'mjCONE_{c.cone.upper()}')
        opt.impratio = c.impratio
        opt.iterations = c.iterations
        width = max([cam.width for cam in spec.cameras] or [640])
        height = max([cam.height for cam in spec.cameras] or [480])
        world.visual.global_.offwidth = max(width, 640)
        world.visual.global_.offheight = max(height, 480)
        world.visual.map.znear = 0.01
        world.visual.headlight.ambient = [0.35, 0.35, 0.35]
        world.visual.headlight.diffuse = [0.5, 0.5, 0.5]
        wb = world.worldbody
        wb.add_light(name='sun', pos=[0.6, 0.3, 2.5], dir=[-0.1, -0.1, -1.0],
                     diffuse=[0.6, 0.6, 0.6], castshadow=False)
        t = spec.table
        # Floor under the table so a fallen object comes to rest instead of falling forever.
        wb.add_geom(name='floor', type=mujoco.mjtGeom.mjGEOM_PLANE, size=[3, 3, 0.1],
                    pos=[0, 0, t.height - 0.75], rgba=[0.35, 0.35, 0.38, 1])
        wb.add_geom(name='table', type=mujoco.mjtGeom.mjGEOM_BOX,
                    size=[t.size[0] / 2, t.size[1] / 2, t.size[2] / 2],
                    pos=[t.center[0], t.center[1], t.height - t.size[2] / 2],
                    friction=list(t.friction), rgba=[0.62, 0.52, 0.40, 1],
                    solref=list(c.solref), solimp=list(c.solimp))
        self._attach_robot(world, damping, frictionloss, armature)
        for obj in spec.objects:
            self._add_object(world, obj)
        for cam in spec.cameras:
            intr = camera_model.Intrinsics(cam.width, cam.height, cam.fx, cam.fy, cam.cx, cam.cy)
            mjcam = wb.add_camera(name=cam.name, pos=list(cam.position),
                                  quat=list(camera_model.mujoco_camera_quat(cam.rotation_matrix)))
            for key, value in intr.mujoco_camera_params().items():
                setattr(mjcam, key, value)
        try:
            return world.compile()
        except Exception as exc:  # noqa: BLE001 - MuJoCo raises ValueError with its own text
            raise WorldBuildError(f'MuJoCo could not compile the cell: {exc}') from None

    def _attach_robot(self, world, damping, frictionloss, armature):
        if self.robot.description is not None:
            self.robot.description.attach_to(world, prefix=ROBOT_PREFIX)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                world.attach(self.robot.spec, frame=world.worldbody.add_frame(),
                             prefix=ROBOT_PREFIX)
        gc = self._spec.robot.gravity_compensation
        for body in world.bodies:
            if body.name.startswith(ROBOT_PREFIX):
                body.gravcomp = gc
        for i, name in enumerate(self.joint_names):
            joint = world.joint(ROBOT_PREFIX + name)
            if joint is None:
                raise WorldBuildError(f'robot: joint {name!r} not found in the robot model')
            joint.damping[0] = damping[i]
            joint.frictionloss = frictionloss[i]
            joint.armature = armature[i]
            # Servo: force = kp (ctrl - q) - kv qdot; ctrl carries q_ref + (kv/kp) v_ref so the
            # velocity feed-forward rides in ctrl. The kv term is implicit in implicitfast.
            act = world.actuator(ROBOT_PREFIX + name)   # robot_description names them so
            if act is None:
                act = world.add_actuator(name=ROBOT_PREFIX + name, target=ROBOT_PREFIX + name,
                                         trntype=mujoco.mjtTrn.mjTRN_JOINT)
            act.gaintype = mujoco.mjtGain.mjGAIN_FIXED
            act.biastype = mujoco.mjtBias.mjBIAS_AFFINE
            act.gainprm = [self.kp[i]] + [0] * 9
            act.biasprm = [0, -self.kp[i], -self.kv[i]] + [0] * 7
            act.ctrllimited = False
            act.forcelimited = True
            act.forcerange = [-self.robot.effort_limits[i], self.robot.effort_limits[i]]

    def _add_object(self, world, obj: ObjectSpec):
        c = self._spec.contact
        body = world.worldbody.add_body(name=OBJECT_PREFIX + obj.id, pos=list(obj.xyz),
                                        quat=yaw_quat(obj.yaw).tolist())
        body.add_freejoint(name=OBJECT_PREFIX + obj.id)
        body.explicitinertial = True
        body.mass = obj.mass
        body.ipos = list(obj.com_offset)
        body.inertia = _solid_inertia(obj)
        # MuJoCo mixes the friction of two geoms of equal priority by taking the maximum, so
        # the table's (usually larger) friction would mask the object's: a higher priority
        # makes the object's own friction the contact's friction against table and robot.
        geom_kw = dict(name=OBJECT_PREFIX + obj.id, friction=list(obj.friction),
                       rgba=list(obj.rgba), solref=list(c.solref), solimp=list(c.solimp),
                       condim=4, mass=0, priority=OBJECT_GEOM_PRIORITY)
        if obj.edge_radius > 0:
            mesh = world.add_mesh(name=f'{OBJECT_PREFIX}{obj.id}/rounded')
            mesh.uservert = _rounded_vertices(obj).ravel().tolist()
            body.add_geom(type=mujoco.mjtGeom.mjGEOM_MESH, meshname=mesh.name, **geom_kw)
        elif obj.shape == 'box':
            body.add_geom(type=mujoco.mjtGeom.mjGEOM_BOX, size=[s / 2 for s in obj.size],
                          **geom_kw)
        else:
            body.add_geom(type=mujoco.mjtGeom.mjGEOM_CYLINDER,
                          size=[obj.size[0] / 2, obj.size[1] / 2, 0], **geom_kw)

    def _index(self):
        m = self._model
        jids = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, ROBOT_PREFIX + n)
                for n in self.joint_names]
        self._qadr = np.array([m.jnt_qposadr[j] for j in jids])
        self._dadr = np.array([m.jnt_dofadr[j] for j in jids])
        self._act = np.array([mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR,
                                                ROBOT_PREFIX + n)
                              for n in self.joint_names])
        self._obj_qadr, self._obj_dadr = {}, {}
        for obj in self._spec.objects:
            j = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, OBJECT_PREFIX + obj.id)
            self._obj_qadr[obj.id] = m.jnt_qposadr[j]
            self._obj_dadr[obj.id] = m.jnt_dofadr[j]

    # -------------------------------------------------------------------- truth (the door)
    @property
    def spec(self) -> CellSpec:
        """The cell spec: every hidden constant (through the truth door)."""
        self.truth.read('spec')
        return self._spec

    @property
    def model(self) -> mujoco.MjModel:
        """The cell's MuJoCo model: its true physics (through the truth door)."""
        self.truth.read('model')
        return self._model

    @property
    def data(self) -> mujoco.MjData:
        """The cell's MuJoCo state: true poses and velocities (through the truth door)."""
        self.truth.read('data')
        return self._data

    def hidden_truth(self, joint_names: list[str] | None = None) -> dict[str, float]:
        """The spec's hidden parameters by name (CellSpec.hidden_truth; through the door)."""
        self.truth.read('hidden_truth')
        return self._spec.hidden_truth(joint_names)

    @property
    def object_ids(self) -> list[str]:
        """The cell's object ids (the evaluator's names; no physics)."""
        return list(self._obj_qadr)

    # -------------------------------------------------------------------- state
    @property
    def time(self) -> float:
        """Simulated time in s."""
        return float(self._data.time)

    @property
    def timestep(self) -> float:
        """Physics timestep in s."""
        return float(self._model.opt.timestep)

    def reset(self):
        """Robot at its initial positions, objects at their spec poses, time 0."""
        with self.lock:
            mujoco.mj_resetData(self._model, self._data)
            self._data.qpos[self._qadr] = self.initial_positions
            if self._jaw is not None:
                self._jaw.reset(self._jaw.joints.start, self._data)
            self._set_ctrl(self.initial_positions, np.zeros(len(self.joint_names)))
            self.follower.hold(self.initial_positions, 0.0)
            hold = (self.initial_positions.copy(), np.zeros(len(self.joint_names)))
            self._delay = collections.deque([hold] * self._latency_steps)
            self._applied_q = self.initial_positions.copy()
            self._reference = (self.initial_positions.copy(), np.zeros_like(
                self.initial_positions), np.zeros_like(self.initial_positions))
            self.reset_objects()
            self._measure()

    def _set_ctrl(self, q_ref, v_ref):
        self._data.ctrl[self._act] = q_ref + self.kv / self.kp * v_ref

    def _measure(self):
        """Sample the noisy sensors once per step_for, so every reader sees the same value."""
        std = self._spec.robot.joint_state_noise_std
        n = len(self.joint_names)
        q = self._data.qpos[self._qadr].copy()
        qd = self._data.qvel[self._dadr].copy()
        tau = self._data.actuator_force[self._act].copy()
        if std > 0:
            q += self._rng.normal(0.0, std, n)
            # Velocity as a 100 Hz finite difference of the noisy encoder would carry.
            qd += self._rng.normal(0.0, std / 0.01, n)
            tau += self._rng.normal(0.0, 0.05, n)
        self._measured = (q, qd, tau)
        if self._jaw is not None:
            self._jaw_measured = self._jaw.state(self._data)

    def true_joint_positions(self) -> np.ndarray:
        """Noise-free joint positions (evaluator / tests only; through the truth door)."""
        self.truth.read('true_joint_positions')
        with self.lock:
            return self._data.qpos[self._qadr].copy()

    # -------------------------------------------------------------------- control
    def hold(self):
        """Stop: hold the current (true) position from now on; the jaw's reference stays
        where it is (JawServo.hold: a loaded jaw keeps squeezing)."""
        with self.lock:
            self.follower.hold(self._data.qpos[self._qadr].copy(), self.time)
            if self._jaw is not None:
                self._jaw.hold()

    def step_for(self, duration: float) -> int:
        """Advance physics by ``duration`` seconds (rounded to whole steps); returns steps."""
        n = max(0, int(round(duration / self._model.opt.timestep)))
        with self.lock:
            for _ in range(n):
                self._step_once()
            self._measure()
        return n

    def _step_once(self):
        t = self._data.time
        ref = self.follower.sample(t)
        self._reference = ref
        # Delay queue (length = latency steps): the servos get the reference from then.
        self._delay.append((ref[0], ref[1]))
        q_ref, v_ref = self._delay.popleft()
        self._applied_q = q_ref
        self._set_ctrl(q_ref, v_ref)
        if self._jaw is not None:
            self._jaw.step(self._data, self._model.opt.timestep)
        mujoco.mj_step(self._model, self._data)

    # -------------------------------------------------------------------- objects
    def object_poses(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """TRUE object poses {id: (xyz, quat wxyz)} -- for the evaluator only (through the
        truth door)."""
        self.truth.read('object_poses')
        with self.lock:
            out = {}
            for oid, adr in self._obj_qadr.items():
                out[oid] = (self._data.qpos[adr:adr + 3].copy(),
                            self._data.qpos[adr + 3:adr + 7].copy())
            return out

    def push_object(self, object_id: str, dv_xy) -> None:
        """A disturbance (someone nudges the object): add a planar velocity (m/s)."""
        with self.lock:
            da = self._obj_dadr[object_id]
            self._data.qvel[da:da + 2] += np.asarray(dv_xy, float)

    def reset_objects(self, ids=None, poses=None):
        """Put objects back at their spec poses, or at ``poses`` [(xyz, quat wxyz), ...]."""
        with self.lock:
            for oid, pose in object_resets(self._obj_qadr, ids, poses):
                if pose is not None:
                    xyz, quat = pose
                else:
                    obj = self._spec.object(oid)
                    xyz, quat = obj.xyz, yaw_quat(obj.yaw).tolist()
                qa, da = self._obj_qadr[oid], self._obj_dadr[oid]
                self._data.qpos[qa:qa + 3] = xyz
                self._data.qpos[qa + 3:qa + 7] = quat
                self._data.qvel[da:da + 6] = 0.0
            mujoco.mj_forward(self._model, self._data)

    # -------------------------------------------------------------------- cameras
    def camera_spec(self, name: str) -> CameraSpec:
        """The camera's spec: its TRUE pose and calibration error (through the truth door)."""
        self.truth.read('camera_spec')
        return self._spec.camera(name)

    def _renderer(self, cam: CameraSpec) -> mujoco.Renderer:
        # One renderer (GL context) per thread and camera: GL contexts are thread-bound.
        cache = getattr(self._renderers, 'cache', None)
        if cache is None:
            cache = self._renderers.cache = {}
        if cam.name not in cache:
            cache[cam.name] = mujoco_renderer(self._model, cam.height, cam.width)
        return cache[cam.name]

    def render(self, camera: str, noise: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(rgb uint8 HxWx3, depth float32 metres, NaN = hole) from ``camera``.

        ``noise=False`` gives the clean depth (tests / evaluator only).
        """
        _, rgb, depth = self.render_with_time(camera, noise)
        return rgb, depth

    def render_with_time(self, camera: str, noise: bool = True, rgb: bool = True,
                         depth: bool = True):
        """(world time of the snapshot, rgb, depth): the stamp a camera driver would use.
        ``rgb=False``: depth only (rgb None; a depth consumer's half of the cost);
        ``depth=False``: colour only (depth None, no depth noise drawn)."""
        cam = self._spec.camera(camera)
        r = self._renderer(cam)
        with self.lock:
            r.update_scene(self._data, camera=cam.name)
            stamp = self.time
        # Both images from the one scene snapshot: colour and depth stay in step.
        colour = None
        if rgb:
            r.disable_depth_rendering()
            colour = r.render().copy()
        if not depth:
            return stamp, colour, None
        r.enable_depth_rendering()
        image = r.render().astype(np.float32)
        r.disable_depth_rendering()
        if noise:
            with self._noise_lock:   # the generator is shared; physics need not wait
                image = apply_depth_noise(image, cam.depth_noise, self._depth_rngs[cam.name])
        else:
            image[(image <= 0) | (image >= self._model.vis.map.zfar * self._model.stat.extent)] = \
                np.nan
        return stamp, colour, image

    def close(self):
        """Release the renderers."""
        cache = getattr(self._renderers, 'cache', None) or {}
        for r in cache.values():
            r.close()
        cache.clear()
