"""Where a task runs: a twin or an emulated cell behind one small interface, plus task scenes.

Both backends take joint trajectories with JTC semantics (the reference starts from the held
position) and report the object's pose twice: ``object_pose()`` is what the policy observes,
``scored_object_pose()`` what the episode is scored on. ``observe_start(xyz, yaw)`` places
the object for an episode and returns the start pose the policy plans from (another object
of the episode, a stack's base: ``observed_position`` / ``scored_position``). In a twin all
three are the twin's state. On a cell with an ``observer`` (evaluation/observation.py: the
depth tracker at its rate and latency) the policy gets the tracked poses and the tracked start;
only ``scored_object_pose`` reads the cell's TRUE pose, inside the world's truth door
(``truth.scoring()``). Without an observer the cell backend observes the truth
(``observation_source`` 'truth': benches and tests; every such read is recorded as a leak by
the world's truth door).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import mujoco
import numpy as np

from ..geometry import quat_yaw, yaw_quat
from ..joint_trajectory import JointTrajectoryCommand, TrajectoryFollower
from ..twin import Twin

OBJECT_PREFIX = 'object/'
OBJECT_GEOM_PRIORITY = 1   # like the emulated cell: the object's friction rules its contacts


@dataclass(frozen=True)
class TaskObject:
    """The manipulated object as the twin knows it (geometry reconstructed, physics a guess)."""
    id: str
    size: tuple[float, float, float]        # box extents, m (a cylinder: d, d, h)
    mass: float = 0.2                        # kg (prior: volume x density)
    friction: float = 0.5                    # sliding friction (prior)
    shape: str = 'box'                       # 'box' or an upright 'cylinder'

    @property
    def half_height(self) -> float:
        """Half the object's height in m."""
        return self.size[2] / 2


@dataclass(frozen=True)
class TaskTable:
    """The task's table: centre and size (m), top height (m) and friction."""
    center: tuple[float, float] = (0.6, 0.0)
    size: tuple[float, float] = (0.8, 1.0)
    height: float = 0.0
    friction: float = 0.75


class ObservationLost(RuntimeError):
    """No usable pose of the object (not seen, or none fresh enough): the episode fails."""


def _object_body_xml(obj: TaskObject, pos) -> str:
    """A free ``object/<id>`` body (box or upright cylinder) at ``pos``."""
    if obj.shape not in ('box', 'cylinder'):
        raise ValueError(f'object {obj.id!r}: a task scene holds a box or a cylinder, got '
                         f'{obj.shape!r}')
    hx, hy, hz = (s / 2 for s in obj.size)
    if obj.shape == 'cylinder':
        r = hx
        ixx = iyy = obj.mass * (3 * r * r + 4 * hz * hz) / 12
        izz = obj.mass * r * r / 2
        geom = f'type="cylinder" size="{r} {hz}"'
    else:
        ixx, iyy, izz = (obj.mass * (a * a + b * b) / 3
                         for a, b in ((hy, hz), (hx, hz), (hx, hy)))
        geom = f'type="box" size="{hx} {hy} {hz}"'
    name = OBJECT_PREFIX + obj.id
    return f"""    <body name="{name}" pos="{pos[0]} {pos[1]} {pos[2]}">
      <freejoint name="{name}"/>
      <inertial pos="0 0 0" mass="{obj.mass}" diaginertia="{ixx} {iyy} {izz}"/>
      <geom name="{name}" {geom} condim="4" mass="0"
            priority="{OBJECT_GEOM_PRIORITY}" friction="{obj.friction} 0.005 0.0001"/>
    </body>
"""


