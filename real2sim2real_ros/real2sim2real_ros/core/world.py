"""The emulated cell's world protocol and the one factory that picks its physics engine.

An emulated cell ("reality") is a :class:`CellWorld`: physics, a ros2_control-style
joint-trajectory controller, noisy joint sensing, cameras rendering noisy depth. The
``emulated_cell`` node, the evaluation harness, the benches and the tests use only what this
protocol names, so any implementation runs under them unchanged. Two exist:

* ``core.emulated_world.EmulatedWorld`` -- MuJoCo (``engine: mujoco``, the default);
* ``core.drake_world.DrakeWorld`` -- Drake's MultibodyPlant with the SAP solver
  (``engine: drake``), a model class the MuJoCo twin cannot contain exactly.

The engine is hidden truth like every other spec value: only :func:`make_world` reads
``spec.engine``; nothing downstream may branch on it (the pipeline sees topics, and the
harness sees this protocol).

Truth accessors (``spec``, ``object_poses``, ``true_joint_positions``, ``camera_spec``) are
for the emulator itself and the evaluator; what a real cell gives (joint states, controller
state, rendered noisy frames, trajectories in) is the rest.
"""
from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable

import numpy as np

from . import camera_model
from .cell_spec import CameraSpec, CellSpec
from .grasping.jaw import GripperError
from .joint_trajectory import JointTrajectoryCommand

ENGINES = ('mujoco', 'drake')


