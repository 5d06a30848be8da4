"""Running a trained policy on a robot (ROS-free): checkpoint + task -> safe joint trajectories.

The robot_executor's ``~/execute_policy`` action is this module plus ROS plumbing (topics,
the controller backend, supervision). Here:

* :func:`load_policy` loads a checkpoint (core/policies: ``policy.pt`` + ``policy.json``) and
  builds its task (core/tasks) from the task config stored with it. A missing, corrupt or
  inconsistent checkpoint, or one for another task than asked, is an :class:`ExecutionError`
  of kind INVALID_CHECKPOINT whose message names the file. A *scripted* checkpoint
  (:func:`write_scripted_checkpoint`: ``policy.json`` alone, format SCRIPTED_FORMAT) runs the
  task's scripted demonstrator instead of a network (its per-episode randomness from the
  checkpoint's seed) and, asked with an empty goal, draws the goal from the task's own goal
  distribution around the observed object: recording such episodes gives demonstrations
  recorded on the cell (``r2s2r record-demos``; core/policies/demo_bags.py reads them).
* :func:`make_episode` turns (loaded policy, goal) into an episode:

  - **slide_to_target** (one-shot): ONE observation (object pose + goal) -> ONE action -> the
    task's own ``plan()``. Three motions, all planned and validated before anything moves:
    the approach to the plan's ``q_start`` (lift the tool if it is lower than the plan's
    approach pose ``q_above``, move to that pose, descend straight down onto ``q_start``,
    tool pointing down), the strike (the plan's trajectory, after a short hold at
    ``q_start``; the plan's settle time follows it) and the retreat (the tool straight up to
    ``approach_height`` above the table, out of the object's way); then the outcome is
    observed.
  - **push_to_pose** (closed loop): the approach to the task's start pose (the tool behind
    the box), then one step per control period (the task's ``1 / control_rate``):
    observation -> action -> the next short segment, a one-point trajectory reached after
    one period (JTC semantics: each segment replaces the rest of the previous one from its
    start time). The task decides success; its ``max_steps`` ends an unsuccessful episode.
  - **pick_and_place** / **stack** (one-shot, a robot with a parallel-jaw gripper): ONE
    observation -> ONE action -> the task's ``plan()``, run as the approach to the plan's
    ``q_above`` and three motions each preceded by a jaw command (``Motion.grip``: open,
    close with the task's ``grasp_effort`` or the action's effort, open) that the executor
    sends through its gripper backend and waits for (:class:`PickEpisode`).

* :class:`SafetyGate` runs every trajectory through core/execution_safety (joint position
  and velocity limits, tool tip inside the workspace box, timing) against the position the
  arm is in; a violation is an ExecutionError of kind LIMIT_VIOLATION or WORKSPACE_VIOLATION
  and the trajectory is not sent. A target the tool-down IK cannot reach (out of reach, past
  a joint limit) is a WORKSPACE_VIOLATION too: the tool cannot go there.

Every action decided is kept in :attr:`PolicyEpisode.records` (observation, action, goal, the
object pose behind it, the tool's start): the executor records them as
real2sim2real_msgs/PolicyStep on ``policy_steps``, what makes an episode's bag a demo.

Observations: joint positions (the executor's /joint_states) and object poses
(:class:`ObjectPose`, from the camera tracker's ``tracked_objects``). The goal is the
action's ``task_goal``: ``[x, y]`` (slide_to_target, pick_and_place and stack, whose goal is
the target square's centre, the base box's for stack; a third value is ignored) or
``[x, y]`` / ``[x, y, yaw]`` (push_to_pose; without yaw the box keeps its observed yaw), world
frame (the robot base), m and rad. An empty goal is the task's default, relative to the first
observed pose: slide_to_target and pick_and_place the middle of its distance and heading
ranges, push_to_pose the middle of its forward range along +x, stack the base box's tracked
centre. Goals outside the workspace (and, for
push_to_pose, outside the task's own table area) are refused before anything moves.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import execution_safety as es
from .geometry import quat_yaw, wrap_angle
from .tasks import TaskError, get_task
from .tasks.base import ResetSample, check_action
from .tasks.kinematics import IKError

# Error kinds; the node maps them onto ExecutePolicy.Result codes of the same names
# (INVALID_GOAL onto INVALID_CHECKPOINT: the request does not fit the checkpoint's task).
INVALID_CHECKPOINT = 'INVALID_CHECKPOINT'
INVALID_GOAL = 'INVALID_GOAL'
LIMIT_VIOLATION = 'LIMIT_VIOLATION'
WORKSPACE_VIOLATION = 'WORKSPACE_VIOLATION'
OBSERVATION_UNAVAILABLE = 'OBSERVATION_UNAVAILABLE'

_VIOLATION_KINDS = {
    es.JOINT_LIMIT_VIOLATION: LIMIT_VIOLATION,
    es.VELOCITY_LIMIT_VIOLATION: LIMIT_VIOLATION,
    es.INVALID_TRAJECTORY: LIMIT_VIOLATION,
    es.WORKSPACE_VIOLATION: WORKSPACE_VIOLATION,
}
_MIN_JERK_PEAK = 1.875   # peak / mean speed of a minimum-jerk move


class ExecutionError(Exception):
    """A policy execution cannot go on; ``kind`` is one of the error kinds above."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


# ------------------------------------------------------------------------------ observations

