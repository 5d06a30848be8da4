"""The emulated cell on Drake: a second physics engine the MuJoCo twin cannot contain.

:class:`DrakeWorld` implements core.world.CellWorld like core.emulated_world.EmulatedWorld,
with the same controller and sensors on a different model class: Drake's MultibodyPlant and
SceneGraph, the discrete SAP solver (``lagged`` approximation: Hunt-Crossley dissipation) at
the spec's time step, compliant-hydroelastic objects on a rigid-hydroelastic table (point
contact for the robot, or everywhere with ``drake.contact_model: point``), and Coulomb
friction with static above dynamic. Same as the MuJoCo cell: the URDF, the servo law, the
effort limits, the partial gravity compensation, the command latency queue, the JTC reference
(core/joint_trajectory.py), the joint-state noise, the camera intrinsics and extrinsics, the
depth noise model (core/depth_noise.py), the random streams (seeded alike from the spec).

How each spec value is expressed in Drake's terms:

* servo ``kp``/``kv``: a PD-controlled ``JointActuator`` (``PdControllerGains``; SAP treats the
  PD term implicitly), desired state = the delayed reference (q_ref, v_ref), so the force is
  ``kp (q_ref - q) + kv (v_ref - v)`` as MuJoCo's affine actuator; the actuator's
  ``effort_limit`` clamps PD + feed-forward together, as MuJoCo's ``forcerange`` clamps the
  actuator force including gravity compensation (``actgravcomp``).
* ``gravity_compensation``: feed-forward ``-g * tau_gravity(q)`` on the actuation input port,
  from ``CalcGravityGeneralizedForces`` each step.
* ``joint_damping``: ``Joint.set_default_damping`` (viscous, implicit in SAP).
* ``armature``: ``JointActuator.set_default_rotor_inertia`` with gear ratio 1 (reflected
  inertia added to the mass matrix, as MuJoCo's armature).
* ``joint_frictionloss``: MultibodyPlant has no dry joint friction; it is a regularised
  Coulomb torque ``-f tanh(v / 0.01 rad/s)`` applied each step on the applied generalised
  force port (explicit; MuJoCo's is a constraint, so the two differ near zero velocity).
* object ``friction[0]`` / table ``friction[0]``: dynamic friction of the object-table (and
  object-robot) contact, static = ``drake.static_friction_ratio`` times it. Drake combines two
  geometries' coefficients as ``2 a b / (a + b)``; the object's own coefficient is solved so
  that the pair has the object's value, the table and robot carry the table's.
* a gripper (core/grasping/jaw.py): the driven finger is a PD actuator with the jaw servo's
  gains, its effort limit the commanded maximum effort (set per command), the mirrored finger
  Drake's coupler constraint from the URDF's ``<mimic>``; the fingers are rigid-hydroelastic
  (contact patches, not one point per pad). A held object (lifted clear of the table) sticks
  or slides by its speed relative to the gripper, not in the world.
* ``contact.*`` (solref, solimp, integrator, cone, impratio, iterations): MuJoCo-only, not
  used; ``contact.timestep`` is the plant's time step. Torsional / rolling friction and
  ``edge_radius`` have no Drake counterpart here (sharp boxes).

Thread safety: every public method takes ``self.lock``; a render copies the positions under
it into a per-thread render context and renders outside it.
"""
from __future__ import annotations

import collections
import hashlib
import os
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from .cell_spec import CameraSpec, CellSpec, ObjectSpec
from .depth_noise import apply_depth_noise
from .emulated_world import (
    OBJECT_PREFIX,
    WorldBuildError,
    _solid_inertia,
    load_robot_model,
)
from .geometry import yaw_quat
from .joint_trajectory import TrajectoryFollower
from .truth import TruthDoor
from .world import ServoCellBase, object_resets, sensor_noise_streams

ROBOT_MODEL = 'robot'
FRICTION_VELOCITY = 0.01        # rad/s, regularisation of the Coulomb joint friction
STICK_SPEED = 0.002             # m/s, an object slower than this sticks (static friction)
SLIP_SPEED = 0.005              # m/s, one faster than this slides (dynamic friction)
LIFT_CLEARANCE = 0.005          # m above its resting height: an object off the table
DRAKE_MESH_SUFFIXES = ('.obj', '.gltf', '.vtk')
RENDERER = 'vtk'


