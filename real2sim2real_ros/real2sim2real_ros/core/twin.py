"""The MuJoCo twin: robot + reconstructed scene + named physical parameters, and rollouts.

The servo model matches a position-controlled arm whose controller streams the JTC reference
with velocity feed-forward: ``force = kp (q_ref - q) + kv (v_ref - qdot)``, realised as a MuJoCo
position actuator with ``ctrl = q_ref + (kv / kp) v_ref``. Command latency delays the reference:
the actuators hold ``ref(t_k - latency)`` over step k (a delay queue with sub-step resolution;
:meth:`Twin.step` uses a plain queue of whole steps).

Named parameters (``<kind>/<element>/<field>``, see core/parameters.py) map onto MjModel fields
without recompiling, so one compiled model serves every parameter sample:

========================  ==========================================
body/<b>/mass             body_mass (inertia scaled with it)
body/<b>/com_offset_x|y|z body_ipos - ipos at build (free bodies keep M's coupling entries)
body/<b>/linear_damping   dof_damping of a free body's 3 translational dofs (N s/m): a loss
                          that grows with the object's speed
body/<b>/angular_damping  dof_damping of its 3 rotational dofs (N m s/rad)
geom/<g>/friction         geom_friction[:, 0] (sliding)
geom/<g>/torsional_friction, rolling_friction  geom_friction[:, 1|2]
joint/<j>/damping         dof_damping
joint/<j>/frictionloss    dof_frictionloss
joint/<j>/armature        dof_armature
actuator/<a>/kp, kv       gainprm / biasprm of the position actuator
global/command_latency    s, delay of the reference
global/gravity_compensation  body_gravcomp of the robot's bodies
global/finger_friction    geom_friction[:, 0] of the gripper's finger geoms (a robot with a
                          parallel-jaw gripper only; core/grasping/jaw.twin_grasp_contacts
                          makes it rule every finger-object contact)
========================  ==========================================

Element names match exactly or as the last component of a prefixed name (``box_0`` finds
``object/box_0``). MuJoCo combines the friction of two geoms of equal priority by the maximum,
so an object's friction below the table's has no effect unless the scene gives priorities.

Time step: 1 ms by default. At 2 ms the discretisation error (zero-order hold of the
reference, implicit servo damping) is of the size of the joint damping effect itself
(joint damping is ~1% of the servo kv), and a fit absorbs it into biased damping estimates.
"""
from __future__ import annotations

import collections
import copy
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import mujoco
import mujoco.rollout
import numpy as np

from .joint_trajectory import JointTrajectoryCommand, TrajectoryError, TrajectoryFollower
from .parameters import UnknownParameterError, split_name
from .robot_description import RobotDescription, RobotDescriptionError

__all__ = ['RolloutResult', 'Twin', 'TwinBuildError', 'TwinError', 'UnknownParameterError',
           'UnstableTwinError']

MAX_QVEL = 1.0e3   # rad/s or m/s: beyond this the twin has blown up
# s of sim time a parameter set must survive a small move without diverging (check_stable):
# values inside PARAMETER_UPPER_BOUNDS can blow the twin up (measured on the default arm:
# every link 1e-6 kg with armature 0 and kp 1e6 diverges at the first step; with kv 1e5
# instead of kp, after 0.19 s), so a bound per value cannot rule it out.
STABILITY_PROBE_S = 0.3
STABILITY_PROBE_STEP = 0.02   # rad each joint moves in check_stable
LIMIT_MARGIN = 0.2  # rad past a joint limit: no real arm gets there


class TwinError(RuntimeError):
    """Base class of twin errors."""


class TwinBuildError(TwinError):
    """The robot / scene could not be assembled into a twin."""


class UnstableTwinError(TwinError):
    """A rollout diverged (NaN, reset by MuJoCo, or absurd velocities). Nodes name it
    UNSTABLE_TWIN (the Rollout action: UNSTABLE)."""


class InvalidRolloutError(TwinError, ValueError):
    """Rollout inputs are malformed (shapes, trajectory); Rollout INVALID_GOAL."""


@dataclass
class RolloutResult:
    """Rollout output. positions/velocities: (n_rollouts, n_samples, n_joints);
    object_poses: (n_rollouts, n_samples, n_objects, 7) as x y z qw qx qy qz."""

    times: np.ndarray
    joint_names: list[str]
    positions: np.ndarray
    velocities: np.ndarray
    object_ids: list[str]
    object_poses: np.ndarray
    steps: int
    wall_time: float


@dataclass(frozen=True)
class _Field:
    kind: str
    field: str
    index: int          # body/geom/dof/actuator id, -1 for globals