@dataclass(frozen=True)
class ObjectPose:
    """An object's pose in the world (robot base) frame, as the tracker reports it."""
    position: np.ndarray          # x, y, z (m)
    quat: np.ndarray              # w, x, y, z
    stamp: float = 0.0            # s, when it was measured

    @classmethod
    def from_xyz_quat(cls, xyz, quat_wxyz, stamp: float = 0.0) -> ObjectPose:
        """ObjectPose from a position (m) and a wxyz quaternion; ExecutionError when either is not
        finite or the quaternion is zero."""
        p = np.asarray(xyz, float).reshape(3)
        q = np.asarray(quat_wxyz, float).reshape(4)
        n = float(np.linalg.norm(q))
        if not (np.all(np.isfinite(p)) and np.isfinite(n) and n > 1e-9):
            raise ExecutionError(OBSERVATION_UNAVAILABLE,
                                 f'object pose is not usable: position {p.tolist()}, '
                                 f'quaternion {q.tolist()}')
        return cls(p, q / n, float(stamp))

    @property
    def xy(self) -> np.ndarray:
        """The object's x, y in m (world)."""
        return self.position[:2].copy()

    @property
    def z(self) -> float:
        """The object's centre height in m (world)."""
        return float(self.position[2])

    @property
    def yaw(self) -> float:
        """The object's yaw in rad."""
        return quat_yaw(self.quat)

    @property
    def up_z(self) -> float:
        """World z component of the object's own z axis (1 = upright)."""
        _, x, y, _ = self.quat
        return float(1 - 2 * (x * x + y * y))


# ------------------------------------------------------------------------------ checkpoint

@dataclass
class LoadedPolicy:
    """A checkpoint ready to run: its path, task, deterministic policy (observation -> action) and
    config."""
    path: Path
    task: object                                   # a core.tasks Task
    policy: Callable[[np.ndarray], np.ndarray]     # observation -> action (deterministic)
    config: dict                                   # policy.json
    # Scripted checkpoints: an empty goal is drawn from the task's goal distribution.
    goal_rng: np.random.Generator | None = None

    @property
    def task_name(self) -> str:
        """Name of the checkpoint's task."""
        return self.task.name

    @property
    def scripted(self) -> bool:
        """True for a scripted-demonstrator checkpoint (no network)."""
        return self.config.get('format') == SCRIPTED_FORMAT


SCRIPTED_FORMAT = 'real2sim2real_ros/scripted_policy/1'


def write_scripted_checkpoint(directory, task_name: str, task_config: dict | None = None,
                              seed: int = 0, draw_goal: bool = True) -> Path:
    """A checkpoint folder whose policy is the task's scripted demonstrator (``policy.json``
    only, written atomically). ``seed`` fixes the demonstrator's per-episode randomness (a
    slide's speed scale, a push's gain) and the drawn goal; ``draw_goal``: an empty goal is
    drawn from the task's goal distribution around the observed object."""
    import json

    from .artifacts import atomic_write_text
    from .policies.policy import CONFIG_FILE
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = {'format': SCRIPTED_FORMAT,
              'task': {**(task_config or {}), 'task': str(task_name)},
              'seed': int(seed), 'draw_goal': bool(draw_goal),
              'metadata': {'trained_by': 'scripted demonstrator (no training)'}}
    atomic_write_text(directory / CONFIG_FILE, json.dumps(config, indent=2))
    return directory