def _door(truth):
    return truth if truth is not None else TruthDoor()


# ------------------------------------------------------------------------------ meshes

def drake_urdf(urdf_path: str, cache_dir: Path | None = None) -> str:
    """The path of a copy of ``urdf_path`` for Drake's parser: every mesh it cannot read
    (STL, DAE, ...) converted to OBJ (trimesh, via core.mesh_conversion), every mesh URI made
    absolute, ``<transmission>`` removed (the world adds its own actuators) and joint
    ``friction`` removed (MultibodyPlant has none; the world applies the spec's)."""
    from .mesh_conversion import MeshError, default_mesh_cache_dir, prepare_mesh, resolve_mesh_uri
    text = Path(urdf_path).read_text(encoding='utf-8')
    root = ET.fromstring(text)
    for tr in root.findall('transmission'):
        root.remove(tr)
    for dyn in root.iter('dynamics'):
        dyn.attrib.pop('friction', None)
    meshes = list(root.iter('mesh'))
    cache = Path(cache_dir) if cache_dir else default_mesh_cache_dir() / 'drake'
    cache.mkdir(parents=True, exist_ok=True)
    base = Path(urdf_path).resolve().parent
    for mesh in meshes:
        uri = mesh.get('filename', '')
        try:
            src = resolve_mesh_uri(uri, base_dir=base)
            if not src.is_file():
                raise MeshError(f"mesh file '{uri}' not found (resolved to '{src}')")
            if src.suffix.lower() not in DRAKE_MESH_SUFFIXES:
                stl = prepare_mesh(src, cache)   # any format -> STL (DAE units applied)
                obj = stl.with_name(stl.stem + '-n.obj')
                if not obj.is_file():   # Drake's OBJ reader needs vertex normals
                    import trimesh
                    m = trimesh.load(str(stl), force='mesh', process=False)
                    tmp = obj.with_name(f'.{obj.name}.{os.getpid()}.tmp')
                    m.export(str(tmp), file_type='obj', include_normals=True)
                    os.replace(tmp, obj)
                src = obj
        except MeshError as exc:
            raise WorldBuildError(f'robot.urdf: {exc}') from None
        mesh.set('filename', str(src.resolve()))
    digest = hashlib.sha256(ET.tostring(root)).hexdigest()[:16]
    out = cache / f'{Path(urdf_path).stem}-{digest}.urdf'
    if not out.is_file():
        tmp = out.with_name(f'.{out.name}.{os.getpid()}.tmp')
        tmp.write_bytes(ET.tostring(root))
        os.replace(tmp, out)
    return str(out)


def _root_link(urdf_text: str) -> str:
    root = ET.fromstring(urdf_text)
    children = {j.find('child').get('link') for j in root.iter('joint')
                if j.find('child') is not None}
    for link in root.findall('link'):
        if link.get('name') not in children:
            return link.get('name')
    raise WorldBuildError('robot.urdf: no root link')


def _pair_friction(target: float, other: float, field: str) -> float:
    """The coefficient that, combined with ``other`` by Drake's 2ab/(a+b), gives ``target``."""
    if target >= 2 * other:
        raise WorldBuildError(f'{field}: {target} cannot be a Drake contact friction against '
                              f'the table\'s {other} (Drake combines 2ab/(a+b) < 2b)')
    return target * other / (2 * other - target)


# ------------------------------------------------------------------------------ the world

