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
from .worlds import observed_start, scored_pose

QUARTER = math.pi / 2


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

    def __post_init__(self):
        if self.object_shape != 'box':
            raise TaskError(f'pick_and_place: object_shape {self.object_shape!r}: boxes only')
        if not self.target_half_width > 0:
            raise TaskError('pick_and_place: target_half_width must be > 0')
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
    trainable = False    # the twins and cells run it; training and the harness do not yet

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

    # ---------------------------------------------------------------- episode start
    def sample_reset(self, rng: np.random.Generator) -> ResetSample:
        """A random start pose and a target square's centre, drawn as the spec declares."""
        xy, yaw, goal, _ = self.sample_start_goal(rng)
        return ResetSample(xy, yaw, goal)

    def _relative_yaw(self, yaw: float) -> float:
        """The box's yaw relative to the jaw axis, modulo a quarter turn, in [-pi/4, pi/4)."""
        return float((yaw - self._jaw_yaw0 + QUARTER / 2) % QUARTER - QUARTER / 2)

    def observation(self, state: dict) -> np.ndarray:
        """(target - box x, y in m, box yaw relative to the jaw modulo a quarter turn)."""
        d = np.asarray(state['goal_xy'], float) - np.asarray(state['object_xy'], float)
        return np.array([d[0], d[1], self._relative_yaw(state['object_yaw'])])

    # ---------------------------------------------------------------- the motion
    place_lift = 0.0    # m: the surface the box is set on, above the table (stack: the base)

    def arrange(self, world, reset: ResetSample) -> None:
        """Put the episode's other objects in place (none here; stack: the base)."""

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
        turn = self._relative_yaw(reset.object_yaw)
        grasp_z = c.table_height + max(c.object_size[2] / 2, self._pad_half + c.grasp_clearance)
        lift = grasp_z + c.carry_height
        grasp = np.array([*(reset.object_xy + a[:2]), grasp_z])
        place = np.array([*(reset.goal_xy + a[2:]), grasp_z + self.place_lift + c.place_drop])
        above = grasp + [0, 0, c.approach_height]
        seed = self.ik.q_ready.copy()
        q_above = self._solve_path([above], turn, seed)[0]
        legs = {'descend': [(above, grasp)],
                'carry': [(grasp, grasp * [1, 1, 0] + [0, 0, lift]),
                          (grasp * [1, 1, 0] + [0, 0, lift], place * [1, 1, 0] + [0, 0, lift]),
                          (place * [1, 1, 0] + [0, 0, lift], place)],
                'retreat': [(place, place + [0, 0, c.approach_height])]}
        out, q_last = {'q_above': q_above, 'turn': turn}, q_above
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

    # ---------------------------------------------------------------- the episode
    def _outcome(self, reset: ResetSample, xyz, quat, jaw_position: float,
                 speed: float) -> dict:
        w, x, y, _ = np.asarray(quat, float) / np.linalg.norm(quat)
        return {'object_xy': np.asarray(xyz[:2], float), 'object_z': float(xyz[2]),
                'object_yaw': quat_yaw(quat), 'goal_xy': reset.goal_xy,
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
        seen = observed_start(world, true_xyz, reset.object_yaw)
        if seen is None:
            return self._failed(world, reset, {'not_seen': True})
        view = replace(reset, object_xy=np.asarray(seen[0][:2], float),
                       object_yaw=float(seen[1]))
        obs = self.observation(self.initial_state(view))
        action = check_action(self, policy(obs))
        plan = self.plan(view, action)
        world.reset(plan['q_above'], true_xyz, reset.object_yaw)
        self.arrange(world, reset)
        try:
            world.command_gripper(self.jaw.upper, c.grasp_effort)
            self._wait(world, plan['q_above'], c.open_time)
            world.execute(*plan['descend'])
            world.command_gripper(self.jaw.lower, c.grasp_effort)
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
            state = self._outcome(reset, xyz, quat, world.gripper_state()[0], speed)
        except UnstableTwinError:
            return self._failed(world, reset, {'unstable': True}, obs, action)
        return EpisodeResult(self.success(state), self.reward(state), self.error(state),
                             obs[None], action[None], state['object_xy'], state['object_yaw'],
                             {'turn': plan['turn'], 'jaw_on_box': held,
                              'upright': bool(state['object_up_z'] > 0.95),
                              'height_error': state['object_z'] - state['goal_z']})

    def _failed(self, world, reset, info, obs=None, action=None) -> EpisodeResult:
        xyz, quat = scored_pose(world)
        state = self._outcome(reset, xyz, quat, self.jaw.lower, 0.0)
        obs = np.zeros((0, 3)) if obs is None else obs[None]
        action = np.zeros((0, 4)) if action is None else action[None]
        return EpisodeResult(False, self.reward(state), self.error(state), obs, action,
                             state['object_xy'], state['object_yaw'], info)

    # ---------------------------------------------------------------- demonstrations
    def scripted_demo_policy(self, reset: ResetSample, rng: np.random.Generator):
        """The scripted grasp expert (``centre_grasp``): close on the observed centre, release
        over the target's centre, with a Gaussian place offset of ``noise`` (m)."""
        noise = self.declared['expert_params']['noise']
        offset = rng.normal(0.0, noise, 2)

        def policy(obs):
            return np.array([0.0, 0.0, *np.clip(offset, -self.cfg.offset_max,
                                                self.cfg.offset_max)])
        return policy



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

    def arrange(self, world, reset: ResetSample) -> None:
        """The base at rest on the table at the goal point, turned like the box."""
        z = self.cfg.table_height + self.cfg.base_size[2] / 2
        world.place_object(self.cfg.base_id, [*reset.goal_xy, z], reset.object_yaw)