_FIELDS = {
    'body': ('mass', 'com_offset_x', 'com_offset_y', 'com_offset_z', 'linear_damping',
             'angular_damping'),
    'geom': ('friction', 'torsional_friction', 'rolling_friction'),
    'joint': ('damping', 'frictionloss', 'armature'),
    'actuator': ('kp', 'kv'),
    'global': ('command_latency', 'gravity_compensation', 'finger_friction'),
}
# Largest magnitude accepted per field (units as default_unit): far beyond any real cell, small
# enough that a typo (friction 1e9) is refused instead of making the twin meaningless.
PARAMETER_UPPER_BOUNDS = {
    'mass': 1e4, 'com_offset_x': 1.0, 'com_offset_y': 1.0, 'com_offset_z': 1.0,
    'linear_damping': 1e3, 'angular_damping': 10.0,
    'friction': 10.0, 'torsional_friction': 1.0, 'rolling_friction': 1.0,
    'damping': 1e4, 'frictionloss': 1e4, 'armature': 100.0,
    'kp': 1e6, 'kv': 1e5,
    'command_latency': 1.0, 'gravity_compensation': 2.0, 'finger_friction': 10.0,
}


def _load_scene(scene) -> mujoco.MjSpec:
    if scene is None:
        return mujoco.MjSpec()
    if isinstance(scene, mujoco.MjSpec):
        return scene.copy()
    try:
        if isinstance(scene, str) and scene.lstrip().startswith('<'):
            return mujoco.MjSpec.from_string(scene)
        path = Path(scene)
        if path.is_dir():
            raise TwinBuildError(f"scene MJCF '{path}' is a directory, not an MJCF file")
        if not path.is_file():
            raise TwinBuildError(f"scene MJCF '{path}' does not exist")
        return mujoco.MjSpec.from_file(os.fspath(path))
    except ValueError as exc:
        raise TwinBuildError(f'cannot parse the scene MJCF: {exc}') from None