@runtime_checkable
class CellWorld(Protocol):
    """What the emulated_cell node, the harness and the tests use of an emulated cell.

    Every method takes ``lock`` (re-entrant), so a node may step physics on one thread and
    render on another. Times are the world's own clock (s, 0 at reset).
    """

    lock: threading.RLock
    truth: object          # core/truth.TruthDoor: every truth accessor reads through it
    joint_names: list[str]
    initial_positions: np.ndarray
    robot: object          # .urdf_text, .lower, .upper, .velocity_limits, .effort_limits

    @property
    def spec(self) -> CellSpec:
        """The cell spec (hidden truth: evaluators only)."""

    @property
    def time(self) -> float:
        """Simulated time in s."""

    @property
    def timestep(self) -> float:
        """Physics timestep in s."""

    def reset(self) -> None:
        """Robot at its initial positions, objects at their spec poses, time 0."""

    def step_for(self, duration: float) -> int:
        """Advance by ``duration`` (whole steps); returns the number of steps."""

    # sensing (what a real cell publishes)
    def joint_positions(self) -> np.ndarray:
        """Measured joint positions (rad)."""

    def joint_velocities(self) -> np.ndarray:
        """Measured joint velocities (rad/s)."""

    def joint_efforts(self) -> np.ndarray:
        """Measured joint efforts (N m)."""

    def controller_state(self) -> dict:
        """JTC-style state: reference (p, v, a), feedback (measured p, v), error = ref - fb."""

    # control (JTC semantics, core/joint_trajectory.py)
    def set_trajectory(self, cmd: JointTrajectoryCommand, now: float | None = None):
        """Follow ``cmd`` with JTC semantics from time ``now`` (s, default: the cell's time)."""

    def hold(self) -> None:
        """Stop: hold the current (true) position from now on."""

    def trajectory_done(self) -> bool:
        """True once the follower has finished its trajectory."""

    def actuator_setpoint(self) -> np.ndarray:
        """Position setpoint (rad) the servos see now, after the latency."""

    # objects (truth and the evaluator's hands)
    @property
    def object_ids(self) -> list[str]:
        """Ids of the cell's objects."""

    def object_poses(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """TRUE object poses {id: (xyz m, quat wxyz)}: evaluator only, through the truth door."""

    def push_object(self, object_id: str, dv_xy) -> None:
        """A disturbance: add the planar velocity ``dv_xy`` (m/s) to object ``object_id``."""

    def hidden_truth(self, joint_names: list[str] | None = None) -> dict[str, float]:
        """The spec's hidden parameters by name (identification targets; through the door)."""

    def reset_objects(self, ids=None, poses=None) -> None:
        """Put objects ``ids`` (default: all) at their spec poses, or at ``poses`` [(xyz, wxyz)]."""

    def true_joint_positions(self) -> np.ndarray:
        """Noise-free joint positions (rad; evaluator / tests only, through the truth door)."""

    # cameras
    @property
    def has_gripper(self) -> bool:
        """True when the robot carries a parallel-jaw gripper."""

    def command_gripper(self, position: float, max_effort: float | None = None,
                        speed: float | None = None) -> None:
        """Jaw towards ``position`` (m) with at most ``max_effort`` (N) at ``speed`` (m/s)."""

    def hold_gripper(self) -> None:
        """Stop the jaw only (JawServo.hold: a loaded jaw keeps squeezing); the arm runs on."""
        with self.lock:
            self._require_jaw().hold()

    def gripper_state(self) -> tuple[float, float, float]:
        """Measured jaw (position m, velocity m/s, effort N)."""

    def camera_spec(self, name: str) -> CameraSpec:
        """The CameraSpec of camera ``name``."""

    def intrinsics(self, name: str) -> camera_model.Intrinsics:
        """Pinhole intrinsics of camera ``name``."""

    def render(self, camera: str, noise: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(rgb uint8 HxWx3, depth float32 m, NaN = hole) from ``camera``; noise=False: clean."""

    def render_with_time(self, camera: str, noise: bool = True, rgb: bool = True,
                         depth: bool = True):
        """(world time of the snapshot s, rgb, depth) from ``camera``: the stamp a driver uses.
        ``rgb=False``: depth only (rgb None), for a reader of the depth stream alone;
        ``depth=False``: colour only (depth None)."""

    def close(self) -> None:
        """Release the cell's renderers and other resources."""


class ServoCellBase:
    """The engine-free part of an emulated cell, shared by both engines: measured joint
    states, the JTC follower's interface, the controller state and the camera intrinsics.

    A subclass keeps, under ``self.lock``: ``_measured`` (positions, velocities, efforts as
    the sensors report them), ``_reference`` (the follower's p, v, a), ``_applied_q`` (the
    servo setpoint after the latency), ``follower`` (a ``TrajectoryFollower``), ``time``,
    ``joint_names`` and ``_spec``.
    """

    def joint_positions(self) -> np.ndarray:
        """Measured joint positions (rad)."""
        with self.lock:
            return self._measured[0].copy()

    def joint_velocities(self) -> np.ndarray:
        """Measured joint velocities (rad/s)."""
        with self.lock:
            return self._measured[1].copy()

    def joint_efforts(self) -> np.ndarray:
        """Measured joint efforts (N m)."""
        with self.lock:
            return self._measured[2].copy()

    def set_trajectory(self, cmd: JointTrajectoryCommand, now: float | None = None):
        """Accept a trajectory with JTC semantics (raises TrajectoryError if invalid)."""
        with self.lock:
            return self.follower.set_trajectory(cmd, self.time if now is None else now)

    def trajectory_done(self) -> bool:
        """True once the trajectory's last point is reached."""
        with self.lock:
            return self.follower.is_done(self.time)

    def controller_state(self) -> dict:
        """JTC-style state: reference (p, v, a), feedback (measured p, v), error = ref - fb."""
        with self.lock:
            p, v, a = (x.copy() for x in self._reference)
            fq, fv, _ = self._measured
            return {'time': self.time, 'joint_names': list(self.joint_names),
                    'reference_positions': p, 'reference_velocities': v,
                    'reference_accelerations': a,
                    'feedback_positions': fq.copy(), 'feedback_velocities': fv.copy(),
                    'error_positions': p - fq, 'error_velocities': v - fv}

    def actuator_setpoint(self) -> np.ndarray:
        """Position setpoint the servos see now (after the latency); for tests."""
        with self.lock:
            return self._applied_q.copy()

    # ---------------------------------------------------------------- gripper
    @property
    def has_gripper(self) -> bool:
        """True when the robot carries a parallel-jaw gripper (core/grasping/jaw.py)."""
        return getattr(self, '_jaw', None) is not None

    def _require_jaw(self):
        if not self.has_gripper:
            raise GripperError(f'the cell robot {self.robot_name()!r} has no parallel-jaw '
                               'gripper')
        return self._jaw

    def robot_name(self) -> str:
        """The robot model's name (its URDF's)."""
        return getattr(self.robot.description, 'name', 'robot')

    def command_gripper(self, position: float, max_effort: float | None = None,
                        speed: float | None = None) -> None:
        """Move the jaw towards ``position`` (m) with at most ``max_effort`` (N) at ``speed``
        (m/s); JawServo.command's checks (GripperError names a bad value)."""
        with self.lock:
            jaw = self._require_jaw()
            jaw.command(position, max_effort, speed)
            self._apply_jaw_effort()

    def hold_gripper(self) -> None:
        """Stop the jaw only (JawServo.hold: a loaded jaw keeps squeezing); the arm runs on."""
        with self.lock:
            self._require_jaw().hold()

    def gripper_state(self) -> tuple[float, float, float]:
        """Measured jaw (position m, velocity m/s, effort N), as /joint_states carries it."""
        with self.lock:
            self._require_jaw()
            return self._jaw_measured

    def gripper_joints(self):
        """The jaw's joints and limits (core/grasping/jaw.GripperJoints); ``joint`` is the
        driven one, its /joint_states name."""
        return self._require_jaw().joints

    def _apply_jaw_effort(self) -> None:
        """Engine hook: make the jaw's effort cap (``self._jaw.max_effort``) take effect."""

    def intrinsics(self, name: str) -> camera_model.Intrinsics:
        """Pinhole intrinsics of camera ``name`` from the spec."""
        c = self._spec.camera(name)
        return camera_model.Intrinsics(c.width, c.height, c.fx, c.fy, c.cx, c.cy)


# The largest |coordinate| (m) an object may be put at: far outside any cell, small enough that a
# typo (1e9) is refused instead of launching the object out of the simulation.
MAX_OBJECT_COORDINATE = 100.0


def object_resets(known_ids, ids, poses) -> list[tuple[str, object]]:
    """[(object id, (xyz, unit quat wxyz) or None = its spec pose)] for a reset_objects
    request, every entry checked before any object moves (all-or-nothing). ValueError or
    KeyError naming the offending field (``poses[k].position``, ``poses[k].orientation``)."""
    known = list(known_ids)
    ids = known if not ids else list(ids)
    poses = list(poses) if poses else []
    if poses and len(poses) != len(ids):
        raise ValueError(f'{len(poses)} poses for {len(ids)} objects')
    unknown = [oid for oid in ids if oid not in known]
    if unknown:
        raise KeyError(f'no object {unknown[0]!r}; objects: {sorted(known)}')
    dup = sorted({oid for oid in ids if ids.count(oid) > 1})
    if dup:
        raise ValueError(f'object_ids has duplicates: {dup}')
    out = []
    for k, oid in enumerate(ids):
        if not poses:
            out.append((oid, None))
            continue
        xyz, quat = (np.asarray(v, float).reshape(-1) for v in poses[k])
        where = f'poses[{k}] (object {oid!r})'
        if xyz.shape != (3,) or not np.all(np.isfinite(xyz)):
            raise ValueError(f'{where}.position {xyz.tolist()} is not 3 finite values (NaN or '
                             f'infinite)')
        if np.max(np.abs(xyz)) > MAX_OBJECT_COORDINATE:
            raise ValueError(f'{where}.position {xyz.tolist()} is more than '
                             f'{MAX_OBJECT_COORDINATE:g} m from the origin on an axis')
        if quat.shape != (4,) or not np.all(np.isfinite(quat)):
            raise ValueError(f'{where}.orientation {quat.tolist()} is not 4 finite values (NaN '
                             f'or infinite)')
        norm = float(np.linalg.norm(quat))
        if norm < 1e-6:
            raise ValueError(f'{where}.orientation {quat.tolist()} is a zero quaternion')
        out.append((oid, (xyz, quat / norm)))
    return out


def sensor_noise_streams(spec: CellSpec, noise_seed: int | None = None):
    """(joint-state noise generator, {camera name: depth noise generator}) for one run of
    ``spec``'s cell. Drawn from the spec's ``seed``; a run's own ``noise_seed`` joins it, so
    two runs of one cell see different sensor noise, as two runs on a real cell do (None: the
    spec's seed alone, as every run before stop 52). The cameras' calibration error is not
    here: it is a property of the cell, drawn from the spec's seed only."""
    if noise_seed is not None and (isinstance(noise_seed, bool) or int(noise_seed) != noise_seed
                                   or noise_seed < 0):
        raise ValueError(f'noise_seed: must be an integer >= 0 or None, got {noise_seed!r}')
    extra = [] if noise_seed is None else [int(noise_seed)]
    joints = np.random.default_rng(np.random.SeedSequence([spec.seed, 1, *extra]))
    depth = {c.name: np.random.default_rng(np.random.SeedSequence([spec.seed, 2, i, *extra]))
             for i, c in enumerate(spec.cameras)}
    return joints, depth


def make_world(spec: CellSpec, robot_urdf: str | None = None, **kwargs) -> CellWorld:
    """The emulated cell for ``spec`` on the engine the spec names (``spec.engine``).

    ``robot_urdf`` overrides the spec's robot; ``kwargs`` go to the world's constructor
    (``truth=``: a truth door; ``noise_seed=``: the run's sensor noise, see
    :func:`sensor_noise_streams`). Build errors raise
    ``core.emulated_world.WorldBuildError`` naming the part that failed, for either engine.
    """
    engine = getattr(spec, 'engine', 'mujoco')
    if engine == 'drake':
        from .drake_world import DrakeWorld
        return DrakeWorld(spec, robot_urdf, **kwargs)
    if engine == 'mujoco':
        from .emulated_world import EmulatedWorld
        return EmulatedWorld(spec, robot_urdf, **kwargs)
    from .emulated_world import WorldBuildError
    raise WorldBuildError(f'engine: must be one of {list(ENGINES)}, got {engine!r}')


__all__ = ['CellWorld', 'ENGINES', 'ServoCellBase', 'make_world', 'sensor_noise_streams']