def task_scene_xml(obj: TaskObject, table: TaskTable = TaskTable(),
                   others: tuple[TaskObject, ...] = ()) -> str:
    """MJCF scene (scene_mjcf format: table + ``object/<id>`` free bodies) for one box or
    upright cylinder at the table's centre, and ``others`` (a stack's base, ...) resting
    0.3 m to its left, 0.15 m apart (an episode places them)."""
    tx, ty = table.center
    bodies = _object_body_xml(obj, (tx, ty, table.height + obj.half_height))
    for k, o in enumerate(others):
        bodies += _object_body_xml(o, (tx, ty + 0.3 + 0.15 * k, table.height + o.half_height))
    # Elliptic friction cones: MuJoCo's default pyramidal cone makes sliding anisotropic (a box
    # sent off at 0.3 rad to the table's x axis slides away at 0.5 rad).
    return f"""<mujoco model="task_scene">
  <option cone="elliptic"/>
  <default><geom solref="0.008 1" solimp="0.95 0.99 0.001 0.5 2"/></default>
  <worldbody>
    <geom name="table" type="box" size="{table.size[0] / 2} {table.size[1] / 2} 0.02"
          pos="{tx} {ty} {table.height - 0.02}" friction="{table.friction} 0.005 0.0001"/>
{bodies}  </worldbody>
</mujoco>"""


def task_scene_from_cell_geometry(spec, object_id: str, mass: float = 0.2,
                                  friction: float = 0.5) -> tuple[TaskObject, TaskTable]:
    """Object and table GEOMETRY from a cell spec (what reconstruction measures) with the
    given physical guesses; the cell's hidden mass and friction are not read."""
    o = spec.object(object_id)
    if o.shape != 'box':
        raise ValueError(f'object {object_id!r}: the tasks handle boxes, got {o.shape!r}')
    t = spec.table
    return (TaskObject(object_id, tuple(o.size), mass, friction),
            TaskTable(tuple(t.center), tuple(t.size[:2]), t.height, 0.75))


def set_twin_parameters(twin: Twin, params: dict) -> None:
    """Twin.set_parameters (kept as the tasks' one entry point for parameter changes)."""
    twin.set_parameters(params)


@contextlib.contextmanager
def applied_parameters(twin: Twin, params: dict | None):
    """Twin parameters set (with set_twin_parameters) for a block, then restored."""
    if not params:
        yield twin
        return
    saved = twin.get_parameters(list(params))
    set_twin_parameters(twin, params)
    try:
        yield twin
    finally:
        set_twin_parameters(twin, saved)


def observed_start(world, object_xyz, object_yaw: float, arrange=None):
    """``world.observe_start`` where the backend has one (else the placement itself).
    ``arrange(world)`` puts the episode's other objects in place before the start is seen
    (a stack's base, which is then seen too)."""
    fn = getattr(world, 'observe_start', None)
    if fn is None:
        return np.asarray(object_xyz, float), float(object_yaw)
    return fn(object_xyz, object_yaw) if arrange is None else fn(object_xyz, object_yaw,
                                                                 arrange=arrange)


def observed_position(world, object_id: str, placed_xyz):
    """Where the policy sees another object of the episode (a stack's base) at its start:
    ``world.observed_position`` where the backend has one (a cell: tracked, None when the
    tracker does not see it), else the placement itself."""
    fn = getattr(world, 'observed_position', None)
    return np.asarray(placed_xyz, float) if fn is None else fn(object_id)


def scored_position(world, object_id: str, placed_xyz) -> np.ndarray:
    """The TRUE position (m) of another object of the episode, for the score only:
    ``world.scored_position`` where the backend has one, else the placement itself."""
    fn = getattr(world, 'scored_position', None)
    return np.asarray(placed_xyz, float) if fn is None else fn(object_id)


def scored_pose(world):
    """``world.scored_object_pose()`` where the backend has one (else ``object_pose()``)."""
    fn = getattr(world, 'scored_object_pose', None)
    return fn() if fn is not None else world.object_pose()