class Twin:
    """A MuJoCo twin of the cell. See the module docstring for the parameter names."""

    def __init__(self, robot: RobotDescription, scene=None, parameters: dict | None = None,
                 timestep: float = 0.001, robot_pos=(0.0, 0.0, 0.0),
                 robot_quat=(1.0, 0.0, 0.0, 0.0)):
        if not timestep > 0:
            raise TwinBuildError(f'timestep={timestep} must be > 0')
        self.robot = robot
        world = _load_scene(scene)
        world.option.timestep = timestep
        world.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
        # Elliptic friction cones: the default pyramidal cone bends sliding objects off their
        # heading (a box sent at 0.3 rad slid away at 0.5 rad), which one-shot tasks cannot afford.
        world.option.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
        try:
            robot.attach_to(world, pos=robot_pos, quat=robot_quat)
            with warnings.catch_warnings():
                warnings.filterwarnings('ignore', message='.*empty prefix.*')
                self.model, ipos0 = _compile_with_general_free_bodies(world)
        except (RobotDescriptionError, ValueError) as exc:
            raise TwinBuildError(f'cannot build the twin: {exc}') from None
        m = self.model
        self.data = mujoco.MjData(m)
        self.joint_names = list(robot.joint_names)
        jids = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, n) for n in self.joint_names]
        self._qadr = np.array([m.jnt_qposadr[j] for j in jids])
        self._dadr = np.array([m.jnt_dofadr[j] for j in jids])
        self._act = np.array([mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, n)
                              for n in self.joint_names])
        if np.any(self._act < 0):
            raise TwinBuildError('the robot description has no actuator per joint')
        # The reference carries velocity feed-forward, so ctrl may leave the joint range.
        m.actuator_ctrllimited[self._act] = 0
        # The robot description gives its bodies gravcomp; scene bodies have none.
        self._robot_bodies = np.array(
            [b for b in range(1, m.nbody) if m.body_gravcomp[b] > 0], dtype=int)
        self._gravcomp0 = m.body_gravcomp[self._robot_bodies].copy()
        self.object_ids, self._obj_qadr = [], []
        for j in range(m.njnt):
            if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
                self.object_ids.append(m.body(m.jnt_bodyid[j]).name.split('/')[-1])
                self._obj_qadr.append(int(m.jnt_qposadr[j]))
        self._ipos0 = ipos0
        self.latency = 0.0
        self.gravity_compensation = 1.0
        self._fingers = _finger_geoms(m, robot)
        self._pools: dict[int, mujoco.rollout.Rollout] = {}
        self._datas: list[mujoco.MjData] = []
        self._state_spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
        self._nstate = mujoco.mj_stateSize(m, self._state_spec)
        self._queue: collections.deque = collections.deque()
        if parameters:
            self.set_parameters(parameters)
        self.reset()

    # ------------------------------------------------------------------ parameters
    @property
    def timestep(self) -> float:
        """Physics timestep in s."""
        return float(self.model.opt.timestep)

    def parameter_names(self) -> list[str]:
        """Every name this twin understands."""
        m = self.model
        names = [f'global/{f}' for f in _FIELDS['global']
                 if f != 'finger_friction' or self._fingers]
        for i in range(1, m.nbody):
            names += [f'body/{m.body(i).name}/{f}' for f in _FIELDS['body']
                      if f not in _DAMPING_DOFS or _free_dof(m, i) is not None]
        for i in range(m.ngeom):
            if m.geom(i).name:
                names += [f'geom/{m.geom(i).name}/{f}' for f in _FIELDS['geom']]
        names += [f'joint/{j}/{f}' for j in self.joint_names for f in _FIELDS['joint']]
        names += [f'actuator/{a}/{f}' for a in self.joint_names for f in _FIELDS['actuator']]
        return names

    def _find(self, obj, element: str, name: str) -> int:
        m = self.model
        idx = mujoco.mj_name2id(m, obj, element)
        if idx >= 0:
            return idx
        count = {mujoco.mjtObj.mjOBJ_BODY: m.nbody, mujoco.mjtObj.mjOBJ_GEOM: m.ngeom,
                 mujoco.mjtObj.mjOBJ_JOINT: m.njnt, mujoco.mjtObj.mjOBJ_ACTUATOR: m.nu}[obj]
        hits = [i for i in range(count)
                if (mujoco.mj_id2name(m, obj, i) or '').endswith('/' + element)]
        if len(hits) == 1:
            return hits[0]
        why = 'is ambiguous' if hits else 'does not exist in the twin'
        raise UnknownParameterError(f"parameter {name!r}: element {element!r} {why}")

    def _resolve(self, name: str) -> _Field:
        kind, element, fld = split_name(name)
        if fld == 'friction' and kind == 'joint':
            fld = 'frictionloss'   # URDF <dynamics friction> means MuJoCo frictionloss
        if fld not in _FIELDS[kind]:
            raise UnknownParameterError(
                f'parameter {name!r}: {kind} has no field {fld!r}; known: {_FIELDS[kind]}')
        if kind == 'global':
            if fld == 'finger_friction' and not self._fingers:
                raise UnknownParameterError(f'parameter {name!r}: the robot '
                                            f'{self.robot.name!r} has no gripper fingers')
            return _Field(kind, fld, -1)
        if kind == 'body':
            body = self._find(mujoco.mjtObj.mjOBJ_BODY, element, name)
            if fld in _DAMPING_DOFS and _free_dof(self.model, body) is None:
                raise UnknownParameterError(f'parameter {name!r}: {fld} is a free body\'s '
                                            f'(an object\'s); {element!r} has no free joint')
            return _Field(kind, fld, body)
        if kind == 'geom':
            return _Field(kind, fld, self._find(mujoco.mjtObj.mjOBJ_GEOM, element, name))
        if kind == 'joint':
            j = self._find(mujoco.mjtObj.mjOBJ_JOINT, element, name)
            return _Field(kind, fld, int(self.model.jnt_dofadr[j]))
        return _Field(kind, fld, self._find(mujoco.mjtObj.mjOBJ_ACTUATOR, element, name))

    def validate_names(self, names) -> None:
        """Raise UnknownParameterError naming the first name the twin does not have."""
        for n in names:
            self._resolve(n)

    def _read(self, model: mujoco.MjModel, f: _Field, extra: dict) -> float:
        i = f.index
        if f.kind == 'global':
            if f.field == 'finger_friction':    # read off the pads: no state beside them
                return float(model.geom_friction[self._fingers[0], 0])
            return float(extra[f.field])
        if f.kind == 'body':
            if f.field == 'mass':
                return float(model.body_mass[i])
            if f.field in _DAMPING_DOFS:
                return float(model.dof_damping[_free_dof(model, i) + _DAMPING_DOFS[f.field]])
            axis = 'xyz'.index(f.field[-1])
            return float(model.body_ipos[i, axis] - self._ipos0[i, axis])
        if f.kind == 'geom':
            return float(model.geom_friction[i, _FIELDS['geom'].index(f.field)])
        if f.kind == 'joint':
            return float(getattr(model, f'dof_{f.field}')[i])
        if f.field == 'kp':
            return float(model.actuator_gainprm[i, 0])
        return float(-model.actuator_biasprm[i, 2])

    def _write(self, model: mujoco.MjModel, f: _Field, value: float, extra: dict) -> None:
        value = float(value)
        if not np.isfinite(value):
            raise ValueError(f'{f.kind}/{f.field}: value {value} is not finite')
        bound = PARAMETER_UPPER_BOUNDS.get(f.field)
        if bound is not None and abs(value) > bound:
            raise ValueError(f'{f.kind}/{f.field}: |{value:g}| is above the bound {bound:g} '
                             f'(core.twin.PARAMETER_UPPER_BOUNDS)')
        i = f.index
        if f.kind == 'global':
            if value < 0:
                raise ValueError(f'global/{f.field} must be >= 0, got {value}')
            if f.field == 'finger_friction':
                model.geom_friction[self._fingers, 0] = value
                return
            extra[f.field] = value
            if f.field == 'gravity_compensation':
                model.body_gravcomp[self._robot_bodies] = self._gravcomp0 * value
            return
        if f.kind == 'body':
            if f.field == 'mass':
                if value <= 0:
                    raise ValueError(f'body mass must be > 0, got {value}')
                old = model.body_mass[i]
                if old > 0:
                    model.body_inertia[i] *= value / old
                    _rescale_free_body_constants(model, i, old / value)
                model.body_mass[i] = value
            elif f.field in _DAMPING_DOFS:
                if value < 0:
                    raise ValueError(f'body/{f.field} must be >= 0, got {value}')
                a = _free_dof(model, i) + _DAMPING_DOFS[f.field]
                model.dof_damping[a:a + 3] = value
            else:
                axis = 'xyz'.index(f.field[-1])
                ipos = model.body_ipos[i].copy()
                ipos[axis] = self._ipos0[i, axis] + value
                _move_com(model, i, ipos)
            return
        if value < 0:
            raise ValueError(f'{f.kind}/{f.field} must be >= 0, got {value}')
        if f.kind == 'geom':
            model.geom_friction[i, _FIELDS['geom'].index(f.field)] = value
        elif f.kind == 'joint':
            getattr(model, f'dof_{f.field}')[i] = value
        elif f.field == 'kp':
            model.actuator_gainprm[i, 0] = value
            model.actuator_biasprm[i, 1] = -value
        else:
            model.actuator_biasprm[i, 2] = -value

    def check_stable(self, duration: float = STABILITY_PROBE_S, q0=None,
                     object_poses: dict | None = None) -> None:
        """Raise UnstableTwinError unless the twin survives a small move from ``q0`` (default:
        its current joint positions), at rest: every joint STABILITY_PROBE_STEP rad towards
        the middle of its range in 0.1 s, then held to ``duration`` s of sim time, with the
        checks of every rollout (NaN/inf, MuJoCo's reset on a bad acceleration, absurd
        velocities, joints far past their limits). Holding still alone is not enough: a
        servo that blows up on the first move can stand still for ever. One rollout; the
        twin's own state is untouched."""
        q = self.joint_positions() if q0 is None else np.asarray(q0, float)
        mid = 0.5 * (np.asarray(self.robot.lower, float) + np.asarray(self.robot.upper, float))
        target = q + STABILITY_PROBE_STEP * np.where(mid >= q, 1.0, -1.0)
        self.rollout(q, None, np.array([0.1, duration]), np.stack([target, target]),
                     sample_period=duration, duration=duration, object_poses=object_poses)

    def _extra(self) -> dict:
        return {'command_latency': self.latency,
                'gravity_compensation': self.gravity_compensation}

    def get_parameter(self, name: str) -> float:
        """Current value of twin parameter ``name`` (SI units)."""
        return self._read(self.model, self._resolve(name), self._extra())

    def get_parameters(self, names=None) -> dict[str, float]:
        """Parameter name -> current value for ``names`` (default: all)."""
        names = self.parameter_names() if names is None else names
        return {n: self.get_parameter(n) for n in names}

    def set_parameter(self, name: str, value: float) -> None:
        """Set twin parameter ``name`` to ``value`` (SI units)."""
        self.set_parameters({name: value})

    def set_parameters(self, values: dict[str, float]) -> None:
        """Set named parameters, all or nothing: a bad name or value raises and leaves the
        twin exactly as it was."""
        resolved = [(self._resolve(n), v) for n, v in values.items()]
        extra = self._extra()
        saved = self.snapshot()
        for (f, v), n in zip(resolved, values):
            try:
                self._write(self.model, f, v, extra)
            except ValueError as exc:
                self.restore(saved)
                raise ValueError(f'parameter {n!r}: {exc}') from None
        self.latency = extra['command_latency']
        self.gravity_compensation = extra['gravity_compensation']

    def snapshot(self) -> dict:
        """What set_parameters may change (model arrays and the latency / gravity
        compensation), for :meth:`restore`: a set-and-restore through set_parameters leaves
        rounding residue (a mass scales the inertia and constants by old / new), and
        contact-rich rollouts amplify any difference."""
        saved = {f: getattr(self.model, f).copy() for f in _WRITTEN_FIELDS}
        saved['latency'], saved['gravity_compensation'] = self.latency, \
            self.gravity_compensation
        return saved

    def restore(self, saved: dict) -> None:
        """Back to a :meth:`snapshot`, bit for bit."""
        for f in _WRITTEN_FIELDS:
            getattr(self.model, f)[...] = saved[f]
        self.latency, self.gravity_compensation = saved['latency'], \
            saved['gravity_compensation']

    def fork(self) -> Twin:
        """A twin with this one's model (a copy, parameters as set now) and rollout workers
        and scratch data of its own: rollouts on the two may run on two threads at once
        (MuJoCo steps without the GIL). Parameters set on one afterwards stay on it. Close
        it like any twin."""
        twin = copy.copy(self)
        twin.model = copy.copy(self.model)
        twin.data = mujoco.MjData(twin.model)
        twin._pools, twin._datas = {}, []
        twin._queue = collections.deque(self._queue)
        return twin

    def _variant(self, values: dict[str, float]) -> tuple[mujoco.MjModel, dict]:
        """A copy of the model with ``values`` applied (for batched rollouts)."""
        model = copy.copy(self.model)
        extra = self._extra()
        for n, v in values.items():
            try:
                self._write(model, self._resolve(n), v, extra)
            except ValueError as exc:
                raise ValueError(f'parameter {n!r}: {exc}') from None
        return model, extra

    # ------------------------------------------------------------------ stepping
    def reset(self, q0=None, qd0=None) -> None:
        """Robot at q0 (default: the model's qpos0), at rest, objects at their initial poses."""
        mujoco.mj_resetData(self.model, self.data)
        q0 = self.data.qpos[self._qadr].copy() if q0 is None else np.asarray(q0, float)
        self.data.qpos[self._qadr] = q0
        if qd0 is not None:
            self.data.qvel[self._dadr] = qd0
        self._set_ctrl(self.model, self.data.ctrl, q0, np.zeros_like(q0))
        n = int(round(self.latency / self.timestep))
        self._queue = collections.deque([(q0.copy(), np.zeros_like(q0))] * n)
        mujoco.mj_forward(self.model, self.data)

    def _set_ctrl(self, model, ctrl, q_ref, v_ref) -> None:
        kp = model.actuator_gainprm[self._act, 0]
        kv = -model.actuator_biasprm[self._act, 2]
        ctrl[..., self._act] = q_ref + (kv / kp) * v_ref

    def step(self, q_ref, v_ref=None) -> None:
        """One step with a new reference; it reaches the actuators after the latency queue."""
        q_ref = np.asarray(q_ref, float)
        v_ref = np.zeros_like(q_ref) if v_ref is None else np.asarray(v_ref, float)
        self._queue.append((q_ref, v_ref))
        q, v = self._queue.popleft()
        self._set_ctrl(self.model, self.data.ctrl, q, v)
        mujoco.mj_step(self.model, self.data)
        if not np.all(np.isfinite(self.data.qacc)) or np.any(
                np.abs(self.data.qvel) > MAX_QVEL):
            raise UnstableTwinError(f'twin diverged at t={self.data.time:.4f} s')

    def step_held(self, n: int, q_ref, v_ref=None) -> None:
        """``n`` steps with one constant reference (a controller holding its last point).

        Python steps one at a time only until the latency queue holds nothing but this
        reference; from then on the control is constant and MuJoCo steps the rest in one
        ``mj_step(nstep=...)`` call, at bare-MuJoCo speed. Same result as ``n`` x ``step``.
        """
        q_ref = np.asarray(q_ref, float)
        v_ref = np.zeros_like(q_ref) if v_ref is None else np.asarray(v_ref, float)
        done = 0
        while done < n and not all(np.array_equal(q, q_ref) and np.array_equal(v, v_ref)
                                   for q, v in self._queue):
            self.step(q_ref, v_ref)
            done += 1
        rest = n - done
        if rest <= 0:
            return
        self._set_ctrl(self.model, self.data.ctrl, q_ref, v_ref)
        t_end = self.data.time + rest * self.model.opt.timestep
        mujoco.mj_step(self.model, self.data, nstep=rest)
        # MuJoCo resets the state (and its time) on a diverged acceleration.
        if (abs(self.data.time - t_end) > 0.5 * self.model.opt.timestep
                or not np.all(np.isfinite(self.data.qacc))
                or np.any(np.abs(self.data.qvel) > MAX_QVEL)):
            raise UnstableTwinError(f'twin diverged before t={t_end:.4f} s')

    def joint_positions(self) -> np.ndarray:
        """The arm's joint positions (rad)."""
        return self.data.qpos[self._qadr].copy()

    def joint_efforts(self) -> np.ndarray:
        """The arm's actuator efforts (N m, the servo's: gravity compensation apart)."""
        return self.data.actuator_force[self._act].copy()

    # ------------------------------------------------------------------ rollouts
    def _initial_state(self, q0, qd0, object_poses) -> np.ndarray:
        m = self.model
        d = mujoco.MjData(m)
        d.qpos[:] = m.qpos0
        d.qpos[self._qadr] = q0
        d.qvel[self._dadr] = qd0
        for oid, (xyz, quat) in (object_poses or {}).items():
            if oid not in self.object_ids:
                raise InvalidRolloutError(f'no object {oid!r} in the twin; have {self.object_ids}')
            a = self._obj_qadr[self.object_ids.index(oid)]
            d.qpos[a:a + 3] = xyz
            d.qpos[a + 3:a + 7] = np.asarray(quat, float) / np.linalg.norm(quat)
        state = np.empty(self._nstate)
        mujoco.mj_getState(m, d, state, self._state_spec)
        return state

    def _reference(self, q_start, times, positions, velocities):
        nj = len(self.joint_names)
        follower = TrajectoryFollower(self.joint_names, q_start)
        pos = np.asarray(positions, float)
        if pos.ndim != 2 or pos.shape[1] != nj:
            raise InvalidRolloutError(
                f'trajectory positions must be (n_points, {nj}), got shape {pos.shape}')
        cmd = JointTrajectoryCommand(self.joint_names, np.asarray(times, float), pos,
                                     None if velocities is None else np.asarray(velocities))
        try:
            return follower.set_trajectory(cmd, 0.0)
        except TrajectoryError as exc:
            raise InvalidRolloutError(f'invalid trajectory: {exc}') from None

    @staticmethod
    def _sample(traj, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised Trajectory.sample (positions, velocities) at times ``t``."""
        knots, coeffs = traj.knots, traj.coeffs
        i = np.clip(np.searchsorted(knots, t, side='right') - 1, 0, coeffs.shape[0] - 1)
        tau = np.where(i < len(knots) - 1, t - knots[np.minimum(i, len(knots) - 1)], 0.0)
        tau = np.maximum(tau, 0.0)[:, None]
        c = coeffs[i]
        p = c[:, 0] + tau * (c[:, 1] + tau * (c[:, 2] + tau * (c[:, 3] + tau * (
            c[:, 4] + tau * c[:, 5]))))
        v = c[:, 1] + tau * (2 * c[:, 2] + tau * (3 * c[:, 3] + tau * (4 * c[:, 4] + tau * 5 *
                                                                        c[:, 5])))
        v[t < knots[0]] = 0.0   # before the start the reference holds
        return p, v

    def _pool(self, nthread: int) -> mujoco.rollout.Rollout:
        nthread = max(0, int(nthread))
        key = 0 if nthread <= 1 else nthread
        if key not in self._pools:
            self._pools[key] = mujoco.rollout.Rollout(nthread=key)
        while len(self._datas) < max(1, key):
            self._datas.append(mujoco.MjData(self.model))
        return self._pools[key]

    def rollout(self, q0, qd0, traj_times, traj_positions, sample_period: float = 0.0,
                param_samples: list[dict] | None = None, nthread: int = 1, *,
                traj_velocities=None, duration: float | None = None, reference_start=None,
                object_poses: dict | None = None, sample_times=None) -> RolloutResult:
        """Run a joint trajectory from (q0, qd0), once per parameter sample.

        traj_times / traj_positions (/ traj_velocities): the JointTrajectory points
        (time_from_start, reordered to ``joint_names``); interpolated with JTC semantics from
        ``reference_start`` (default q0: the reference the controller held before).
        duration: simulated time (default: trajectory end + 0.2 s). sample_period: spacing of
        returned samples (0: every step); sample_times: explicit times instead (linear
        interpolation between steps, t=0 is the initial state). param_samples: a list of
        {name: value} applied on top of the current parameters (None: current parameters).
        """
        import time as _time
        t_wall = _time.perf_counter()
        nj = len(self.joint_names)
        q0 = np.asarray(q0, float).reshape(-1)
        qd0 = np.zeros(nj) if qd0 is None or len(qd0) == 0 else np.asarray(qd0, float)
        if q0.shape != (nj,) or qd0.shape != (nj,) or not np.all(np.isfinite(q0)):
            raise InvalidRolloutError(f'initial state must have {nj} finite joint values')
        q_start = q0 if reference_start is None else np.asarray(reference_start, float)
        traj = self._reference(q_start, traj_times, traj_positions, traj_velocities)
        dt = self.timestep
        if duration is None:
            duration = traj.end_time + 0.2
        if sample_times is not None:
            duration = max(duration, float(np.max(sample_times)))
        nstep = max(1, int(np.ceil(duration / dt - 1e-9)))
        samples = [{}] if not param_samples else list(param_samples)
        models, latencies = [], []
        for s in samples:
            for n in s:
                self._resolve(n)
            model, extra = self._variant(s) if s else (self.model, self._extra())
            models.append(model)
            latencies.append(extra['command_latency'])
        t_steps = np.arange(nstep) * dt
        control = np.zeros((len(models), nstep, self.model.nu))
        for b, (model, lat) in enumerate(zip(models, latencies)):
            p, v = self._sample(traj, t_steps - lat)
            self._set_ctrl(model, control[b], p, v)
        init = self._initial_state(q0, qd0, object_poses)
        pool = self._pool(nthread)
        nd = max(1, nthread if nthread > 1 else 1)
        state, _ = pool.rollout(models, self._datas[:nd], init[None, :], control,
                                initial_warmstart=np.zeros((1, self.model.nv)))
        self._check_stable(state, dt)
        # State layout (FULLPHYSICS): time, qpos, qvel, act, ...
        nq = self.model.nq
        qpos = np.concatenate([np.broadcast_to(init[1:1 + nq], (len(models), 1, nq)),
                               state[:, :, 1:1 + nq]], axis=1)
        qvel = np.concatenate([np.broadcast_to(init[1 + nq:1 + nq + self.model.nv],
                                               (len(models), 1, self.model.nv)),
                               state[:, :, 1 + nq:1 + nq + self.model.nv]], axis=1)
        times_full = np.arange(nstep + 1) * dt
        if sample_times is not None:
            times = np.asarray(sample_times, float)
            qpos = _interp(times, times_full, qpos)
            qvel = _interp(times, times_full, qvel)
        else:
            stride = max(1, int(round(sample_period / dt))) if sample_period > 0 else 1
            sel = np.arange(stride, nstep + 1, stride)
            times, qpos, qvel = times_full[sel], qpos[:, sel], qvel[:, sel]
        poses = np.stack([qpos[:, :, a:a + 7] for a in self._obj_qadr], axis=2) \
            if self._obj_qadr else np.zeros(qpos.shape[:2] + (0, 7))
        return RolloutResult(times, list(self.joint_names), qpos[:, :, self._qadr],
                             qvel[:, :, self._dadr], list(self.object_ids), poses, nstep,
                             _time.perf_counter() - t_wall)

    def _check_stable(self, state: np.ndarray, dt: float) -> None:
        nq, nv = self.model.nq, self.model.nv
        for b in range(state.shape[0]):
            s = state[b]
            if not np.all(np.isfinite(s)):
                k = int(np.argmax(~np.all(np.isfinite(s), axis=1)))
                raise UnstableTwinError(f'rollout {b}: NaN/inf in the state at t={k * dt:.4f} s')
            t = s[:, 0]
            if np.any(np.diff(t) <= 0):   # MuJoCo resets the data on bad accelerations
                k = int(np.argmax(np.diff(t) <= 0)) + 1
                raise UnstableTwinError(
                    f'rollout {b}: MuJoCo reset the simulation at step {k} (bad acceleration)')
            vmax = np.abs(s[:, 1 + nq:1 + nq + nv]).max()
            if vmax > MAX_QVEL:
                raise UnstableTwinError(f'rollout {b}: velocity {vmax:.3g} exceeds {MAX_QVEL}')
            q = s[:, 1 + self._qadr]
            out = (q < self.robot.lower - LIMIT_MARGIN) | (q > self.robot.upper + LIMIT_MARGIN)
            if out.any():
                k, j = map(int, np.argwhere(out)[0])
                raise UnstableTwinError(
                    f"rollout {b}: joint '{self.joint_names[j]}' at {q[k, j]:.3f} rad, far "
                    f"outside its limits, at t={(k + 1) * dt:.4f} s")

    def close(self) -> None:
        """Close the rollout worker pools."""
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


def _finger_geoms(model: mujoco.MjModel, robot: RobotDescription) -> list[int]:
    """The gripper's finger geoms (core/grasping/jaw.finger_geoms), [] without a gripper."""
    from .grasping.jaw import finger_geoms, gripper_joints
    if gripper_joints(robot) is None:
        return []
    return finger_geoms(model, robot)


def _interp(t_new: np.ndarray, t: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Linear interpolation of y (batch, len(t), n) at t_new along axis 1."""
    idx = np.clip(np.searchsorted(t, t_new, side='right') - 1, 0, len(t) - 2)
    w = ((t_new - t[idx]) / (t[idx + 1] - t[idx]))[None, :, None]
    return y[:, idx] * (1 - w) + y[:, idx + 1] * w


def _compile_with_general_free_bodies(world: mujoco.MjSpec):
    """(model, body_ipos as built): ``world`` compiled so that a centre of mass offset
    written later into a free body's body_ipos moves it as a compiled one would.

    MuJoCo compiles a free body whose COM sits at its frame origin with a diagonal 6x6 mass
    block (no entries for the translation-rotation coupling in the sparse M), so an offset
    written afterwards had no coupling: a box with a 1 cm lateral offset turned 0.11 rad
    where the same box compiled with the offset turned 0.01 rad. Such bodies are compiled
    again with their inertial made explicit and the COM moved by ``_COUPLING_EPS`` (which
    keeps those entries), then put back exactly where they were."""
    model = world.compile()
    ipos0 = model.body_ipos.copy()
    simple = []
    for j in range(model.njnt):
        b = int(model.jnt_bodyid[j])
        if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE and model.body(b).name and \
                model.dof_simplenum[model.jnt_dofadr[j]] > 0:
            simple.append(b)
    if not simple:
        return model, ipos0
    for b in simple:
        body = world.body(model.body(b).name)
        body.explicitinertial = True
        body.mass = float(model.body_mass[b])
        body.ipos = (ipos0[b] + [0.0, 0.0, _COUPLING_EPS]).tolist()
        body.iquat = model.body_iquat[b].tolist()
        body.inertia = model.body_inertia[b].tolist()
        body.fullinertia = [np.nan] * 6
    model = world.compile()
    for b in simple:
        _move_com(model, b, ipos0[b])
    return model, ipos0


# Every MjModel array _write changes, directly or through _move_com (collision bounding
# boxes, fast-path flags) and _rescale_free_body_constants: what snapshot() saves. A field
# missing here was the push_to_pose bug of stop 11 (randomised offsets' boxes drifted).
_WRITTEN_FIELDS = ('body_mass', 'body_inertia', 'body_ipos', 'body_invweight0',
                   'body_subtreemass', 'body_gravcomp', 'dof_invweight0', 'dof_M0',
                   'dof_damping', 'dof_frictionloss', 'dof_armature', 'geom_friction',
                   'actuator_gainprm', 'actuator_biasprm', 'bvh_aabb', 'body_sameframe',
                   'body_simple', 'dof_simplenum')

_COUPLING_EPS = 1e-4   # m: enough for the compiler to keep the coupling entries of M


def _move_com(model: mujoco.MjModel, body: int, ipos) -> None:
    """Put ``body``'s centre of mass at ``ipos`` (body frame) in a compiled model: also its
    collision bounding boxes, which MuJoCo keeps in the inertial frame (left stale, the boxes
    sat 1 cm off for a 1 cm offset) and the fast-path flags. dof_M0 and the invweights stay
    at their compiled values (a 1 cm offset changes a box's translational invweight by ~10%,
    which only scales contact softness; the slide and turn still match a compiled offset)."""
    ipos = np.asarray(ipos, float)
    delta = ipos - model.body_ipos[body]
    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, model.body_iquat[body])
    local = rot.reshape(3, 3).T @ delta
    adr, num = model.body_bvhadr[body], model.body_bvhnum[body]
    if adr >= 0 and num > 0:
        model.bvh_aabb[adr:adr + num, :3] -= local
    model.body_ipos[body] = ipos
    _make_body_general(model, body)


def _make_body_general(model: mujoco.MjModel, body: int) -> None:
    """Take a body off MuJoCo's fast paths for a centre of mass at the frame origin
    (body_sameframe, body_simple, dof_simplenum, set at compile time): they ignore a
    body_ipos set afterwards, so a centre of mass offset had no effect at all on a free box
    (measured: the same slide to 0.1 mm with 2 cm offsets)."""
    model.body_sameframe[body] = 0
    model.body_simple[body] = 0
    adr, num = model.body_dofadr[body], model.body_dofnum[body]
    if num > 0:
        model.dof_simplenum[adr:adr + num] = 0


_DAMPING_DOFS = {'linear_damping': 0, 'angular_damping': 3}   # first dof of the 3 in a free joint


def _free_dof(model: mujoco.MjModel, body: int) -> int | None:
    """The first dof of ``body``'s free joint (None: it has none)."""
    for j in range(model.njnt):
        if model.jnt_bodyid[j] == body and model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
            return int(model.jnt_dofadr[j])
    return None


def _rescale_free_body_constants(model: mujoco.MjModel, body: int, factor: float) -> None:
    """Refresh what MuJoCo derived from a free body's mass at compile time.

    MuJoCo steps with dof_M0 (and uses the invweights for constraint scaling); left at the
    compiled mass, a box made three times heavier diverges on impact. mj_setConst cannot
    redo them once a COM offset has moved a body, but for a free body whose inertia scales
    with its mass they scale exactly: invweights by ``factor`` = old/new mass, dof_M0 by
    its inverse. Articulated links are left alone (their constants couple the chain).
    """
    model.body_invweight0[body] *= factor
    model.body_subtreemass[body] /= factor
    adr = _free_dof(model, body)
    if adr is not None:
        model.dof_invweight0[adr:adr + 6] *= factor
        model.dof_M0[adr:adr + 6] /= factor
