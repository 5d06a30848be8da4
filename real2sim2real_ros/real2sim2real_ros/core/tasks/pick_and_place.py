"""pick_and_place: grasp a box, carry it and set it down upright inside a target square.

The robot carries a parallel-jaw gripper (core/grasping/jaw.py). One action per episode
(one-shot): the tool, pointing down and turned to the box's faces, opens the jaw above the
box, descends, closes with ``grasp_effort``, lifts to ``carry_height``, carries the box above
the target, lowers it until it rests ``place_drop`` above the table, opens the jaw and lifts
away. The wrist turns with the box: the jaw closes across the box's faces (the yaw modulo a
quarter turn closest to the gripper's own), and the box is set down at the yaw it was
carried at.

Action: [grasp offset x, y, place offset x, y] (m, world frame): where the jaw closes relative
to the observed box centre and where it releases relative to the target. Observation: [target
- box (x, y) m, box yaw relative to the jaw modulo a quarter turn (rad)]. Success (declared
in config/tasks/pick_and_place.yaml): the box's centre inside the target square, upright, at
rest, and the jaw open (released). The backend must offer ``command_gripper(position,
max_effort)`` and ``gripper_state()`` (core/tasks/worlds.py: a twin with a gripper, a cell
whose robot has one); a twin gets its grasp contact recipe (``prepare_grasping``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..geometry import quat_yaw
from ..grasping.hold import jaw_axis_yaw, pad_half_length
from ..grasping.jaw import gripper_joints
from ..twin import UnstableTwinError
from .base import EpisodeResult, ResetSample, TaskError, check_action
from .kinematics import ToolDownIK
from .spec import DeclaredTask
from .worlds import observed_position, observed_start, scored_pose, scored_position

QUARTER = math.pi / 2
SQUARE_TOLERANCE = 0.005   # m: a box whose horizontal extents differ less is held either way


@dataclass
class PickConfig:
    """pick_and_place settings: the object, start and target distributions, the motion."""
    object_id: str = 'box_0'
    object_size: tuple[float, float, float] = (0.05, 0.05, 0.05)
    object_shape: str = 'box'
    table_height: float = 0.0
    start_xy: tuple[float, float] = (0.45, -0.10)
    start_jitter: float = 0.02           # m, uniform square half-width about start_xy
    yaw_jitter: float = 0.3              # rad about zero
    distance_range: tuple[float, float] = (0.15, 0.22)   # m, box -> target centre
    heading_range: tuple[float, float] = (1.3, 1.85)     # rad: the target to the left (+y)
    target_half_width: float = 0.05      # m: the 10 x 10 cm target square
    grasp_effort: float = 20.0           # N
    grasp_clearance: float = 0.01        # m between the pads' lower ends and the table
    approach_height: float = 0.08        # m above the grasp height, jaw open
    carry_height: float = 0.12           # m of lift above the grasp height for the carry
    place_drop: float = 0.003            # m above resting when the jaw opens
    tool_speed: float = 0.25             # m/s, peak speed of the straight tool moves
    close_time: float = 0.8              # s for the jaw to close and settle
    open_time: float = 0.5               # s for the jaw to open
    settle_time: float = 0.8             # s after the retreat, for the box to come to rest
    waypoint_dt: float = 0.02            # s between trajectory points
    offset_max: float = 0.02             # m, bound of each action component
    demo_noise: float = 0.004            # m, std of the expert's place offset
    # The grasp's squeeze as an action (a gentle grasp: reward.effort_scale charges for it):
    # [lo, hi] N makes the action's 5th component the closing effort; (0, 0): grasp_effort.
    effort_range: tuple[float, float] = (0.0, 0.0)
    # What the weight_sized_grasp expert assumes: the object's mass (kg; the evaluation
    # harness sets an identified twin's), the finger-object friction, and its safety factor.
    demo_mass: float = 0.2
    finger_friction: float = 1.0
    effort_margin: float = 2.0

    def __post_init__(self):
        if self.object_shape != 'box':
            raise TaskError(f'pick_and_place: object_shape {self.object_shape!r}: boxes only')
        if not self.target_half_width > 0:
            raise TaskError('pick_and_place: target_half_width must be > 0')
        if tuple(self.effort_range) != (0.0, 0.0):
            lo, hi = self.effort_range
            if not 0 < lo < hi:
                raise TaskError(f'pick_and_place: effort_range {self.effort_range} must be '
                                '0 < lo < hi (N)')
        if not 0 < self.grasp_effort:
            raise TaskError('pick_and_place: grasp_effort must be > 0 N')


def _rz(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _min_jerk_line(a, b, dt, speed):
    """Points from a to b (min-jerk in time, peak speed ``speed``) and their times."""
    dist = float(np.linalg.norm(np.asarray(b) - a))
    duration = max(0.3, 1.875 * dist / speed)
    n = max(2, int(math.ceil(duration / dt)) + 1)
    s = np.linspace(0.0, 1.0, n)
    shape = 10 * s**3 - 15 * s**4 + 6 * s**5
    return s * duration, np.asarray(a) + np.outer(shape, np.asarray(b) - a)


class PickAndPlace(DeclaredTask):
    """Grasp, carry and place a box in a target square (one-shot). See the module docstring;
    start, target, success, reward and the expert: config/tasks/pick_and_place.yaml."""
    name = 'pick_and_place'
    observation_dim = 3
    action_dim = 4
    one_shot = True

    def __init__(self, robot, config: PickConfig | dict | None = None, spec=None):
        self.bind_spec(config, spec)
        self.robot = robot
        self.jaw = gripper_joints(robot)
        if self.jaw is None:
            raise TaskError(f'{self.name}: the robot {robot.name!r} has no parallel-jaw '
                            'gripper (urdf/cell_arm_gripper.urdf, a Panda with its hand)')
        self.ik = ToolDownIK(robot)
        self.ik.roll_free = False     # the jaw turns to the box's faces, on any arm
        self._rot0 = self.ik.rot_ready.copy()
        self._jaw_yaw0 = self.jaw_axis_yaw(self.ik.q_ready)
        c = self.cfg
        self._pad_half = pad_half_length(robot)
        self.action_low = np.full(4, -c.offset_max)
        self.action_high = np.full(4, c.offset_max)
        if c.effort_range[1] > 0:           # the 5th component: the closing effort (N)
            self.action_dim = 5
            self.action_low = np.append(self.action_low, c.effort_range[0])
            self.action_high = np.append(self.action_high, c.effort_range[1])

    # ---------------------------------------------------------------- episode start
    def sample_reset(self, rng: np.random.Generator) -> ResetSample:
        """A random start pose and a target square's centre, drawn as the spec declares."""
        xy, yaw, goal, _ = self.sample_start_goal(rng)
        return ResetSample(xy, yaw, goal)

    def _relative_yaw(self, yaw: float) -> float:
        """The box's yaw relative to the jaw axis, modulo a quarter turn, in [-pi/4, pi/4)."""
        return float((yaw - self._jaw_yaw0 + QUARTER / 2) % QUARTER - QUARTER / 2)

    def grasp_turn(self, yaw: float) -> float:
        """The wrist's turn (rad) about the vertical from the ready pose that sets the jaw
        across the box's faces: the nearest quarter turn when the box's two horizontal
        extents differ by less than ``SQUARE_TOLERANCE``, else the nearest turn that closes
        the jaw across the narrower one (a 8 x 6 cm box is held across its 6 cm)."""
        turn = self._relative_yaw(yaw)
        sx, sy = self.cfg.object_size[:2]
        if abs(sx - sy) < SQUARE_TOLERANCE:
            return turn
        if (sx if self._closes_across(turn, yaw) == 0 else sy) > min(sx, sy):
            turn = turn - QUARTER if turn >= 0 else turn + QUARTER
        return float(turn)

    def _closes_across(self, turn: float, yaw: float) -> int:
        """The box axis (0: x, 1: y) the jaw, turned by ``turn``, closes across for a box
        at ``yaw``."""
        return round((self._jaw_yaw0 + turn - yaw) / QUARTER) % 2

    def along_pads(self, yaw: float) -> tuple[np.ndarray, float]:
        """(the unit xy direction along the pads' faces, the box's extent that way, m) in
        the grasp :meth:`grasp_turn` sets for a box at ``yaw`` (the slip probe's grasp
        offsets, core/grasping/slip.py)."""
        turn = self.grasp_turn(yaw)
        jaw = self._jaw_yaw0 + turn         # the direction the jaw closes in
        sx, sy = self.cfg.object_size[:2]
        extent = sy if self._closes_across(turn, yaw) == 0 else sx
        return np.array([-math.sin(jaw), math.cos(jaw)]), float(extent)

    def observation(self, state: dict) -> np.ndarray:
        """(target - box x, y in m, box yaw relative to the jaw modulo a quarter turn)."""
        d = np.asarray(state['goal_xy'], float) - np.asarray(state['object_xy'], float)
        return np.array([d[0], d[1], self._relative_yaw(state['object_yaw'])])

    # ---------------------------------------------------------------- the motion
    place_lift = 0.0    # m: the surface the box is set on, above the table (stack: the base)

    def arrange(self, world, reset: ResetSample) -> None:
        """Put the episode's other objects in place (none here; stack: the base)."""

    def observed_goal(self, world, reset: ResetSample):
        """The goal (x, y) the policy plans for: the target square's centre (declared, as a
        lab marks it on its table); stack: the base's centre as seen."""
        return np.asarray(reset.goal_xy, float)

    def scored_goal(self, world, reset: ResetSample):
        """The goal (x, y) the outcome is scored against (the target square's centre)."""
        return np.asarray(reset.goal_xy, float)

    def jaw_axis_yaw(self, q) -> float:
        """Yaw (rad) of the jaw's travel axis at joints ``q`` (hold.jaw_axis_yaw)."""
        return jaw_axis_yaw(self.robot, self.ik, q)

    def _solve_path(self, points, turn: float, q_seed):
        """Joint positions along tip ``points`` with the tool down, turned by ``turn`` (rad)
        about the vertical from the ready orientation."""
        self.ik.rot_ready = _rz(turn) @ self._rot0
        try:
            return self.ik.solve_path(points, q_seed)
        finally:
            self.ik.rot_ready = self._rot0

    def plan(self, reset: ResetSample, action) -> dict:
        """Joint motion of the episode: ``q_above`` (start, jaw open), then the segments
        'descend', 'carry' (lift, traverse, lower) and 'retreat', each (times, q, qd)."""
        c = self.cfg
        a = check_action(self, action)
        turn = self.grasp_turn(reset.object_yaw)
        grasp_z = self.grasp_height
        lift = grasp_z + c.carry_height
        grasp = np.array([*(reset.object_xy + a[:2]), grasp_z])
        place = np.array([*(reset.goal_xy + a[2:4]), grasp_z + self.place_lift + c.place_drop])
        above = grasp + [0, 0, c.approach_height]
        seed = self.ik.q_ready.copy()
        q_above = self._solve_path([above], turn, seed)[0]
        legs = {'descend': [(above, grasp)],
                'carry': [(grasp, grasp * [1, 1, 0] + [0, 0, lift]),
                          (grasp * [1, 1, 0] + [0, 0, lift], place * [1, 1, 0] + [0, 0, lift]),
                          (place * [1, 1, 0] + [0, 0, lift], place)],
                'retreat': [(place, place + [0, 0, c.approach_height])]}
        effort = float(a[4]) if a.size > 4 else float(c.grasp_effort)
        return {'q_above': q_above, 'turn': turn, 'effort': effort,
                **self._segments(legs, turn, q_above)}

    def _segments(self, legs: dict, turn: float, q_last) -> dict:
        """Each leg (a list of straight tool lines) as (times, q, qd) from ``q_last`` on."""
        c = self.cfg
        out = {}
        for name, lines in legs.items():
            times, points, t0 = [], [], 0.0
            for a0, b0 in lines:
                t, p = _min_jerk_line(a0, b0, c.waypoint_dt, c.tool_speed)
                times.append(t[1:] + t0)
                points.append(p[1:])
                t0 += float(t[-1])
            t, p = np.concatenate(times), np.vstack(points)
            q = self._solve_path(p, turn, q_last)
            qd = np.gradient(np.vstack([q_last, q]), np.concatenate([[0.0], t]), axis=0)[1:]
            qd[-1] = 0.0
            out[name] = (t, q, qd)
            q_last = q[-1]
        return out

    def grasp_plan(self, reset: ResetSample, lift: float) -> dict:
        """The grasp of :meth:`plan` without the carry (core/grasping/slip.py's probe):
        ``q_above`` (jaw open), 'descend' to the box's observed centre, then 'lift' straight
        up by ``lift`` (m)."""
        c = self.cfg
        turn = self.grasp_turn(reset.object_yaw)
        grasp = np.array([*reset.object_xy, self.grasp_height])
        above = grasp + [0, 0, c.approach_height]
        q_above = self._solve_path([above], turn, self.ik.q_ready.copy())[0]
        legs = {'descend': [(above, grasp)], 'lift': [(grasp, grasp + [0, 0, lift])]}
        return {'q_above': q_above, 'turn': turn, **self._segments(legs, turn, q_above)}

    @property
    def grasp_height(self) -> float:
        """Height (m) of the tip when the jaw closes: the box's centre, or the pads' lower
        ends ``grasp_clearance`` above the table for a box lower than the pads."""
        c = self.cfg
        return c.table_height + max(c.object_size[2] / 2, self._pad_half + c.grasp_clearance)

    # ---------------------------------------------------------------- the episode
    def outcome_state(self, goal_xy, xyz, quat, jaw_position: float, speed: float) -> dict:
        """The task's state (what its success predicates read) for the box at ``xyz`` (m)
        turned by ``quat`` (w, x, y, z) and moving at ``speed`` (m/s), the target at
        ``goal_xy`` and the jaw at ``jaw_position`` (m)."""
        w, x, y, _ = np.asarray(quat, float) / np.linalg.norm(quat)
        return {'object_xy': np.asarray(xyz[:2], float), 'object_z': float(xyz[2]),
                'object_yaw': quat_yaw(quat), 'goal_xy': goal_xy,
                'object_up_z': float(1 - 2 * (x * x + y * y)),
                'jaw_position': float(jaw_position), 'jaw_open_at': self.jaw.upper,
                'object_speed': float(speed), 'goal_z': self.object_z + self.place_lift}

    def _wait(self, world, q, duration: float) -> None:
        world.execute(np.array([self.cfg.waypoint_dt]), np.asarray(q)[None], None, duration)

    def run_episode(self, world, reset: ResetSample, policy) -> EpisodeResult:
        """One pick and place on a backend (TwinWorld or CellWorld with a gripper): the
        policy plans from the start as observed; the outcome is scored on the scored pose."""
        c = self.cfg
        prepare = getattr(world, 'prepare_grasping', None)
        if prepare is not None:
            prepare()
        true_xyz = [*reset.object_xy, self.object_z]
        seen = observed_start(world, true_xyz, reset.object_yaw,
                              lambda w: self.arrange(w, reset))
        goal = self.observed_goal(world, reset)
        if seen is None or goal is None:
            return self._failed(world, reset, {'not_seen': True} if seen is None else
                                {'goal_not_seen': True})
        view = replace(reset, object_xy=np.asarray(seen[0][:2], float),
                       object_yaw=float(seen[1]), goal_xy=np.asarray(goal, float))
        obs = self.observation(self.initial_state(view))
        action = check_action(self, policy(obs))
        plan = self.plan(view, action)
        world.reset(plan['q_above'], true_xyz, reset.object_yaw)
        self.arrange(world, reset)
        try:
            world.command_gripper(self.jaw.upper, c.grasp_effort)
            self._wait(world, plan['q_above'], c.open_time)
            world.execute(*plan['descend'])
            world.command_gripper(self.jaw.lower, plan['effort'])
            self._wait(world, plan['descend'][1][-1], c.close_time)
            held = world.gripper_state()[0]
            world.execute(*plan['carry'])
            world.command_gripper(self.jaw.upper, c.grasp_effort)
            self._wait(world, plan['carry'][1][-1], c.open_time)
            world.execute(*plan['retreat'], duration=plan['retreat'][0][-1] + c.settle_time)
            xyz0, _ = scored_pose(world)
            self._wait(world, plan['retreat'][1][-1], 0.1)
            xyz, quat = scored_pose(world)
            speed = float(np.linalg.norm(np.asarray(xyz) - xyz0)) / 0.1
            state = self.outcome_state(self.scored_goal(world, reset), xyz, quat,
                                       world.gripper_state()[0], speed)
            state['grasp_effort'] = plan['effort']
        except UnstableTwinError:
            return self._failed(world, reset, {'unstable': True}, obs, action)
        return EpisodeResult(self.success(state), self.reward(state), self.error(state),
                             obs[None], action[None], state['object_xy'], state['object_yaw'],
                             {'turn': plan['turn'], 'jaw_on_box': held,
                              'upright': bool(state['object_up_z'] > 0.95),
                              'released': bool(state['jaw_position'] >= self.jaw.upper - 0.005),
                              'height_error': state['object_z'] - state['goal_z']})

    def _failed(self, world, reset, info, obs=None, action=None) -> EpisodeResult:
        xyz, quat = scored_pose(world)
        state = self.outcome_state(reset.goal_xy, xyz, quat, self.jaw.lower, 0.0)
        obs = np.zeros((0, 3)) if obs is None else obs[None]
        action = np.zeros((0, 4)) if action is None else action[None]
        return EpisodeResult(False, self.reward(state), self.error(state), obs, action,
                             state['object_xy'], state['object_yaw'], info)

    # ---------------------------------------------------------------- demonstrations
    def hindsight_relabel(self, reset: ResetSample, result: EpisodeResult):
        """(observation, action) for which this episode WAS right: the target moved to where
        the box came to rest. None unless the box was carried (it moved at least half the
        nearest target distance), stands upright at its resting height and was released: a
        dropped or toppled box teaches nothing about where a place offset puts it."""
        if result.observations.shape[0] == 0 or not result.info.get('upright', False):
            return None
        if abs(result.info.get('height_error', 1.0)) > 0.01 or \
                not result.info.get('released', False):
            return None
        final = np.asarray(result.final_object_xy, float)
        if np.linalg.norm(final - reset.object_xy) < self.cfg.distance_range[0] / 2:
            return None
        obs = result.observations[0].copy()
        seen = np.asarray(reset.goal_xy, float) - obs[:2]     # the start the policy saw
        obs[:2] = final - seen   # target - box, with the target where the box rests
        return obs, result.actions[0].copy()

    def scripted_demo_policy(self, reset: ResetSample, rng: np.random.Generator):
        """The scripted grasp expert (``centre_grasp``): close on the observed centre, release
        over the target's centre, with a Gaussian place offset of ``noise`` (m)."""
        p = self.declared['expert_params']
        offset = rng.normal(0.0, p['noise'], 2)
        tail = [] if self.action_dim == 4 else [self.sized_effort(p)]

        def policy(obs):
            return np.array([0.0, 0.0, *np.clip(offset, -self.cfg.offset_max,
                                                self.cfg.offset_max), *tail])
        return policy

    def lift_acceleration(self) -> float:
        """Peak vertical acceleration (m/s^2) of the lift: a minimum-jerk line of
        ``carry_height`` at peak speed ``tool_speed`` peaks at 5.77 d / T^2, T = 1.875 d / v."""
        c = self.cfg
        return 5.7735 * c.tool_speed ** 2 / (1.875 ** 2 * c.carry_height)

    def sized_effort(self, params: dict) -> float:
        """The weight_sized_grasp expert's closing effort (N): two pads' friction holding the
        assumed mass through the lift, ``margin`` x m (g + a) / (2 mu), within effort_range
        (the centre_grasp expert: the range's middle)."""
        lo, hi = self.cfg.effort_range
        if 'mass' not in params:
            return 0.5 * (lo + hi)
        need = params['mass'] * (9.81 + self.lift_acceleration()) / (2 * params['finger_friction'])
        return float(np.clip(params['margin'] * need, lo, hi))