def _read_scripted(path: Path) -> dict | None:
    """policy.json of a scripted checkpoint, or None for anything else."""
    import json

    from .policies.policy import CONFIG_FILE
    try:
        config = json.loads((path / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) and config.get('format') == SCRIPTED_FORMAT \
        else None


def load_policy(path, robot, expected_task: str = '') -> LoadedPolicy:
    """The checkpoint at ``path`` with its task built for ``robot``. ``expected_task``: the
    task the caller asks for ('' = whatever the checkpoint is for)."""
    from .policies.policy import CONFIG_FILE, CheckpointError, load_checkpoint  # torch
    text = str(path).strip()
    if not text:
        raise ExecutionError(INVALID_CHECKPOINT, 'no checkpoint_path given')
    path = Path(text).expanduser()
    if not path.is_dir():
        raise ExecutionError(INVALID_CHECKPOINT,
                             f'checkpoint {path}: not a directory (want one holding policy.pt '
                             f'and {CONFIG_FILE})')
    scripted = _read_scripted(path)
    if scripted is not None:
        return _load_scripted(path, scripted, robot, expected_task)
    try:
        policy, config = load_checkpoint(path)
    except CheckpointError as exc:
        raise ExecutionError(INVALID_CHECKPOINT, str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - a corrupt policy.pt (pickle, zip, torch errors)
        raise ExecutionError(INVALID_CHECKPOINT, f'checkpoint {path}: cannot load: '
                             f'{type(exc).__name__}: {exc}') from None
    task = _task_from_config(path, config.get('task'), robot, expected_task)
    name = task.name
    if policy.obs_dim != task.observation_dim or policy.action_dim != task.action_dim:
        raise ExecutionError(
            INVALID_CHECKPOINT,
            f'checkpoint {path}: the policy maps {policy.obs_dim} observations to '
            f'{policy.action_dim} actions, task {name!r} has {task.observation_dim} and '
            f'{task.action_dim}')
    return LoadedPolicy(path, task, policy.as_function(), config)


def _task_from_config(path: Path, task_cfg, robot, expected_task: str):
    from .policies.policy import CONFIG_FILE
    cfg_file = path / CONFIG_FILE
    if not isinstance(task_cfg, dict) or not task_cfg.get('task'):
        raise ExecutionError(INVALID_CHECKPOINT,
                             f'{cfg_file}: names no task (want "task": {{"task": <name>, '
                             f'...task config}})')
    task_cfg = dict(task_cfg)
    name = str(task_cfg.pop('task'))
    if expected_task and expected_task != name:
        raise ExecutionError(INVALID_CHECKPOINT,
                             f'task mismatch: checkpoint {path} is a {name!r} policy, the goal '
                             f'asks for task {expected_task!r}')
    try:
        return get_task(name, robot, task_cfg)
    except (TaskError, TypeError, ValueError) as exc:
        raise ExecutionError(INVALID_CHECKPOINT, f'{cfg_file}: task config: {exc}') from None


def _load_scripted(path: Path, config: dict, robot, expected_task: str) -> LoadedPolicy:
    task = _task_from_config(path, config.get('task'), robot, expected_task)
    if not hasattr(task, 'scripted_demo_policy'):
        raise ExecutionError(INVALID_CHECKPOINT, f'checkpoint {path}: task {task.name!r} has '
                             f'no scripted demonstrator')
    try:
        seed = int(config.get('seed', 0))
    except (TypeError, ValueError):
        raise ExecutionError(INVALID_CHECKPOINT, f'{path}: seed {config.get("seed")!r} is '
                             f'not an integer') from None
    rng = np.random.default_rng(seed)
    # The demonstrators use the reset only through their rng (speed scale / gain).
    policy = task.scripted_demo_policy(None, rng)
    goal_rng = np.random.default_rng([seed, 1]) if config.get('draw_goal', True) else None
    return LoadedPolicy(path, task, policy, config, goal_rng)


# ------------------------------------------------------------------------------ safety

@dataclass
class SafetyGate:
    """Every trajectory a policy produces passes here before it is sent: the reference the
    controller will follow for it (the spline JTC and the emulated cell interpolate, from the
    measured position) is checked by :func:`es.validate_trajectory`. ``fk_lipschitz`` (see
    :func:`es.fk_lipschitz_bound`) certifies the tip between FK samples to within
    ``workspace_tolerance`` m of the box; without it only the samples are checked."""
    limits: es.JointLimits
    fk: Callable[[np.ndarray], tuple]
    workspace: es.Workspace
    velocity_scale: float = 1.0
    start_tolerance: float = 0.05
    workspace_step: float = 0.05
    fk_lipschitz: np.ndarray | None = None
    workspace_tolerance: float = 0.001

    def validate(self, traj: es.Trajectory, current_position, what: str = 'trajectory'
                 ) -> es.ValidatedTrajectory:
        """The executor's checks on ``traj`` from ``current_position``; ExecutionError naming
        ``what`` when it fails."""
        try:
            return es.validate_trajectory(
                traj, self.limits, current_position, velocity_scale=self.velocity_scale,
                fk=self.fk, workspace=self.workspace, start_tolerance=self.start_tolerance,
                workspace_step=self.workspace_step, fk_lipschitz=self.fk_lipschitz,
                workspace_tolerance=self.workspace_tolerance)
        except es.TrajectoryViolation as v:
            raise ExecutionError(_VIOLATION_KINDS.get(v.kind, LIMIT_VIOLATION),
                                 f'{what}: {v.message}') from None

    def check_goal_xy(self, xy, what: str = 'goal') -> None:
        """ExecutionError (WORKSPACE_VIOLATION) when goal ``xy`` (m) lies outside the workspace."""
        lo, hi = self.workspace.minimum, self.workspace.maximum
        x, y = (float(v) for v in xy)
        if not (lo[0] <= x <= hi[0] and lo[1] <= y <= hi[1]):
            raise ExecutionError(
                WORKSPACE_VIOLATION,
                f'{what} ({x:.3f}, {y:.3f}) m is outside the workspace x [{lo[0]:.3f}, '
                f'{hi[0]:.3f}], y [{lo[1]:.3f}, {hi[1]:.3f}]')


# ------------------------------------------------------------------------------ motions

@dataclass
class ExecutionSettings:
    """How policy actions become motion: approach height (m), speed fractions and tip speed (m/s),
    timings."""
    approach_height: float = 0.10            # m above the task's table for moves between poses
    approach_velocity_fraction: float = 0.3  # of the (scaled) joint velocity limits
    approach_tip_speed: float = 0.15         # m/s, straight-line tool moves (lift, descent)
    min_move_time: float = 0.5               # s per approach leg
    point_spacing: float = 0.05              # s between approach points
    strike_lead_in: float = 0.1              # s the strike holds q_start before moving

    def __post_init__(self):
        for name in ('approach_velocity_fraction', 'approach_tip_speed', 'min_move_time',
                     'point_spacing'):
            if not getattr(self, name) > 0:
                raise ValueError(f'{name} must be > 0, got {getattr(self, name)}')
        if not (self.approach_height >= 0 and self.strike_lead_in >= 0):
            raise ValueError('approach_height and strike_lead_in must be >= 0')


@dataclass
class Motion:
    """One trajectory to send: robot joint order, times from its start (all > 0)."""
    label: str
    trajectory: es.Trajectory
    settle: float = 0.0            # s to wait after its end before the next observation
    wait_at_goal: bool = True      # the arm must reach the last point (goal tolerance)
    validated: es.ValidatedTrajectory | None = None
    # A jaw command (position m, max effort N) the executor sends through its gripper
    # backend, and waits for, before the trajectory (grasping tasks); None: none.
    grip: tuple[float, float] | None = None

    @property
    def duration(self) -> float:
        """Duration of the motion's trajectory in s."""
        return self.trajectory.duration


def _min_jerk(tau):
    tau = np.clip(tau, 0.0, 1.0)
    return 10 * tau ** 3 - 15 * tau ** 4 + 6 * tau ** 5, 30 * tau ** 2 - 60 * tau ** 3 + \
        30 * tau ** 4


def _sample_times(duration: float, spacing: float) -> np.ndarray:
    n = max(2, int(math.ceil(duration / spacing)))
    return np.linspace(duration / n, duration, n)


def _joint_leg(q0, q1, vmax, settings: ExecutionSettings):
    dq = np.asarray(q1, float) - np.asarray(q0, float)
    dur = max(settings.min_move_time, float(np.max(
        _MIN_JERK_PEAK * np.abs(dq) / (settings.approach_velocity_fraction * vmax))))
    t = _sample_times(dur, settings.point_spacing)
    s, ds = _min_jerk(t / dur)
    return t, q0 + np.outer(s, dq), np.outer(ds / dur, dq)


def _line_leg(ik, p0, p1, q_seed, vmax, settings: ExecutionSettings, q_end=None):
    """A straight tool-down line p0 -> p1 on a minimum-jerk time law, IK at every point.

    The leg starts exactly at ``q_seed`` (and ends exactly at ``q_end`` when given): where the
    tool-down IK solution at an end differs from that configuration (a tool left tilted, an
    IK tolerance), the difference is blended out along the leg on the same time law instead
    of being left as a jump into the first (or out of the last) segment, which the spline the
    controller follows would turn into a velocity spike."""
    p0, p1 = np.asarray(p0, float), np.asarray(p1, float)
    q_seed = np.asarray(q_seed, float)
    dist = float(np.linalg.norm(p1 - p0))
    start_offset = q_seed - ik.solve(p0, q_seed)
    # Joint travel along the line, from an evenly spaced IK pass, sets the duration too.
    probe = ik.solve_path(p0 + np.outer(np.linspace(0, 1, 6)[1:], p1 - p0), q_seed)
    probe = probe + np.outer(1.0 - np.linspace(0, 1, 6)[1:], start_offset)
    travel = np.abs(np.diff(np.vstack([q_seed, probe]), axis=0)).sum(axis=0)
    if q_end is not None:
        travel = travel + np.abs(np.asarray(q_end, float) - probe[-1])
    dur = max(settings.min_move_time, _MIN_JERK_PEAK * dist / settings.approach_tip_speed,
              float(np.max(_MIN_JERK_PEAK * travel
                           / (settings.approach_velocity_fraction * vmax))))
    t = _sample_times(dur, settings.point_spacing)
    s, _ = _min_jerk(t / dur)
    q = ik.solve_path(p0 + np.outer(s, p1 - p0), q_seed) + np.outer(1.0 - s, start_offset)
    if q_end is not None:
        q = q + np.outer(s, np.asarray(q_end, float) - q[-1])
    v = np.gradient(np.vstack([q_seed, q]), np.concatenate([[0.0], t]), axis=0)[1:]
    v[-1] = 0.0
    return t, q, v


def plan_approach(ik, q_current, q_target, limits: es.JointLimits,
                  settings: ExecutionSettings, table_height: float = 0.0,
                  velocity_scale: float = 1.0, via=None) -> es.Trajectory:
    """From ``q_current`` to ``q_target`` (tool down, low over the table) without sweeping
    through the table or the objects: lift straight up to the approach height if the tool is
    lower, move above the target at that height, descend straight down. The approach pose
    above the target is ``via`` when the task's plan gives one (slide_to_target's
    ``q_above``), else ``approach_height`` above the table. Each leg starts and ends at rest
    (minimum-jerk), at most ``approach_velocity_fraction`` of the velocity limits and
    ``approach_tip_speed`` on the straight legs."""
    vmax = limits.velocity * velocity_scale
    q_current = np.asarray(q_current, float)
    q_target = np.asarray(q_target, float)
    tip_now = ik.tip_position(q_current)
    tip_target = ik.tip_position(q_target)
    if via is not None:
        q_hover = np.asarray(via, float)
        hover = float(ik.tip_position(q_hover)[2])
    else:
        hover = max(table_height + settings.approach_height, float(tip_target[2]))
        q_hover = None
    legs, q = [], q_current
    if tip_now[2] < hover - 0.005:
        legs.append(_line_leg(ik, tip_now, [tip_now[0], tip_now[1], hover], q, vmax, settings))
        q = legs[-1][1][-1]
    if q_hover is None:
        q_hover = ik.solve([tip_target[0], tip_target[1], hover], q_target)
    legs.append(_joint_leg(q, q_hover, vmax, settings))
    if hover - tip_target[2] > 1e-4:
        legs.append(_line_leg(ik, [tip_target[0], tip_target[1], hover], tip_target, q_hover,
                              vmax, settings, q_end=q_target))  # ends where the plan starts
    times, pos, vel, t0 = [], [], [], 0.0
    for t, qs, vs in legs:
        times.append(t + t0)
        pos.append(qs)
        vel.append(vs)
        t0 += float(t[-1])
    return es.Trajectory(tuple(limits.names), np.concatenate(times), np.vstack(pos),
                         np.vstack(vel))


# ------------------------------------------------------------------------------ episodes

def _parse_goal(goal, sizes: Sequence[int], task: str) -> np.ndarray:
    g = np.asarray([] if goal is None else goal, float).reshape(-1)
    if g.size not in sizes or not np.all(np.isfinite(g)):
        want = ' or '.join({0: 'empty (the default)', 2: 'x y', 3: 'x y yaw'}[n] for n in sizes)
        raise ExecutionError(INVALID_GOAL, f'task_goal {g.tolist()} does not fit task {task!r}: '
                             f'want {want} (world frame, m, rad)')
    return g


class PolicyEpisode:
    """One episode of a policy on the robot. The caller supplies observations and sends the
    motions it returns (after :meth:`SafetyGate.validate` against the measured position)."""

    one_shot: bool = True
    period: float = 0.0

    def __init__(self, loaded: LoadedPolicy, gate: SafetyGate, goal=(),
                 settings: ExecutionSettings | None = None):
        self.loaded = loaded
        self.task = loaded.task
        self.policy = loaded.policy
        self.gate = gate
        self.settings = settings or ExecutionSettings()
        self.steps = 0
        self.observations: list[list[float]] = []
        self.actions: list[list[float]] = []
        self.records: list[dict] = []      # per action: what a PolicyStep message carries
        self.tool_start: list[float] = []  # closed-loop tasks: the tip's start x y
        self.done_reason = ''
        # The executor's view of the other tracked objects: id -> fresh ObjectPose or None
        # (set by the node before start(): a stack's base is one).
        self.other_pose: Callable[[str], ObjectPose | None] | None = None

    @property
    def object_id(self) -> str:
        """Id of the object the task acts on."""
        return self.task.object_id

    def _act(self, obs, pose: ObjectPose | None = None) -> np.ndarray:
        try:
            raw = self.policy(np.asarray(obs, float))
            action = check_action(self.task, raw)
        except TaskError as exc:
            raise ExecutionError(INVALID_CHECKPOINT,
                                 f'the policy of {self.loaded.path} gave an unusable action: '
                                 f'{exc}') from None
        self.steps += 1
        self.observations.append([float(v) for v in obs])
        self.actions.append([float(v) for v in action])
        self.records.append({
            'step': self.steps - 1, 'observation': self.observations[-1],
            'action': self.actions[-1], 'task_goal': self.goal_vector(),
            'object_pose': [] if pose is None else
            [float(v) for v in (*pose.position, *pose.quat)],
            'tool_start': list(self.tool_start)})
        return action

    def goal_vector(self) -> list[float]:
        """The resolved goal as a PolicyStep's task_goal (x y [yaw])."""
        return []

    def _solve(self, target, seed, what: str) -> np.ndarray:
        try:
            return self.task.ik.solve(target, seed)
        except IKError as exc:
            raise ExecutionError(WORKSPACE_VIOLATION, f'{what}: the tool cannot get there: '
                                 f'{exc}') from None

    def _approach(self, q_current, q_target, via=None, label: str = 'approach') -> Motion:
        try:
            traj = plan_approach(self.task.ik, q_current, q_target, self.gate.limits,
                                 self.settings, self.task.cfg.table_height,
                                 self.gate.velocity_scale, via)
        except IKError as exc:
            raise ExecutionError(WORKSPACE_VIOLATION, f'{label}: the tool cannot get there: '
                                 f'{exc}') from None
        m = Motion(label, traj)
        m.validated = self.gate.validate(traj, q_current, label)
        return m

    # The interface the executor drives.
    def start(self, q_current, pose: ObjectPose) -> list[Motion]:
        """The motions that start the episode from joints ``q_current`` with the object
        at ``pose``."""
        raise NotImplementedError

    def step(self, pose: ObjectPose) -> Motion | None:
        """Closed loop: the next segment, or None when the episode is over."""
        return None

    def state(self, pose: ObjectPose) -> dict:
        """The task state (dict) for the object at ``pose``."""
        raise NotImplementedError

    def success(self, pose: ObjectPose) -> bool:
        """True when the task counts the object at ``pose`` as a success."""
        return bool(self.task.success(self.state(pose)))

    def error(self, pose: ObjectPose) -> float:
        """Task error (m) for the object at ``pose``."""
        return float(self.task.error(self.state(pose)))

    def summary(self) -> dict:
        """The episode as a dict: task, object, steps, goal, done reason, observations
        and actions."""
        return {'task': self.task.name, 'object_id': self.object_id, 'steps': self.steps,
                'goal': self.goal_description(), 'done_reason': self.done_reason,
                'observations': self.observations, 'actions': self.actions}

    def goal_description(self) -> dict:
        """The episode's goal as a JSON-ready dict (empty by default)."""
        return {}


class _PolarGoal:
    """A one-shot episode's goal point: the one given, or drawn about the observed object
    from the task's distance and heading ranges (their middle; a scripted demonstrator's
    goal distribution when the checkpoint has one)."""

    def _set_goal(self, goal) -> np.ndarray:
        """``goal_xy`` from the action's goal ([] or [x, y]; a third value is ignored),
        checked against the workspace; the parsed goal."""
        g = _parse_goal(goal, (0, 2, 3), self.task.name)
        self.goal_xy = None if g.size == 0 else g[:2].copy()
        if self.goal_xy is not None:
            self.gate.check_goal_xy(self.goal_xy)
        self.plan: dict | None = None
        return g

    def _resolve_goal(self, pose: ObjectPose) -> np.ndarray:
        if self.goal_xy is None:
            c = self.task.cfg
            rng = self.loaded.goal_rng
            if rng is not None:   # a scripted demonstrator: the task's goal distribution
                dist, heading = rng.uniform(*c.distance_range), rng.uniform(*c.heading_range)
            else:
                dist, heading = float(np.mean(c.distance_range)), float(np.mean(c.heading_range))
            self.goal_xy = pose.xy + dist * np.array([np.cos(heading), np.sin(heading)])
            self.gate.check_goal_xy(self.goal_xy, 'default goal')
        return self.goal_xy

    def goal_vector(self) -> list[float]:
        """The goal as a list of floats (x, y in m; empty when none)."""
        return [] if self.goal_xy is None else [float(v) for v in self.goal_xy]


class SlideEpisode(_PolarGoal, PolicyEpisode):
    """slide_to_target: one observation -> one action -> approach + strike."""

    one_shot = True

    def __init__(self, loaded, gate, goal=(), settings=None):
        super().__init__(loaded, gate, goal, settings)
        self._set_goal(goal)

    def start(self, q_current, pose: ObjectPose) -> list[Motion]:
        """The strike's motions from ``q_current`` towards the goal for the object at ``pose``."""
        goal = self._resolve_goal(pose)
        reset = ResetSample(pose.xy, pose.yaw, goal.copy())
        obs = self.task.observation(self.task.initial_state(reset))
        action = self._act(obs, pose)
        try:
            plan = self.task.plan(reset, action)
        except IKError as exc:
            raise ExecutionError(WORKSPACE_VIOLATION, f'strike from the box at '
                                 f'({pose.xy[0]:.3f}, {pose.xy[1]:.3f}): the tool cannot get '
                                 f'there: {exc}') from None
        self.plan = plan
        approach = self._approach(q_current, plan['q_start'], plan.get('q_above'))
        lead = self.settings.strike_lead_in
        names = tuple(self.gate.limits.names)
        q0 = np.asarray(plan['q_start'], float)[None]
        if lead > 0:
            times = np.concatenate([[lead], plan['times'] + lead])
            pos = np.vstack([q0, plan['positions']])
            vel = np.vstack([np.zeros_like(q0), plan['velocities']])
        else:
            times, pos, vel = plan['times'], plan['positions'], plan['velocities']
        strike = Motion('strike', es.Trajectory(names, times, pos, vel),
                        settle=max(0.0, plan['duration'] - float(plan['times'][-1])))
        strike.validated = self.gate.validate(strike.trajectory, plan['q_start'], 'strike')
        self.done_reason = 'one-shot'
        retreat = self._retreat(np.asarray(plan['positions'][-1], float))
        return [approach, strike] + ([retreat] if retreat is not None else [])

    def _retreat(self, q_end) -> Motion | None:
        """After the strike and its settle: the tool straight up from where the strike left
        it to ``approach_height`` above the table (None when it is that high already). The
        arm leaves the object's way before the outcome is observed (the camera sees past the
        tool) and before anyone puts the object back: the Panda's hand left low where its
        strikes end sat where the emulated cell's reset puts the box, which launched the box
        to (0.26, 0.02) at every reset (trials 3-10 of ``make demo CELL=panda``)."""
        ik = self.task.ik
        tip = ik.tip_position(q_end)
        hover = self.task.cfg.table_height + self.settings.approach_height
        if tip[2] >= hover - 0.005:
            return None
        try:
            t, q, v = _line_leg(ik, tip, [tip[0], tip[1], hover], q_end,
                                self.gate.limits.velocity * self.gate.velocity_scale,
                                self.settings)
        except IKError as exc:
            raise ExecutionError(WORKSPACE_VIOLATION, f'retreat: the tool cannot lift '
                                 f'straight up from {np.round(tip, 3).tolist()}: {exc}') from None
        m = Motion('retreat', es.Trajectory(tuple(self.gate.limits.names), t, q, v))
        m.validated = self.gate.validate(m.trajectory, q_end, 'retreat')
        return m

    def state(self, pose: ObjectPose) -> dict:
        """slide_to_target's state for the object at ``pose``."""
        return {'object_xy': pose.xy, 'object_z': pose.z, 'object_yaw': pose.yaw,
                'goal_xy': self.goal_xy, 'object_up_z': pose.up_z}

    def goal_description(self) -> dict:
        """Goal x, y (m) and, once planned, the strike heading (rad)."""
        out = {'goal_xy': None if self.goal_xy is None else [float(v) for v in self.goal_xy]}
        if self.plan is not None:
            out['strike_heading'] = float(self.plan['strike_heading'])
        return out


class PushEpisode(PolicyEpisode):
    """push_to_pose: approach behind the box, then observation -> action -> segment per tick."""

    one_shot = False

    def __init__(self, loaded, gate, goal=(), settings=None):
        super().__init__(loaded, gate, goal, settings)
        g = _parse_goal(goal, (0, 2, 3), self.task.name)
        self.goal_xy = None if g.size == 0 else g[:2].copy()
        self.goal_yaw = None if g.size < 3 else wrap_angle(float(g[2]))
        if self.goal_xy is not None:
            self._check_goal(self.goal_xy, 'goal')
        c = self.task.cfg
        self.period = 1.0 / c.control_rate
        self.max_steps = int(c.max_steps)
        self.z = c.table_height + c.push_height
        self.tip: np.ndarray | None = None
        self.q: np.ndarray | None = None
        self.ik_failures = 0

    def _check_goal(self, xy, what):
        self.gate.check_goal_xy(xy, what)
        lo_x, hi_x, lo_y, hi_y = self.task.cfg.workspace
        if not (lo_x <= xy[0] <= hi_x and lo_y <= xy[1] <= hi_y):
            raise ExecutionError(
                WORKSPACE_VIOLATION,
                f'{what} ({xy[0]:.3f}, {xy[1]:.3f}) m is outside the task\'s pushing area x '
                f'[{lo_x}, {hi_x}], y [{lo_y}, {hi_y}]')

    def start(self, q_current, pose: ObjectPose) -> list[Motion]:
        """The approach motions to the pushing start for the object at ``pose``,
        from ``q_current``."""
        c = self.task.cfg
        rng = self.loaded.goal_rng    # a scripted demonstrator: the task's goal distribution
        if self.goal_xy is None:
            offset = (np.array([rng.uniform(*c.goal_forward),
                                rng.uniform(-c.goal_lateral, c.goal_lateral)])
                      if rng is not None else np.array([float(np.mean(c.goal_forward)), 0.0]))
            self.goal_xy = pose.xy + offset
            self._check_goal(self.goal_xy, 'default goal')
        if self.goal_yaw is None:
            self.goal_yaw = pose.yaw if rng is None else wrap_angle(
                pose.yaw + rng.uniform(-c.goal_yaw_change, c.goal_yaw_change))
        # The task's start: the tool behind the box along -x (PushToPose.sample_reset).
        tip = pose.xy - np.array([0.09, 0.0])
        self.q = self._solve([*tip, self.z], None, 'push start')
        self.tip = tip
        self.tool_start = [float(v) for v in tip]
        return [self._approach(q_current, self.q)]

    def state(self, pose: ObjectPose) -> dict:
        """push_to_pose's state for the object at ``pose`` (with the tool tip's x, y)."""
        return {'object_xy': pose.xy, 'object_z': pose.z, 'object_yaw': pose.yaw,
                'goal_xy': self.goal_xy, 'goal_yaw': self.goal_yaw,
                'tip_xy': None if self.tip is None else self.tip.copy()}

    def step(self, pose: ObjectPose) -> Motion | None:
        """The next push motion for the object at ``pose``, or None when the episode is done."""
        if self.tip is None:
            raise RuntimeError('PushEpisode.step before start')
        state = self.state(pose)
        if self.task.success(state):
            self.done_reason = 'success'
            return None
        if self.steps >= self.max_steps:
            self.done_reason = f'max_steps ({self.max_steps}) reached'
            return None
        action = self._act(self.task.observation(state), pose)
        lo_x, hi_x, lo_y, hi_y = self.task.cfg.workspace
        tip_next = np.clip(self.tip + action * self.period, [lo_x, lo_y], [hi_x, hi_y])
        try:
            self.q = self.task.ik.solve([*tip_next, self.z], self.q)
            self.tip = tip_next
        except IKError:
            self.ik_failures += 1      # as in training: keep the tip where it was
        traj = es.Trajectory(tuple(self.gate.limits.names), np.array([self.period]),
                             self.q[None].copy())
        return Motion(f'step {self.steps}', traj, wait_at_goal=False)

    def goal_vector(self) -> list[float]:
        """The goal as a list of floats: x, y (m) and yaw (rad) when set."""
        if self.goal_xy is None:
            return []
        return [float(v) for v in self.goal_xy] + ([] if self.goal_yaw is None
                                                   else [float(self.goal_yaw)])

    def goal_description(self) -> dict:
        """Goal x, y (m), goal yaw (rad) and the IK failures so far."""
        return {'goal_xy': None if self.goal_xy is None else [float(v) for v in self.goal_xy],
                'goal_yaw': self.goal_yaw, 'ik_failures': self.ik_failures}


class PickEpisode(_PolarGoal, PolicyEpisode):
    """pick_and_place (and stack): one observation -> one action -> the task's plan, run as
    four motions with the jaw between them: the approach to the plan's ``q_above`` (the
    wrist turned to the box's faces on the way), the descent with the jaw opened first, the
    carry (lift, traverse, lower) after the jaw closed on the box with the task's
    ``grasp_effort`` (or the action's effort), and the retreat after it opened, then the
    task's ``settle_time``.
    Goal: the target square's centre ``[x, y]`` (stack: the base box's centre); empty: the
    middle of the task's goal distance and heading ranges from the observed box (stack: the
    base's tracked centre, the checkpoint's ``base_id`` on the tracker's topic; none fresh
    is OBSERVATION_UNAVAILABLE before anything moves).
    Then the arm goes back to where the episode started ('home': the same safe approach
    path), out of the camera's view of the place and the next start.
    The outcome needs the jaw's position at the end: the executor sets ``jaw_position``
    from /joint_states. The tracker gives poses, not speeds: the outcome is observed after
    the settle time and the at-rest predicate is scored at speed 0."""

    one_shot = True

    def __init__(self, loaded, gate, goal=(), settings=None):
        super().__init__(loaded, gate, goal, settings)
        self._set_goal(goal)
        # stack without a goal: the base where the tracker sees it
        self.base_id = getattr(self.task.cfg, 'base_id', '') if self.goal_xy is None else ''
        self.jaw_position = math.nan

    def _resolve_goal(self, pose: ObjectPose) -> np.ndarray:
        if self.goal_xy is None and self.base_id:
            base = self.other_pose(self.base_id) if self.other_pose is not None else None
            if base is None:
                raise ExecutionError(OBSERVATION_UNAVAILABLE, f'{self.task.name}: no fresh '
                                     f'tracked pose of the base {self.base_id!r} (the '
                                     "checkpoint's base_id); give task_goal as its centre "
                                     '[x, y] (m) or have the tracker report it')
            self.goal_xy = np.asarray(base.xy, float).copy()
            self.gate.check_goal_xy(self.goal_xy, f'tracked base {self.base_id!r}')
        return super()._resolve_goal(pose)

    def start(self, q_current, pose: ObjectPose) -> list[Motion]:
        """The episode's motions from ``q_current`` for the box at ``pose``."""
        task, c = self.task, self.task.cfg
        goal = self._resolve_goal(pose)
        reset = ResetSample(pose.xy, pose.yaw, goal.copy())
        action = self._act(task.observation(task.initial_state(reset)), pose)
        try:
            plan = task.plan(reset, action)
        except IKError as exc:
            raise ExecutionError(WORKSPACE_VIOLATION, f'grasp of the box at ({pose.xy[0]:.3f}, '
                                 f'{pose.xy[1]:.3f}) placed at ({goal[0]:.3f}, {goal[1]:.3f}): '
                                 f'the tool cannot get there: {exc}') from None
        self.plan = plan
        names = tuple(self.gate.limits.names)
        jaw, effort = task.jaw, float(plan['effort'])    # the task's, or the action's
        motions = [self._approach(q_current, plan['q_above'], plan['q_above'])]
        q_from = np.asarray(plan['q_above'], float)
        for label, grip, settle in (('descend', jaw.upper, 0.0), ('carry', jaw.lower, 0.0),
                                    ('retreat', jaw.upper, c.settle_time)):
            t, q, qd = plan[label]
            m = Motion(label, es.Trajectory(names, t, q, qd), settle=settle,
                       grip=(float(grip), effort))
            m.validated = self.gate.validate(m.trajectory, q_from, label)
            motions.append(m)
            q_from = q[-1]
        # Back where the episode started, the jaw open: an arm left above the place stands
        # between the camera and the next episode's start (measured on gripper_stack.yaml:
        # the box at its start "no cluster of its height and size" with the arm there).
        motions.append(self._approach(q_from, np.asarray(q_current, float), label='home'))
        self.done_reason = 'one-shot'
        return motions

    def state(self, pose: ObjectPose) -> dict:
        """The task's state for the box at ``pose`` with the jaw at ``jaw_position``."""
        return self.task.outcome_state(self.goal_xy, pose.position, pose.quat,
                                       self.jaw_position, 0.0)

    def goal_description(self) -> dict:
        """Goal x, y (m) and, once planned, the wrist's turn (rad)."""
        out = {'goal_xy': None if self.goal_xy is None else [float(v) for v in self.goal_xy]}
        if self.plan is not None:
            out['turn'] = float(self.plan['turn'])
        return out


EPISODES = {'slide_to_target': SlideEpisode, 'push_to_pose': PushEpisode,
            'pick_and_place': PickEpisode, 'gentle_pick_and_place': PickEpisode,
            'stack': PickEpisode}


def make_episode(loaded: LoadedPolicy, gate: SafetyGate, goal=(),
                 settings: ExecutionSettings | None = None) -> PolicyEpisode:
    """The episode runner for the checkpoint's task (INVALID_CHECKPOINT for a task the
    executor cannot run yet)."""
    cls = EPISODES.get(loaded.task_name)
    if cls is None:
        raise ExecutionError(INVALID_CHECKPOINT,
                             f'checkpoint {loaded.path}: task {loaded.task_name!r} cannot run on '
                             f'the robot yet (executable tasks: {sorted(EPISODES)})')
    return cls(loaded, gate, goal, settings)


@dataclass
class PoseBuffer:
    """The latest pose of one object from a stream of tracker messages, with freshness."""
    object_id: str
    pose: ObjectPose | None = None
    received: float = -math.inf
    messages: int = 0
    ids_seen: set = field(default_factory=set)
    others: dict = field(default_factory=dict)   # id -> latest ObjectPose, every other object

    def add(self, ids: Sequence[str], poses: Sequence[ObjectPose | None], stamp: float,
            now: float) -> bool:
        """One tracker message; True when it held this object."""
        self.messages += 1
        self.ids_seen.update(ids)
        found = False
        for oid, pose in zip(ids, poses):
            if pose is None:
                continue
            if oid == self.object_id:
                self.pose = pose
                self.received = now
                found = True
            else:
                self.others[oid] = pose
        return found

    def fresh_other(self, object_id: str, now: float, max_age: float) -> ObjectPose | None:
        """The latest pose of another object if measured within ``max_age`` of ``now``."""
        p = self.others.get(object_id)
        return None if p is None or now - p.stamp > max_age else p

    def fresh(self, now: float, max_age: float, after: float = -math.inf) -> ObjectPose | None:
        """The latest pose if measured within ``max_age`` of ``now`` and not before ``after``."""
        p = self.pose
        if p is None or now - p.stamp > max_age or p.stamp < after:
            return None
        return p

    def describe_missing(self, topic: str, timeout: float) -> str:
        """One line saying why no usable pose of the object arrived on ``topic`` within ``timeout``
        s."""
        if self.messages == 0:
            return f'no message on {topic} within {timeout:.2f} s (is the object tracker running?)'
        if self.pose is None:
            return (f'{self.messages} message(s) on {topic} within {timeout:.2f} s, none with '
                    f'object {self.object_id!r} (ids seen: {sorted(self.ids_seen)})')
        return (f'no fresh pose of {self.object_id!r} on {topic} within {timeout:.2f} s (latest '
                f'measured at {self.pose.stamp:.3f})')
