"""A parallel-jaw gripper in a MuJoCo model: the jaw's joints, its command and its state.

Contract. A robot description carries a gripper when it has exactly one held prismatic joint
among its end-effector joints (``robot_description``: the driven finger) and, optionally,
mimic joints that follow it (the mirrored finger, coupled by MuJoCo's equality constraint).
:func:`gripper_joints` finds them; a robot without one gets ``None``.

The jaw is driven the way a gripper's firmware drives it (ros2_control's gripper action
controller and the lab grippers' own controllers take a position, a maximum effort and, on
most, a speed): a force-limited position servo whose reference moves towards the commanded
position at most at the commanded speed.

* position: the driven joint's value (m; for a mirrored pair the opening of ONE finger from
  the centre line, so the jaw opens to twice it), clipped into the joint's limits;
* max effort (N): the servo's force cap on the driven joint. The servo is stiff enough
  (:data:`SATURATION_TRAVEL`: full effort 2 mm short of the reference) that a jaw closing on
  an object stalls AT the commanded effort; the mirrored finger presses back through the
  coupling, so each finger squeezes the object with about half the effort;
* speed (m/s): the reference's rate, capped by the joint's velocity limit.

``state`` gives what ``/joint_states`` carries for the jaw: position, velocity and the
servo's effort. :class:`JawServo` is the engine-free part (command checks, the reference,
the gains); :class:`MujocoJaw` wires it into a MuJoCo model (the twin's and the MuJoCo
cell's), core/drake_world.py into a Drake plant. :func:`twin_grasp_contacts` is the twin's
contact recipe for holding what it grasps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np

SATURATION_TRAVEL = 0.002   # m: the jaw servo reaches its effort cap this far from its reference
DAMPING_RATIO = 1.0         # of the jaw servo, about its moving mass
# A mimic finger's coupling: MuJoCo's default equality solref (0.02 s) let a 30 N squeeze
# shift the pair 6 mm off centre (measured, docs/grasping.md); 2 ms keeps it under 0.2 mm.
COUPLING_SOLREF = (0.002, 1.0)
# The twin's grasp contact recipe (twin_grasp_contacts), from the hold test.
TWIN_IMPRATIO = 10.0
TWIN_NOSLIP_ITERATIONS = 5
PAD_SOLREF = (0.002, 1.0)
PAD_PRIORITY = 2
PAD_FRICTION = 1.0


class GripperError(ValueError):
    """The robot has no usable gripper, or a jaw command is malformed."""


@dataclass(frozen=True)
class GripperJoints:
    """The jaw's joints in a robot description (names without any prefix) and limits."""

    joint: str                      # the driven finger joint
    followers: tuple[str, ...]      # mimic joints that follow it
    lower: float                    # m
    upper: float                    # m
    max_effort: float               # N, the URDF effort limit
    max_velocity: float             # m/s, the URDF velocity limit
    start: float = 0.0              # m, where the description holds it (its held position)


def gripper_joints(robot) -> GripperJoints | None:
    """The parallel-jaw gripper of ``robot`` (a core.robot_description.RobotDescription),
    or None when it has none (see the module docstring)."""
    by_name = {j.name: j for j in robot.joints}
    jaws = [n for n in robot.held_joint_names if by_name[n].type == 'prismatic']
    if not jaws:
        return None
    if len(jaws) > 1:
        raise GripperError(f'{robot.name}: more than one driven prismatic jaw joint {jaws}; '
                           'a parallel gripper drives one and mirrors the other')
    info = by_name[jaws[0]]
    followers = tuple(j.name for j in robot.joints if j.mimic == info.name)
    effort = info.effort if math.isfinite(info.effort) else 0.0
    if not effort > 0:
        raise GripperError(f"{robot.name}: jaw joint '{info.name}' needs an effort limit > 0")
    start = float(robot.held_positions[robot.held_joint_names.index(info.name)])
    return GripperJoints(info.name, followers, float(info.lower), float(info.upper),
                         float(effort), float(info.velocity), start)