class DrakeWorld(ServoCellBase):
    """A running emulated cell on Drake: physics, controller, sensors, cameras."""

    def __init__(self, spec: CellSpec, robot_urdf: str | None = None, truth=None,
                 noise_seed: int | None = None):
        self._spec = spec
        self.truth = _door(truth)
        self.lock = threading.RLock()
        self._urdf_path = robot_urdf if robot_urdf else spec.urdf_path()
        self.robot = load_robot_model(self._urdf_path)
        self.joint_names = self.robot.joint_names
        n = len(self.joint_names)
        rs = spec.robot
        try:
            self.kp = rs.per_joint('kp', n)
            self.kv = rs.per_joint('kv', n)
            self._damping = rs.per_joint('joint_damping', n)
            self._frictionloss = rs.per_joint('joint_frictionloss', n)
            self._armature = rs.per_joint('armature', n)
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
        self._dt = float(spec.contact.timestep)
        self._build()
        self.noise_seed = noise_seed       # the run's (world.sensor_noise_streams)
        self._rng, self._depth_rngs = sensor_noise_streams(spec, noise_seed)
        self._render = threading.local()
        self._noise_lock = threading.Lock()
        self.follower = TrajectoryFollower(self.joint_names, q0, self.robot.lower,
                                           self.robot.upper)
        self._latency_steps = int(round(rs.command_latency / self._dt))
        self.reset()

    # -------------------------------------------------------------------- building
    def _build(self):
        from pydrake.geometry import (
            AddCompliantHydroelasticProperties,
            AddContactMaterial,
            AddRigidHydroelasticProperties,
            Box,
            ClippingRange,
            CollisionFilterDeclaration,
            ColorRenderCamera,
            Cylinder,
            DepthRange,
            DepthRenderCamera,
            GeometrySet,
            MakeRenderEngineVtk,
            ProximityProperties,
            RenderCameraCore,
            RenderEngineVtkParams,
            RoleAssign,
        )
        from pydrake.math import RigidTransform, RotationMatrix
        from pydrake.multibody.parsing import Parser
        from pydrake.multibody.plant import (
            AddMultibodyPlant,
            CoulombFriction,
            MultibodyPlantConfig,
        )
        from pydrake.multibody.tree import PdControllerGains, RotationalInertia, SpatialInertia
        from pydrake.systems.analysis import Simulator
        from pydrake.systems.framework import DiagramBuilder
        from pydrake.systems.sensors import CameraInfo, RgbdSensor

        spec, d = self._spec, self._spec.drake
        ratio = d.static_friction_ratio
        builder = DiagramBuilder()
        config = MultibodyPlantConfig(time_step=self._dt, discrete_contact_approximation='lagged',
                                      contact_model=d.contact_model)
        plant, sg = AddMultibodyPlant(config, builder)
        sg.AddRenderer(RENDERER, MakeRenderEngineVtk(RenderEngineVtkParams()))
        self.plant, self.scene_graph = plant, sg

        def material(mu: float, compliant: bool | None, mu_static: float | None = None):
            props = ProximityProperties()
            AddContactMaterial(d.hunt_crossley_dissipation, d.point_stiffness,
                               CoulombFriction(max(mu_static or 0.0, ratio * mu), mu), props)
            if compliant:
                AddCompliantHydroelasticProperties(d.resolution_hint, d.hydroelastic_modulus,
                                                   props)
            elif compliant is False:
                AddRigidHydroelasticProperties(d.resolution_hint, props)
            return props

        # Robot: the same URDF (meshes converted), base welded at the world origin.
        path = self.robot_urdf_path()
        parser = Parser(plant)
        try:
            (robot,) = parser.AddModels(drake_urdf(path))
        except (RuntimeError, ValueError) as exc:
            raise WorldBuildError(f'robot.urdf: Drake cannot parse {path}: {exc}') from None
        self._robot_instance = robot
        root = _root_link(self.robot.urdf_text)
        if root != 'world':     # a URDF link named 'world' is Drake's world: already fixed
            plant.WeldFrames(plant.world_frame(), plant.GetFrameByName(root, robot))
        self._joints = []
        for i, name in enumerate(self.joint_names):
            if not plant.HasJointNamed(name, robot):
                raise WorldBuildError(f'robot: joint {name!r} not found in the robot model')
            joint = plant.GetJointByName(name, robot)
            joint.set_default_damping(float(self._damping[i]))
            act = plant.AddJointActuator(name, joint, float(self.robot.effort_limits[i]))
            act.set_default_rotor_inertia(float(self._armature[i]))
            act.set_default_gear_ratio(1.0)
            act.set_controller_gains(PdControllerGains(p=float(self.kp[i]), d=float(self.kv[i])))
            self._joints.append((joint, act))
        self._jaw = self._add_jaw(plant, robot, PdControllerGains)
        tip = self.robot.description.tip_link if self.robot.description is not None else None
        self._tip_body = plant.GetBodyByName(tip, robot) if self._jaw is not None else None

        # Table and floor (rigid), objects (compliant) with solved per-geometry friction.
        t = spec.table
        mu_table = t.friction[0]
        world = plant.world_body()
        top = RigidTransform([t.center[0], t.center[1], t.height - t.size[2] / 2])
        plant.RegisterCollisionGeometry(world, top, Box(*t.size), 'table',
                                        material(mu_table, False))
        plant.RegisterVisualGeometry(world, top, Box(*t.size), 'table_visual',
                                     np.array([0.62, 0.52, 0.40, 1.0]))
        floor = RigidTransform([0.0, 0.0, t.height - 0.75 - 0.05])
        plant.RegisterCollisionGeometry(world, floor, Box(6.0, 6.0, 0.1), 'floor',
                                        material(mu_table, False))
        plant.RegisterVisualGeometry(world, floor, Box(6.0, 6.0, 0.1), 'floor_visual',
                                     np.array([0.35, 0.35, 0.38, 1.0]))
        self._bodies = {}
        self._friction_props = {}
        self._half_diagonal = {}
        self._rest_z = {}
        self._forces = {}
        for k, obj in enumerate(spec.objects):
            field = f'objects[{k}].friction[0]'
            mu = _pair_friction(obj.friction[0], mu_table, field)
            mu_s = _pair_friction(ratio * obj.friction[0], mu_table,
                                  f'{field} x drake.static_friction_ratio')
            inst = plant.AddModelInstance(OBJECT_PREFIX + obj.id)
            ixx, iyy, izz = _solid_inertia(obj)
            body = plant.AddRigidBody(obj.id, inst, SpatialInertia.MakeFromCentralInertia(
                obj.mass, np.asarray(obj.com_offset, float), RotationalInertia(ixx, iyy, izz)))
            shape = self._shape(obj, Box, Cylinder)
            gid = plant.RegisterCollisionGeometry(body, RigidTransform(), shape, obj.id,
                                                  material(mu, True))
            # A discrete plant uses only the dynamic coefficient: stick-slip is a switch
            # between these two (see _update_friction).
            self._friction_props[obj.id] = (gid, {'dynamic': material(mu, True),
                                                  'static': material(mu_s, True)})
            plant.RegisterVisualGeometry(body, RigidTransform(), shape, obj.id + '_visual',
                                         np.asarray(obj.rgba, float))
            self._bodies[obj.id] = body
            self._half_diagonal[obj.id] = 0.5 * float(np.hypot(*obj.extents[:2]))
            self._rest_z[obj.id] = t.height + 0.5 * float(obj.extents[2])
        plant.Finalize()

        # Robot collision geometry: the table's friction (so an object-robot pair gets the
        # object's value) and no self-collision (the MuJoCo cell excludes it too).
        robot_geoms, fingers = [], self._finger_bodies()
        for b in plant.GetBodyIndices(robot):
            geoms = plant.GetCollisionGeometriesForBody(plant.get_body(b))
            robot_geoms += geoms
            # A gripper's fingers are rigid-hydroelastic: a pad presses a contact patch into
            # the (compliant) object, whose torsional friction keeps a held box from swinging
            # about the jaw axis (one point contact per pad cannot: measured, a box with a
            # 6 mm COM offset tipped past 18 deg between grasp and release).
            for gid in geoms:
                sg.AssignRole(plant.get_source_id(), gid,
                              material(mu_table, False if b in fingers else None),
                              RoleAssign.kReplace)
        sg.collision_filter_manager().Apply(
            CollisionFilterDeclaration().ExcludeWithin(GeometrySet(robot_geoms)))

        # Cameras: the spec's intrinsics; the optical frame (REP 103) is Drake's camera frame.
        self._sensors = {}
        for cam in spec.cameras:
            # Drake's principal point is measured from the image corner (pixel centres at
            # +0.5); the spec's (ROS / OpenCV) puts pixel centres on integers.
            info = CameraInfo(cam.width, cam.height, cam.fx, cam.fy, cam.cx + 0.5, cam.cy + 0.5)
            core = RenderCameraCore(RENDERER, info, ClippingRange(0.01, 10.0), RigidTransform())
            pose = RigidTransform(RotationMatrix(cam.rotation_matrix), np.asarray(cam.position))
            sensor = builder.AddSystem(RgbdSensor(
                sg.world_frame_id(), pose, ColorRenderCamera(core, False),
                DepthRenderCamera(core, DepthRange(0.011, 9.99))))
            sensor.set_name(f'camera_{cam.name}')
            builder.Connect(sg.get_query_output_port(), sensor.query_object_input_port())
            self._sensors[cam.name] = sensor
        self.diagram = builder.Build()
        self._simulator = Simulator(self.diagram)
        self._context = self._simulator.get_mutable_context()
        self._plant_context = plant.GetMyMutableContextFromRoot(self._context)
        self._qidx = np.array([j.position_start() for j, _ in self._joints])
        self._vidx = np.array([j.velocity_start() for j, _ in self._joints])
        # Actuation / desired-state ports are in the instance's actuator order: the arm's
        # slots (_arm_slots, joints _act_order) and the jaw's (_jaw_slot).
        order = [plant.get_joint_actuator(a).joint().name()
                 for a in plant.GetJointActuatorIndices(robot)]
        self._arm_slots = np.array([k for k, nm in enumerate(order) if nm in self.joint_names])
        self._act_order = np.array([self.joint_names.index(order[k]) for k in self._arm_slots])
        self._jaw_slot = order.index(self._jaw.joints.joint) if self._jaw else None
        self._n_act = len(order)
        self._desired = plant.get_desired_state_input_port(robot).FixValue(
            self._plant_context, np.zeros(2 * len(order)))
        self._ff = plant.get_actuation_input_port(robot).FixValue(
            self._plant_context, np.zeros(len(order)))
        self._applied = plant.get_applied_generalized_force_input_port().FixValue(
            self._plant_context, np.zeros(plant.num_velocities()))

    @staticmethod
    def _shape(obj: ObjectSpec, box, cylinder):
        if obj.shape == 'box':
            return box(*obj.size)
        return cylinder(obj.size[0] / 2, obj.size[1])

    def robot_urdf_path(self) -> str:
        """Path of the robot's URDF (the default cell arm unless the spec names one)."""
        from .robot_description import default_cell_urdf
        return str(self._urdf_path or default_cell_urdf())

    # -------------------------------------------------------------------- truth
    def _read(self, what: str):
        if self.truth is not None:
            self.truth.read(what)

    @property
    def spec(self) -> CellSpec:
        """The cell spec: every hidden constant (truth)."""
        self._read('spec')
        return self._spec

    def hidden_truth(self, joint_names: list[str] | None = None) -> dict[str, float]:
        """The spec's hidden parameters by name (CellSpec.hidden_truth; truth)."""
        self._read('hidden_truth')
        return self._spec.hidden_truth(joint_names)

    @property
    def object_ids(self) -> list[str]:
        """The cell's object ids (the evaluator's names; no physics)."""
        return list(self._bodies)

    # -------------------------------------------------------------------- state
    @property
    def time(self) -> float:
        """Simulated time in s."""
        return float(self._context.get_time())

    @property
    def timestep(self) -> float:
        """Integration step in s."""
        return self._dt

    def _vector(self, port_value, values):
        port_value.GetMutableData().get_mutable_value().SetFromVector(np.asarray(values, float))

    def _add_jaw(self, plant, robot, gains_type):
        """The gripper's driven finger as a PD actuator (JawServo's gains; the effort cap is
        the actuator's limit, set per command); its mimic followers are Drake's coupler
        constraints from the URDF's <mimic>. None without a gripper."""
        from .grasping.jaw import JawServo, gripper_joints, moving_mass
        desc = self.robot.description
        joints = gripper_joints(desc) if desc is not None else None
        if joints is None:
            return None
        model = desc.compile()
        dofs = [int(model.jnt_dofadr[model.joint(n).id]) for n in (joints.joint,
                                                                   *joints.followers)]
        jaw = JawServo(joints, moving_mass(model, dofs))
        joint = plant.GetJointByName(joints.joint, robot)
        act = plant.AddJointActuator(joints.joint, joint, joints.max_effort)
        act.set_controller_gains(gains_type(p=jaw.kp, d=jaw.kv))
        self._jaw_actuator = act
        self._jaw_joints = [joint] + [plant.GetJointByName(f, robot) for f in joints.followers]
        return jaw

    def _finger_bodies(self) -> set:
        """Body indices of the gripper's fingers (the jaw joints' child bodies)."""
        if self._jaw is None:
            return set()
        return {j.child_body().index() for j in self._jaw_joints}

    def _apply_jaw_effort(self) -> None:
        self._jaw_actuator.set_effort_limit(self._jaw.max_effort)

    def _jaw_position(self) -> float:
        return float(self.plant.GetPositions(self._plant_context)[
            self._jaw_joints[0].position_start()])

    def _set_servo(self, q_ref, v_ref, jaw_ref: float | None = None):
        o, k, n = self._act_order, self._arm_slots, self._n_act
        desired = np.zeros(2 * n)
        desired[k], desired[n + k] = q_ref[o], v_ref[o]
        if self._jaw_slot is not None:
            desired[self._jaw_slot] = self._jaw_position() if jaw_ref is None else jaw_ref
        self._vector(self._desired, desired)

    def reset(self):
        """Robot at its initial positions, objects at their spec poses, time 0."""
        with self.lock:
            self.diagram.SetDefaultContext(self._context)
            self._context.SetTime(0.0)
            q = self.plant.GetPositions(self._plant_context)
            q[self._qidx] = self.initial_positions
            if self._jaw is not None:
                for joint in self._jaw_joints:
                    q[joint.position_start()] = self._jaw.joints.start
                self._jaw.reset(self._jaw.joints.start)
                self._apply_jaw_effort()
            self.plant.SetPositions(self._plant_context, q)
            self._step_count = 0
            n = len(self.joint_names)
            self._set_servo(self.initial_positions, np.zeros(n))
            self.follower.hold(self.initial_positions, 0.0)
            hold = (self.initial_positions.copy(), np.zeros(n))
            self._delay = collections.deque([hold] * self._latency_steps)
            self._applied_q = self.initial_positions.copy()
            self._reference = (self.initial_positions.copy(), np.zeros(n), np.zeros(n))
            self.reset_objects()
            self._forces.clear()
            self.plant.get_applied_spatial_force_input_port().FixValue(self._plant_context, [])
            self._friction_mode = {oid: None for oid in self._bodies}
            self._update_friction()
            self._simulator.Initialize()
            self._measure()

    def _true_q(self) -> np.ndarray:
        return self.plant.GetPositions(self._plant_context)[self._qidx]

    def _true_v(self) -> np.ndarray:
        return self.plant.GetVelocities(self._plant_context)[self._vidx]

    def _measure(self):
        """Sample the noisy sensors once per step_for, so every reader sees the same value."""
        std = self._spec.robot.joint_state_noise_std
        n = len(self.joint_names)
        q, qd = self._true_q(), self._true_v()
        tau = np.zeros(n)
        net = self.plant.get_net_actuation_output_port(self._robot_instance).Eval(
            self._plant_context)
        tau[self._act_order] = net[self._arm_slots]
        if std > 0:
            q += self._rng.normal(0.0, std, n)
            qd += self._rng.normal(0.0, std / 0.01, n)   # a 100 Hz finite difference's noise
            tau += self._rng.normal(0.0, 0.05, n)
        self._measured = (q, qd, tau)
        if self._jaw is not None:
            j = self._jaw_joints[0]
            self._jaw_measured = (
                self._jaw_position(),
                float(self.plant.GetVelocities(self._plant_context)[j.velocity_start()]),
                float(net[self._jaw_slot]))

    def true_joint_positions(self) -> np.ndarray:
        """Noise-free joint positions (evaluator / tests only; truth)."""
        self._read('true_joint_positions')
        with self.lock:
            return self._true_q()

    # -------------------------------------------------------------------- control
    def hold(self):
        """Stop: hold the current (true) position from now on; the jaw's reference stays
        where it is (JawServo.hold: a loaded jaw keeps squeezing)."""
        with self.lock:
            self.follower.hold(self._true_q(), self.time)
            if self._jaw is not None:
                self._jaw.hold()

    def step_for(self, duration: float) -> int:
        """Advance physics by ``duration`` seconds (rounded to whole steps); returns steps."""
        n = max(0, int(round(duration / self._dt)))
        with self.lock:
            for _ in range(n):
                self._step_once()
            self._measure()
        return n

    def _step_once(self):
        plant, ctx = self.plant, self._plant_context
        t = self._step_count * self._dt
        ref = self.follower.sample(t)
        self._reference = ref
        self._delay.append((ref[0], ref[1]))
        q_ref, v_ref = self._delay.popleft()
        self._applied_q = q_ref
        jaw_ref = (self._jaw.advance(self._dt, self._jaw_position())
                   if self._jaw is not None else None)
        self._set_servo(q_ref, v_ref, jaw_ref)
        tau_g = plant.CalcGravityGeneralizedForces(ctx)[self._vidx]
        ff = np.zeros(self._n_act)
        ff[self._arm_slots] = (-self._spec.robot.gravity_compensation * tau_g)[self._act_order]
        self._vector(self._ff, ff)
        applied = np.zeros(plant.num_velocities())
        applied[self._vidx] = -self._frictionloss * np.tanh(self._true_v() / FRICTION_VELOCITY)
        self._vector(self._applied, applied)
        self._step_count += 1
        self._simulator.AdvanceTo(self._step_count * self._dt)
        self._update_friction()

    def _update_friction(self):
        """Static above dynamic friction on a discrete plant, which uses only the dynamic
        coefficient: an object sliding slower than STICK_SPEED (_slip_speed: planar, at its
        corners; relative to the gripper once lifted) gets the pair's static coefficient as its
        contact friction, one faster than SLIP_SPEED the dynamic one (hysteresis between),
        switched in the SceneGraph context."""
        from pydrake.geometry import RoleAssign
        sg_ctx = None
        for oid, body in self._bodies.items():
            speed = self._slip_speed(oid, body)
            mode = self._friction_mode[oid]
            new = ('static' if speed < STICK_SPEED else 'dynamic' if speed > SLIP_SPEED
                   else mode or 'static')
            if new != mode:
                if sg_ctx is None:
                    sg_ctx = self.scene_graph.GetMyMutableContextFromRoot(self._context)
                gid, props = self._friction_props[oid]
                self.scene_graph.AssignRole(sg_ctx, self.plant.get_source_id(), gid,
                                            props[new], RoleAssign.kReplace)
                self._friction_mode[oid] = new

    def _slip_speed(self, oid: str, body) -> float:
        """How fast the object slides: on the table, its planar speed at its corners; lifted
        clear of the table (LIFT_CLEARANCE above its spec resting height) on a robot with a
        gripper, the same relative to the gripper's tip (a held object moves with the jaw,
        it does not slide on it)."""
        plant, ctx = self.plant, self._plant_context
        V = plant.EvalBodySpatialVelocityInWorld(ctx, body)
        v, w = np.array(V.translational()), np.array(V.rotational())
        if self._jaw is not None:
            p = plant.EvalBodyPoseInWorld(ctx, body).translation()
            if p[2] > self._rest_z[oid] + LIFT_CLEARANCE:
                X_tip = plant.EvalBodyPoseInWorld(ctx, self._tip_body)
                V_tip = plant.EvalBodySpatialVelocityInWorld(ctx, self._tip_body)
                w_tip = np.array(V_tip.rotational())
                v = v - (np.array(V_tip.translational())
                         + np.cross(w_tip, p - X_tip.translation()))
                w = w - w_tip
                return float(np.linalg.norm(v) + np.linalg.norm(w) * self._half_diagonal[oid])
        return float(np.hypot(*v[:2]) + abs(w[2]) * self._half_diagonal[oid])

    # -------------------------------------------------------------------- objects
    def object_poses(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """TRUE object poses {id: (xyz, quat wxyz)} -- for the evaluator only (truth)."""
        self._read('object_poses')
        with self.lock:
            out = {}
            for oid, body in self._bodies.items():
                X = self.plant.EvalBodyPoseInWorld(self._plant_context, body)
                out[oid] = (np.array(X.translation()),
                            np.array(X.rotation().ToQuaternion().wxyz()))
            return out

    def push_object(self, object_id: str, dv_xy) -> None:
        """A disturbance (someone nudges the object): add a planar velocity (m/s)."""
        from pydrake.multibody.math import SpatialVelocity
        with self.lock:
            body = self._bodies[object_id]
            V = self.plant.EvalBodySpatialVelocityInWorld(self._plant_context, body)
            v = np.array(V.translational())
            v[:2] += np.asarray(dv_xy, float)
            self.plant.SetFreeBodySpatialVelocity(self._plant_context, body,
                                                  SpatialVelocity(V.rotational(), v))

    def set_object_force(self, object_id: str, force_xyz) -> None:
        """A steady external force (N, world frame) through the object's centre of mass until
        changed (zero removes it): the evaluator's hand, e.g. to probe static friction."""
        from pydrake.multibody.math import SpatialForce
        from pydrake.multibody.plant import ExternallyAppliedSpatialForce
        with self.lock:
            body = self._bodies[object_id]
            f = ExternallyAppliedSpatialForce()
            f.body_index = body.index()
            f.p_BoBq_B = body.default_com()
            f.F_Bq_W = SpatialForce(np.zeros(3), np.asarray(force_xyz, float))
            self._forces[object_id] = f
            self.plant.get_applied_spatial_force_input_port().FixValue(
                self._plant_context, [x for x in self._forces.values()
                                      if np.any(x.F_Bq_W.translational())])

    def reset_objects(self, ids=None, poses=None):
        """Put objects back at their spec poses, or at ``poses`` [(xyz, quat wxyz), ...]."""
        from pydrake.common.eigen_geometry import Quaternion
        from pydrake.math import RigidTransform
        from pydrake.multibody.math import SpatialVelocity
        with self.lock:
            for oid, pose in object_resets(self._bodies, ids, poses):
                if pose is not None:
                    xyz, quat = pose
                else:
                    obj = self._spec.object(oid)
                    xyz, quat = obj.xyz, yaw_quat(obj.yaw).tolist()
                body = self._bodies[oid]
                self.plant.SetFreeBodyPose(self._plant_context, body, RigidTransform(
                    Quaternion(np.asarray(quat, float)), np.asarray(xyz, float)))
                self.plant.SetFreeBodySpatialVelocity(
                    self._plant_context, body, SpatialVelocity(np.zeros(3), np.zeros(3)))

    # -------------------------------------------------------------------- cameras
    def camera_spec(self, name: str) -> CameraSpec:
        """The camera's spec: its TRUE pose and calibration error (truth)."""
        self._read('camera_spec')
        return self._spec.camera(name)

    def _render_context(self):
        # One context per thread: Drake clones the render engine into each context, so a
        # thread renders on its own engine (and its own GL context) while physics steps.
        ctx = getattr(self._render, 'context', None)
        if ctx is None:
            ctx = self._render.context = self.diagram.CreateDefaultContext()
        return ctx

    def render(self, camera: str, noise: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(rgb uint8 HxWx3, depth float32 metres, NaN = hole) from ``camera``.

        ``noise=False`` gives the clean depth (tests / evaluator only).
        """
        _, rgb, depth = self.render_with_time(camera, noise)
        return rgb, depth

    def render_with_time(self, camera: str, noise: bool = True, rgb: bool = True,
                         depth: bool = True):
        """(world time of the snapshot, rgb, depth): the stamp a camera driver would use.
        ``rgb=False``: depth only (rgb None; the colour port is not evaluated);
        ``depth=False``: colour only (depth None; the depth port is not evaluated)."""
        cam = self._spec.camera(camera)
        sensor = self._sensors[cam.name]
        ctx = self._render_context()
        with self.lock:
            q = self.plant.GetPositions(self._plant_context)
            stamp = self.time
        self.plant.SetPositions(self.plant.GetMyMutableContextFromRoot(ctx), q)
        sctx = sensor.GetMyContextFromRoot(ctx)
        colour = (np.array(sensor.color_image_output_port().Eval(sctx).data[:, :, :3])
                  if rgb else None)
        if not depth:
            return stamp, colour, None
        image = np.array(sensor.depth_image_32F_output_port().Eval(sctx).data[:, :, 0],
                         dtype=np.float32)
        image[~np.isfinite(image) | (image <= 0)] = np.nan
        if noise:
            with self._noise_lock:
                image = apply_depth_noise(image, cam.depth_noise, self._depth_rngs[cam.name])
        return stamp, colour, image

    def close(self):
        """Drop this thread's render context (its engine and GL resources)."""
        self._render.context = None


__all__ = ['DrakeWorld', 'drake_urdf']