class GentlePickAndPlace(PickAndPlace):
    """pick_and_place with the closing effort as the action's 5th component (the config's
    ``effort_range``, required) and charged for in the reward (``reward.effort_scale``): a
    fragile object, held with the least squeeze that keeps it in the jaw through the carry
    (config/tasks/gentle_pick_and_place.yaml). The squeeze a box needs grows with its mass:
    its expert, ``weight_sized_grasp``, closes with ``effort_margin`` x m (g + a) / (2 mu)
    for the mass it assumes (``demo_mass``; the evaluation harness gives an identified
    twin's expert the identified mass, the nominal twin's the prior's)."""
    name = 'gentle_pick_and_place'

    def __init__(self, robot, config: PickConfig | dict | None = None, spec=None):
        super().__init__(robot, config, spec)
        if self.action_dim != 5:
            raise TaskError(f'{self.name}: config.effort_range must be set ([lo, hi] N): the '
                            'effort is part of the action')


@dataclass
class StackConfig(PickConfig):
    """stack settings: pick_and_place's, and the base box the object is set on."""
    base_id: str = 'box_1'
    base_size: tuple[float, float, float] = (0.07, 0.07, 0.04)   # m
    stack_radius: float = 0.02           # m, the top box's centre from the base's (success)


class Stack(PickAndPlace):
    """Grasp a box and set it down on top of another (the base, placed by the episode at the
    goal point), released and at rest (one-shot; config/tasks/stack.yaml). The place offsets
    are relative to the base's centre, which the policy gets as the goal (a lab's tracker
    would give it; the episode's placement here)."""
    name = 'stack'

    @property
    def place_lift(self) -> float:
        """The base's height (m): the box is set on its top face."""
        return float(self.cfg.base_size[2])

    def scene_objects(self) -> list[tuple[str, tuple]]:
        """The manipulated box, then the base."""
        return [*super().scene_objects(), (self.cfg.base_id, tuple(self.cfg.base_size))]

    def hindsight_relabel(self, reset: ResetSample, result: EpisodeResult):
        """A success as it is, nothing else: the base stands at the goal, so a box set down
        elsewhere is not on a moved target's base."""
        if not result.success or result.observations.shape[0] == 0:
            return None
        return result.observations[0].copy(), result.actions[0].copy()

    def _base_xyz(self, reset: ResetSample) -> list:
        return [*reset.goal_xy, self.cfg.table_height + self.cfg.base_size[2] / 2]

    def arrange(self, world, reset: ResetSample) -> None:
        """The base at rest on the table at the goal point, turned like the box."""
        world.place_object(self.cfg.base_id, self._base_xyz(reset), reset.object_yaw)

    def observed_goal(self, world, reset: ResetSample):
        """The base's centre (x, y) as the policy sees it at the start (a cell: tracked; None
        when the tracker does not see it)."""
        xyz = observed_position(world, self.cfg.base_id, self._base_xyz(reset))
        return None if xyz is None else np.asarray(xyz[:2], float)

    def scored_goal(self, world, reset: ResetSample):
        """The base's TRUE centre (x, y) at the episode's end: the box is scored on the base
        where it stands, pushed or not."""
        return np.asarray(scored_position(world, self.cfg.base_id, self._base_xyz(reset))[:2],
                          float)