class JawServo:
    """The jaw's command and reference, engine-free: a force-limited position servo whose
    reference moves towards the commanded position at the commanded speed (module
    docstring). An engine wires ``kp``, ``kv``, ``max_effort`` and :meth:`advance`'s
    reference into its own actuator."""

    def __init__(self, joints: GripperJoints, moving_mass: float):
        self.joints = joints
        self.kp = joints.max_effort / SATURATION_TRAVEL
        self.kv = 2.0 * DAMPING_RATIO * math.sqrt(self.kp * moving_mass)
        self.target: float | None = None
        self.reference: float | None = None
        self.max_effort = joints.max_effort
        self.speed = joints.max_velocity

    def command(self, position: float, max_effort: float | None = None,
                speed: float | None = None) -> None:
        """Move the jaw towards ``position`` (m, clipped into the joint's limits) with at most
        ``max_effort`` (N; default and cap: the joint's effort limit) at ``speed`` (m/s;
        default and cap: its velocity limit). Raises GripperError naming a bad value."""
        j = self.joints
        for name, value in (('position', position), ('max_effort', max_effort),
                            ('speed', speed)):
            if value is not None and not (isinstance(value, (int, float))
                                          and math.isfinite(value)):
                raise GripperError(f'jaw command: {name} must be a finite number, got {value!r}')
        if max_effort is not None and not max_effort > 0:
            raise GripperError(f'jaw command: max_effort must be > 0 N, got {max_effort}')
        if speed is not None and not speed > 0:
            raise GripperError(f'jaw command: speed must be > 0 m/s, got {speed}')
        self.target = float(np.clip(position, j.lower, j.upper))
        self.max_effort = min(j.max_effort, max_effort or j.max_effort)
        self.speed = min(j.max_velocity, speed or j.max_velocity)

    def hold(self) -> None:
        """Stop the jaw: its reference stays where it is now and the effort stays. A jaw
        stalled on an object has its reference at the closed command, so it keeps squeezing:
        a stop never opens a loaded jaw."""
        self.target = self.reference

    def reset(self, position: float) -> None:
        """The jaw at rest at ``position`` (m), commanded to stay there."""
        self.target = self.reference = float(position)

    def advance(self, dt: float, position: float) -> float:
        """The reference after one control period ``dt`` (s); ``position`` (m, the jaw's
        measured one) seeds it the first time."""
        if self.reference is None:
            self.reference = float(position)
        if self.target is None:
            self.target = self.reference
        step = self.speed * dt
        self.reference += float(np.clip(self.target - self.reference, -step, step))
        return self.reference


def moving_mass(model: mujoco.MjModel, dofs) -> float:
    """Sum of the joint-space inertia's diagonal over ``dofs`` at qpos0 (kg for sliders)."""
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    full = np.zeros((model.nv, model.nv))
    mujoco.mj_fullM(model, data, full)
    return float(sum(full[d, d] for d in dofs))