class TwinWorld:
    """A Twin as a task backend (stepped in Python, one step per physics step)."""

    kind = 'twin'

    def __init__(self, twin: Twin, object_id: str):
        self.twin = twin
        self.object_id = object_id
        self._qa, self._da = self._free_joint(object_id)
        self.joint_names = list(twin.joint_names)
        self._follower = None
        self._jaw = None        # the gripper's jaw, once a grasping task prepares it

    def prepare_grasping(self) -> None:
        """Drive the robot's jaw (core/grasping/jaw.MujocoJaw) with the twin's grasp contact
        recipe (twin_grasp_contacts), once: a grasping task's twin holds what it grasps; a
        pushing task's twin stays as built. GripperError for a robot without a gripper."""
        if self._jaw is not None:
            return
        from ..grasping.jaw import MujocoJaw, twin_grasp_contacts
        robot = self.twin.robot
        jaw = MujocoJaw(self.twin.model, robot)
        twin_grasp_contacts(self.twin.model, robot,
                            friction=self.twin.get_parameter('global/finger_friction'))
        jaw.reset(jaw.state(self.twin.data)[0])
        self._jaw = jaw

    def command_gripper(self, position: float, max_effort: float | None = None) -> None:
        """Jaw towards ``position`` (m) with at most ``max_effort`` (N)."""
        self.prepare_grasping()
        self._jaw.command(position, max_effort)

    def gripper_state(self) -> tuple[float, float, float]:
        """The jaw's (position m, velocity m/s, effort N)."""
        return self._jaw.state(self.twin.data)

    @property
    def time(self) -> float:
        """Twin time in s."""
        return float(self.twin.data.time)

    def reset(self, q0, object_xyz, object_yaw: float, via=None) -> None:
        """Arm at ``q0`` (``via``, the approach pose, only matters to a physical arm)."""
        tw = self.twin
        tw.reset(np.asarray(q0, float))
        tw.data.qpos[self._qa:self._qa + 3] = object_xyz
        tw.data.qpos[self._qa + 3:self._qa + 7] = yaw_quat(object_yaw)
        tw.data.qvel[self._da:self._da + 6] = 0.0
        if self._jaw is not None:
            self._jaw.reset(self._jaw.joints.start, tw.data)
        mujoco.mj_forward(tw.model, tw.data)
        self._follower = TrajectoryFollower(self.joint_names, np.asarray(q0, float))

    def _free_joint(self, object_id: str) -> tuple[int, int]:
        """(qpos, dof) addresses of a free object's joint in the twin (ValueError: none)."""
        m = self.twin.model
        j = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, OBJECT_PREFIX + object_id)
        if j < 0:
            raise ValueError(f'no free object {object_id!r} in the twin; have '
                             f'{self.twin.object_ids}')
        return int(m.jnt_qposadr[j]), int(m.jnt_dofadr[j])

    def place_object(self, object_id: str, xyz, yaw: float) -> None:
        """Put another object of the scene (a stack's base) at rest at ``xyz``, ``yaw``."""
        m, d = self.twin.model, self.twin.data
        qa, da = self._free_joint(object_id)
        d.qpos[qa:qa + 3] = xyz
        d.qpos[qa + 3:qa + 7] = yaw_quat(yaw)
        d.qvel[da:da + 6] = 0.0
        mujoco.mj_forward(m, d)

    def execute(self, times, positions, velocities=None, duration: float | None = None) -> None:
        """Follow a joint trajectory starting now, then advance ``duration`` s in total."""
        cmd = JointTrajectoryCommand(self.joint_names, np.asarray(times, float),
                                     np.asarray(positions, float),
                                     None if velocities is None else np.asarray(velocities))
        traj = self._follower.set_trajectory(cmd, self.time)
        end = self.time + (traj.end_time - self.time if duration is None else duration)
        dt = self.twin.timestep
        while self.time < end - 0.5 * dt:
            p, v, _ = self._follower.sample(self.time)
            if self._jaw is not None:
                self._jaw.step(self.twin.data, dt)
            self.twin.step(p, v)

    def kick_object(self, dv_xy) -> None:
        """A disturbance: add a planar velocity (m/s) to the object."""
        self.twin.data.qvel[self._da:self._da + 2] += np.asarray(dv_xy, float)

    observation_source = 'twin'

    def observe_start(self, object_xyz, object_yaw: float, arrange=None):
        """The start the policy plans from: in a twin, exactly where the episode puts it (the
        other objects, ``arrange``, are placed after :meth:`reset`, which resets the twin)."""
        return np.asarray(object_xyz, float), float(object_yaw)

    def object_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """(position (3,) m, quaternion wxyz (4,)) of the task object."""
        q = self.twin.data.qpos
        return q[self._qa:self._qa + 3].copy(), q[self._qa + 3:self._qa + 7].copy()

    scored_object_pose = object_pose

    def scored_position(self, object_id: str) -> np.ndarray:
        """Position (m) of another free object of the scene (a stack's base)."""
        qa, _ = self._free_joint(object_id)
        return self.twin.data.qpos[qa:qa + 3].copy()

    def joint_positions(self) -> np.ndarray:
        """The arm's joint positions (rad)."""
        return self.twin.joint_positions()

    def joint_efforts(self) -> np.ndarray:
        """The arm's actuator efforts (N m)."""
        return self.twin.joint_efforts()