class MujocoJaw(JawServo):
    """The jaw of ``robot`` inside a compiled ``model`` (its elements named ``prefix`` +
    the URDF name, as ``RobotDescription.attach_to`` makes them). The constructor sets the
    jaw servo's gains and a rigid mimic coupling (:data:`COUPLING_SOLREF`) on ``model``."""

    def __init__(self, model: mujoco.MjModel, robot, prefix: str = ''):
        joints = gripper_joints(robot)
        if joints is None:
            raise GripperError(f'{robot.name} has no parallel-jaw gripper')
        jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, prefix + joints.joint)
        act = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, prefix + joints.joint)
        if jid < 0 or act < 0:
            raise GripperError(f"jaw joint '{prefix + joints.joint}' or its actuator is not "
                               'in the model')
        fids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, prefix + f)
                for f in joints.followers]
        self.model = model
        self._qadr = int(model.jnt_qposadr[jid])
        self._dadr = int(model.jnt_dofadr[jid])
        self._act = act
        super().__init__(joints, moving_mass(model, [self._dadr] + [
            int(model.jnt_dofadr[f]) for f in fids]))
        # The held actuator's offset: force = kp (h + ctrl - q) - kv qdot (robot_description).
        self._offset = float(model.actuator_biasprm[act, 0] / model.actuator_gainprm[act, 0])
        model.actuator_gainprm[act, 0] = self.kp
        model.actuator_biasprm[act, :3] = [self.kp * self._offset, -self.kp, -self.kv]
        model.actuator_forcelimited[act] = 1
        self._couplings = []   # (follower qpos address, equality id)
        for e in range(model.neq):
            if (model.eq_type[e] == mujoco.mjtEq.mjEQ_JOINT and model.eq_obj2id[e] == jid
                    and model.eq_obj1id[e] in fids):
                model.eq_solref[e] = COUPLING_SOLREF
                self._couplings.append((int(model.jnt_qposadr[model.eq_obj1id[e]]), e))
        self._apply_effort()

    def _apply_effort(self) -> None:
        self.model.actuator_forcerange[self._act] = [-self.max_effort, self.max_effort]

    def command(self, position, max_effort=None, speed=None) -> None:
        """JawServo.command, and the effort cap written into the model."""
        super().command(position, max_effort, speed)
        self._apply_effort()

    def step(self, data: mujoco.MjData, dt: float) -> None:
        """Advance the reference by one control period ``dt`` (s) and write the jaw's ctrl."""
        data.ctrl[self._act] = self.advance(dt, data.qpos[self._qadr]) - self._offset

    def reset(self, position: float, data: mujoco.MjData | None = None) -> None:
        """The jaw at rest at ``position`` (written into ``data``'s qpos when given)."""
        super().reset(position)
        if data is not None:
            data.qpos[self._qadr] = position
            for adr, e in self._couplings:   # follower = c0 + c1 leader (+ higher terms 0)
                data.qpos[adr] = self.model.eq_data[e, 0] + self.model.eq_data[e, 1] * position
            data.ctrl[self._act] = position - self._offset

    def state(self, data: mujoco.MjData) -> tuple[float, float, float]:
        """(position m, velocity m/s, effort N) of the driven jaw joint."""
        return (float(data.qpos[self._qadr]), float(data.qvel[self._dadr]),
                float(data.actuator_force[self._act]))


def finger_geoms(model: mujoco.MjModel, robot, prefix: str = '') -> list[int]:
    """Ids of the colliding geoms on the fingers of ``robot``'s parallel-jaw gripper in a
    compiled ``model`` (the driven finger's body and its mirrored followers'); GripperError
    for a robot without one."""
    joints = gripper_joints(robot)
    if joints is None:
        raise GripperError(f'{robot.name} has no parallel-jaw gripper')
    bodies = set()
    for name in (joints.joint, *joints.followers):
        jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, prefix + name)
        bodies.add(int(model.jnt_bodyid[jid]))
    return [g for g in range(model.ngeom) if model.geom_bodyid[g] in bodies
            and (model.geom_contype[g] or model.geom_conaffinity[g])]


def twin_grasp_contacts(model: mujoco.MjModel, robot, prefix: str = '',
                        friction: float = PAD_FRICTION) -> list[int]:
    """The twin's grasp contact recipe on a compiled ``model`` (the measured hold test:
    docs/grasping.md): elliptic cones with ``impratio`` :data:`TWIN_IMPRATIO` and
    :data:`TWIN_NOSLIP_ITERATIONS` noslip iterations (no creep under the object's weight),
    and the finger geoms' contacts stiff (``solref`` :data:`PAD_SOLREF`), condim 4, with a
    priority above the objects' so that their own settings rule a finger-object contact:
    the finger-object friction is then ``friction`` (the twin's ``global/finger_friction``,
    :data:`PAD_FRICTION` until identified: core/grasping/slip.py). Returns the finger geoms'
    ids."""
    pads = finger_geoms(model, robot, prefix)
    model.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    model.opt.impratio = TWIN_IMPRATIO
    model.opt.noslip_iterations = TWIN_NOSLIP_ITERATIONS
    for g in pads:
        model.geom_priority[g] = PAD_PRIORITY
        model.geom_solref[g] = PAD_SOLREF
        model.geom_condim[g] = 4
        model.geom_friction[g] = [friction, 0.005, 0.0001]
    return pads