class CellWorld:
    """An EmulatedWorld (the stand-in for the physical cell) as a task backend.

    ``observer``: what the policy sees (evaluation/observation.TrackedObservation); ``stream``:
    track during motion too (closed-loop tasks; a one-shot task needs only the start).

    ``frame_yaw``: the episodes' object frame (the twin's: reconstruction may turn a box's
    axes by a multiple of 90 degrees) to the cell object's own frame, about its z axis. The
    evaluator places the object at the episode's yaw + ``frame_yaw`` and reads poses back
    in the episode's frame, so that an episode means the same physical placement in the
    cell and in the twin. 0: the frames agree.

    ``others``: the episode's other objects (a stack's base), the task's id (the twin's, as
    the tracker reports it) -> the cell's id. The evaluator places them by the task's id;
    the policy sees them through the observer (a base's yaw is not mapped: only its
    position is observed and scored)."""

    kind = 'cell'

    def __init__(self, world, object_id: str, observer=None, stream: bool = True,
                 frame_yaw: float = 0.0, others: dict | None = None):
        self.others = dict(others or {})
        for oid in [object_id, *self.others.values()]:
            if oid not in world.object_ids:
                raise ValueError(f'no object {oid!r} in the cell; have {world.object_ids}')
        self.world = world
        self.object_id = object_id
        self.joint_names = list(world.joint_names)
        self.observer = observer
        self.stream = bool(stream)
        self.frame_yaw = float(frame_yaw)
        self.observation_source = observer.source if observer is not None else 'truth'

    def _episode_frame(self, xyz, quat) -> tuple[np.ndarray, np.ndarray]:
        """A true pose of the cell object, expressed with the episodes' object frame."""
        if self.frame_yaw == 0.0:
            return xyz, quat
        out = np.empty(4)
        mujoco.mju_mulQuat(out, np.asarray(quat, float), yaw_quat(-self.frame_yaw))
        return xyz, out

    @property
    def time(self) -> float:
        """Cell time in s."""
        return self.world.time

    def _place(self, object_xyz, object_yaw: float) -> None:
        self.world.reset_objects([self.object_id], [(np.asarray(object_xyz, float),
                                                     yaw_quat(object_yaw + self.frame_yaw))])

    def observe_start(self, object_xyz, object_yaw: float, arrange=None):
        """The evaluator places the object (the arm at its initial pose) and, with
        ``arrange(self)``, the episode's other objects; the start pose the policy plans
        from: tracked (None when the tracker does not see it), or without an observer the
        true pose (a truth read)."""
        w = self.world
        w.reset()
        self._place(object_xyz, object_yaw)
        if arrange is not None:
            arrange(self)
        if self.observer is None:
            xyz, quat = self._episode_frame(*w.object_poses()[self.object_id])
            return xyz, quat_yaw(quat)
        return self.observer.begin(w)

    def reset(self, q0, object_xyz, object_yaw: float, via=None,
              move_time: float = 1.5) -> None:
        """Robot back to its initial pose, then moved to q0 through the approach pose ``via``
        (above q0: a straight joint move may sweep the tool through the object), object placed.
        """
        w = self.world
        w.reset()
        self._place(object_xyz, object_yaw)
        q0 = np.asarray(q0, float)
        if via is None:
            times, points = np.array([move_time]), q0[None]
        else:
            times = np.array([move_time, move_time + 0.6])
            points = np.vstack([np.asarray(via, float), q0])
        w.set_trajectory(JointTrajectoryCommand(self.joint_names, times, points))
        w.step_for(float(times[-1]) + 0.3)
        # The arm moved in the air; make sure the object is exactly where the episode says.
        self._place(object_xyz, object_yaw)
        if self.observer is not None:
            self.observer.restart_clock()

    def execute(self, times, positions, velocities=None, duration: float | None = None) -> None:
        """Send the joint trajectory (times s, positions rad) to the cell and step it for its
        duration (or ``duration`` s), through the observer when there is one."""
        cmd = JointTrajectoryCommand(self.joint_names, np.asarray(times, float),
                                     np.asarray(positions, float),
                                     None if velocities is None else np.asarray(velocities))
        self.world.set_trajectory(cmd)
        d = float(times[-1]) if duration is None else duration
        if self.observer is None:
            self.world.step_for(d)
        else:
            self.observer.step(self.world, d, stream=self.stream)

    def _cell_id(self, object_id: str) -> str:
        """The cell's id of another object of the episode, given by the task's id."""
        return self.others.get(object_id, object_id)

    def place_object(self, object_id: str, xyz, yaw: float) -> None:
        """The evaluator puts another object (a stack's base; the task's id) at ``xyz``,
        ``yaw``."""
        self.world.reset_objects([self._cell_id(object_id)],
                                 [(np.asarray(xyz, float), yaw_quat(yaw))])

    def observed_position(self, object_id: str):
        """Where the policy sees another object (the task's id) at the episode's start: its
        tracked position from the start's frames (None when the tracker does not see it), or
        without an observer the true one (a truth read)."""
        if self.observer is not None:
            return self.observer.position_of(object_id, self.world)
        return np.asarray(self.world.object_poses()[self._cell_id(object_id)][0])

    def scored_position(self, object_id: str) -> np.ndarray:
        """The TRUE position (m) of another object (the task's id), for the score only."""
        with self.world.truth.scoring():
            return np.asarray(self.world.object_poses()[self._cell_id(object_id)][0], float)

    def command_gripper(self, position: float, max_effort: float | None = None) -> None:
        """The cell's jaw towards ``position`` (m) with at most ``max_effort`` (N)."""
        self.world.command_gripper(position, max_effort)

    def gripper_state(self) -> tuple[float, float, float]:
        """The cell's measured jaw (position m, velocity m/s, effort N)."""
        return self.world.gripper_state()

    def kick_object(self, dv_xy) -> None:
        """A disturbance (someone nudges the object): the emulated cell's evaluator-side hook."""
        self.world.push_object(self.object_id, dv_xy)

    def object_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """What the policy observes: the tracked pose (ObservationLost when there is none), or
        without an observer the true pose (a recorded truth read)."""
        if self.observer is not None:
            return self.observer.pose(self.world)
        return self._episode_frame(*self.world.object_poses()[self.object_id])

    def scored_object_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """The TRUE pose (in the episodes' frame), for the score only (read inside the world's
        truth door)."""
        with self.world.truth.scoring():
            return self._episode_frame(*self.world.object_poses()[self.object_id])

    def joint_positions(self) -> np.ndarray:
        """The arm's measured joint positions (rad)."""
        return self.world.joint_positions()

    def joint_efforts(self) -> np.ndarray:
        """The arm's measured joint efforts (N m, /joint_states)."""
        return self.world.joint_efforts()
