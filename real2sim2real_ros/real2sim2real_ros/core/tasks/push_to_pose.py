"""push_to_pose: push a box to a goal position and yaw in closed loop, with disturbances.

Control at ``control_rate`` Hz: each tick the policy sees the box pose relative to the goal,
the tool tip relative to the box and the box's heading, and commands a planar tip velocity.
The tip target is integrated from the commands (not from the measured tip, which lags), held
at the pushing height with the tool down (the ball end ``push_height`` above the table, its
centre below the box's centre of mass), turned into joints by damped-least-squares IK and
sent as a one-point trajectory for the tick.

Episodes: the box starts around ``start_xy`` (position and yaw jittered), the tool behind it
(jittered too; on a cell the arm comes down onto that start from ``approach_height``), the
goal ``goal_forward`` ahead and up to ``goal_lateral`` to the side, with a yaw up to
``goal_yaw_change`` from the start's (more than the tolerance: the yaw must be steered);
once per episode, mid-push (tick in ``kick_steps``), the box gets a kick (a planar velocity of
``kick_speed`` in a random direction) that the policy must recover from.

Observation (12): [box - goal x, y (m), sin, cos of (box yaw - goal yaw), tip - box x, y (m),
sin, cos of the box yaw] in the world frame, then box - goal and tip - box again in the box's
own frame (redundant, but where the box's faces are is what a pushing policy decides on).
Action (2): tip velocity x, y (m/s, world frame). Success: the box upright, within
``position_tolerance`` of the goal AND its yaw within ``yaw_tolerance`` of the goal yaw.
Start and goal distributions, horizon (``max_steps``), success, reward and the expert's
parameters are declared in config/tasks/push_to_pose.yaml (core/tasks/spec.py).

The scripted expert (:meth:`PushToPose.expert_action`) is a function of the observation, so
it labels any state (DAgger, core/policies/dagger.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..geometry import quat_yaw, wrap_angle
from ..twin import UnstableTwinError
from .base import (
    EpisodeResult,
    ResetSample,
    TaskError,
    check_action,
)
from .kinematics import IKError, ToolDownIK
from .spec import DeclaredTask
from .worlds import ObservationLost, observed_start, scored_pose


@dataclass
class PushConfig:
    """push_to_pose settings: object, start and goal distributions, tolerances, control rate."""
    object_id: str = 'box_0'
    object_size: tuple[float, float, float] = (0.08, 0.06, 0.05)
    table_height: float = 0.0
    start_xy: tuple[float, float] = (0.48, 0.05)
    start_jitter: float = 0.03           # m
    start_yaw_jitter: float = 0.3        # rad
    tip_start_behind: float = 0.09       # m behind the box centre along -x
    tip_start_jitter: float = 0.015      # m, +- (x and y)
    goal_forward: tuple[float, float] = (0.08, 0.15)   # m along +x from the start
    goal_lateral: float = 0.05           # m, +- along y
    goal_yaw_change: float = 0.35        # rad, +- (beyond the tolerance: yaw is steered)
    position_tolerance: float = 0.03     # m
    yaw_tolerance: float = 0.25          # rad
    control_rate: float = 10.0           # Hz
    max_steps: int = 60
    max_speed: float = 0.12              # m/s per axis
    push_height: float = 0.008           # m, the pusher ball's lowest point above the table
    tool_radius: float = 0.015           # m, the cell arm's ball-ended pusher
    kick_speed: float = 0.25             # m/s, the disturbance's planar velocity
    kick_probability: float = 1.0        # chance of one kick per episode
    kick_steps: tuple[int, int] = (6, 16)   # the kick's tick, drawn in [lo, hi): mid-push
    approach_height: float = 0.06        # m: on a cell the tool comes down from this high
    workspace: tuple[float, float, float, float] = (0.28, 0.85, -0.35, 0.35)  # x/y limits
    # The scripted expert (expert_action).
    leg_tolerance: float = 0.015         # m: a box-frame axis left to push beyond this
    yaw_gain: float = 0.06               # m of contact offset per rad of yaw error
    approach_gain: float = 1.0           # 1/s: push speed = gain x remaining + min speed
    min_push_speed: float = 0.025        # m/s
    orbit_radial_gain: float = 1.5       # 1/s: orbiting, the tip's pull to the orbit radius
    align_band: tuple[float, float] = (0.006, 0.016)   # m off the contact point: push .. back off
    align_gain: float = 4.0              # 1/s: sideways onto the contact point

    def __post_init__(self):
        if self.control_rate <= 0 or self.max_steps < 1 or self.max_speed <= 0:
            raise TaskError('push_to_pose: control_rate, max_steps, max_speed must be > 0')
        lo, hi = self.kick_steps
        if not 0 <= lo < hi:
            raise TaskError(f'push_to_pose: kick_steps must be 0 <= lo < hi, got {lo}, {hi}')


class PushToPose(DeclaredTask):
    """Push the object to a goal position and yaw in closed loop (tool tip velocity actions).

    Start, goal, horizon, success, reward and the expert's parameters: config/tasks/
    push_to_pose.yaml (or the ``spec`` given: a TaskSpec or a YAML path; spec.py)."""
    name = 'push_to_pose'
    observation_dim = 12
    action_dim = 2
    one_shot = False

    def __init__(self, robot, config: PushConfig | dict | None = None, spec=None):
        self.bind_spec(config, spec)
        self.robot = robot
        self.ik = ToolDownIK(robot)
        self.action_low = np.full(2, -self.cfg.max_speed)
        self.action_high = np.full(2, self.cfg.max_speed)

    @property
    def dt(self) -> float:
        """Control period in s."""
        return 1.0 / self.cfg.control_rate

    # ---------------------------------------------------------------- episode start
    def sample_reset(self, rng: np.random.Generator) -> ResetSample:
        """A random start pose, goal pose and tip start drawn from ``rng``."""
        c = self.cfg
        xy, yaw, goal, goal_yaw = self.sample_start_goal(rng)
        # The kick and the tool's start (drawn after the declared start and goal).
        kick = rng.random() < c.kick_probability
        ang = rng.uniform(0, 2 * np.pi)
        tip = xy - [c.tip_start_behind, 0.0] + rng.uniform(-c.tip_start_jitter,
                                                           c.tip_start_jitter, 2)
        extra = {'kick_step': int(rng.integers(*c.kick_steps)) if kick else -1,
                 'kick_velocity': (c.kick_speed * np.array([np.cos(ang), np.sin(ang)])).tolist(),
                 'tip_start_xy': tip.tolist()}
        return ResetSample(xy, yaw, goal, goal_yaw, extra)

    def observation(self, state: dict) -> np.ndarray:
        """The 12-vector observation: object-goal offset, sin/cos yaw error, tip offset,
        sin/cos yaw, and both offsets in the object's frame (m, unitless)."""
        d = np.asarray(state['object_xy']) - state['goal_xy']
        yaw = state['object_yaw']
        dyaw = yaw - state['goal_yaw']
        t = np.asarray(state['tip_xy']) - state['object_xy']
        cs, sn = np.cos(yaw), np.sin(yaw)
        return np.array([d[0], d[1], np.sin(dyaw), np.cos(dyaw), t[0], t[1], sn, cs,
                         cs * d[0] + sn * d[1], -sn * d[0] + cs * d[1],
                         cs * t[0] + sn * t[1], -sn * t[0] + cs * t[1]])

    # ---------------------------------------------------------------- outcome
    def yaw_error(self, state: dict) -> float:
        """Absolute yaw error (rad) of the object to the goal yaw."""
        return abs(wrap_angle(state['object_yaw'] - state['goal_yaw']))

    # ---------------------------------------------------------------- running
    def _state(self, world, reset, tip_xy, scored: bool = False) -> dict:
        xyz, quat = scored_pose(world) if scored else world.object_pose()
        return {'object_xy': np.asarray(xyz[:2]), 'object_z': float(xyz[2]),
                'object_yaw': quat_yaw(quat), 'goal_xy': reset.goal_xy,
                'goal_yaw': reset.goal_yaw, 'tip_xy': np.asarray(tip_xy)}

    def start_tip(self, reset: ResetSample) -> np.ndarray:
        """The tool tip's start x, y (m) for ``reset``."""
        return np.asarray(reset.extra.get(
            'tip_start_xy', reset.object_xy - [self.cfg.tip_start_behind, 0.0]), float)

    def run_episode(self, world, reset: ResetSample, policy) -> EpisodeResult:
        """Closed loop on a backend (TwinWorld or CellWorld) until success or max_steps.
        ``info``: steps, yaw_error (final |box yaw - goal yaw|, rad), rewards (per step),
        final_observation (after the last step: what a return bootstraps from), kicked,
        unstable, ik_failures."""
        c = self.cfg
        z = c.table_height + c.push_height
        true_xyz = [*reset.object_xy, self.object_z]
        info = {'steps': 0, 'unstable': False, 'ik_failures': 0, 'kicked': False}
        seen = observed_start(world, true_xyz, reset.object_yaw)
        if seen is None:    # the executor would refuse: no pose to start from
            state = self._state(world, reset, self.start_tip(reset), scored=True)
            info.update(not_seen=True, yaw_error=self.yaw_error(state), rewards=[],
                        final_observation=self.observation(state))
            return EpisodeResult(False, 0.0, self.error(state),
                                 np.zeros((0, self.observation_dim)),
                                 np.zeros((0, self.action_dim)), state['object_xy'],
                                 state['object_yaw'], info)
        view = replace(reset, object_xy=np.asarray(seen[0][:2], float),
                       object_yaw=float(seen[1]))
        tip = self.start_tip(view)
        q = self.ik.solve([*tip, z])
        via = None
        if getattr(world, 'kind', '') == 'cell':   # a physical arm comes down onto the start
            via = self.ik.solve([*tip, z + c.approach_height], q)
        world.reset(q, true_xyz, reset.object_yaw, via=via)
        obs_log, act_log, rewards = [], [], []
        lo_x, hi_x, lo_y, hi_y = c.workspace
        try:
            # What the policy observes (a cell's tracker); the loop stops when IT says done.
            state = self._state(world, reset, tip)
            for k in range(self.horizon):
                if k == reset.extra.get('kick_step', -1):
                    world.kick_object(reset.extra['kick_velocity'])
                    info['kicked'] = True
                obs = self.observation(state)
                action = check_action(self, policy(obs))
                tip_next = np.clip(tip + action * self.dt, [lo_x, lo_y], [hi_x, hi_y])
                try:
                    q = self.ik.solve([*tip_next, z], q)
                    tip = tip_next
                except IKError:
                    info['ik_failures'] += 1
                world.execute([self.dt], q[None])
                # The policy sees where the tip is commanded to be (what the planner knows).
                state = self._state(world, reset, tip)
                obs_log.append(obs)
                act_log.append(action)
                rewards.append(self.reward(state, action))
                info['steps'] = k + 1
                if self.success(state):
                    break
        except UnstableTwinError:
            info['unstable'] = True
        except ObservationLost:
            info['observation_lost'] = True
        # The score: the backend's scored pose (a cell's truth), whatever the policy saw.
        final = state if info['unstable'] else self._state(world, reset, tip, scored=True)
        ok = self.success(final) and not info['unstable']
        info['yaw_error'] = self.yaw_error(final)
        info['rewards'] = rewards
        info['final_observation'] = self.observation(final)
        return EpisodeResult(ok, float(np.sum(rewards)), self.error(final),
                             np.array(obs_log).reshape(-1, self.observation_dim),
                             np.array(act_log).reshape(-1, self.action_dim),
                             final['object_xy'], final['object_yaw'], info)

    # ---------------------------------------------------------------- demonstrations
    def scripted_demo_policy(self, reset: ResetSample, rng: np.random.Generator):
        """The expert (:meth:`expert_action`, the spec's ``face_pushing``) with a per-episode
        log-normal speed gain of sigma ``gain_spread``."""
        gain = float(np.exp(rng.normal(0.0, self.declared['expert_params']['gain_spread'])))
        return lambda obs: self.expert_action(obs, gain)

    def _leg(self, g, p) -> int:
        """The box axis to push along (0: x, 1: y) for the goal offset ``g`` and the tip ``p``
        (box frame): x first, then y if still needed. The tip's place is the leg's memory: a
        tip lined up behind a face keeps pushing it down to ``leg_tolerance / 3``, a leg is
        only taken up beyond ``leg_tolerance`` (a hysteresis that the observation carries, so
        the expert stays a function of it)."""
        c = self.cfg
        half = np.array(c.object_size[:2], float) / 2
        lo, hi = c.leg_tolerance / 3, c.leg_tolerance

        def lined_up(axis):
            sign = 1.0 if g[axis] >= 0 else -1.0
            return (sign * p[axis] < -(half[axis] + c.tool_radius) + 0.006
                    and abs(p[1 - axis]) < half[1 - axis])
        in_x, in_y = lined_up(0), lined_up(1)
        if in_y and abs(g[1]) > lo and abs(g[0]) <= 2 * hi:
            return 1
        if abs(g[0]) > (lo if in_x else hi):
            return 0
        return 1 if abs(g[1]) > (lo if in_y else hi) else 0

    def _face_velocity(self, axis: int, g, p, yaw_err: float) -> np.ndarray:
        """Tip velocity (box frame) that pushes the box along ``axis`` towards the goal."""
        c = self.cfg
        half = np.array(c.object_size[:2], float) / 2
        r = c.tool_radius
        f = np.zeros(2)
        f[axis] = 1.0 if g[axis] >= 0 else -1.0
        tv = np.array([-f[1], f[0]])
        depth, width = half[axis], half[1 - axis]        # face distance, face half-width
        s, t = float(p @ f), float(p @ tv)
        stand_off = -(depth + r) - 0.012
        r_near = float(half.min()) + r
        r_orbit = float(np.hypot(*half)) + r + 0.012
        t_star = float(np.clip(c.yaw_gain * yaw_err, -(width - 0.01), width - 0.01))
        # Push / line-up field.
        miss = abs(t - t_star)
        backing = float(np.clip((miss - c.align_band[0]) / (c.align_band[1] - c.align_band[0]),
                                0.0, 1.0))
        v_fwd = min(c.max_speed, c.approach_gain * abs(g[axis]) + c.min_push_speed)
        v_s = (1.0 - backing) * v_fwd + backing * 4.0 * (stand_off - s)
        v_t = c.align_gain * (t_star - t)
        v_push = v_s * f + v_t * tv
        # Orbit field: radial hold at r_orbit, tangential towards straight behind the face.
        rho = float(np.hypot(s, t))
        psi = float(np.arctan2(t, -s))                   # 0: straight behind the face
        e_rho = p / max(rho, 1e-6)
        side = np.sign(psi) if abs(psi) > 1e-3 else 1.0
        e_back = side * np.array([-e_rho[1], e_rho[0]])  # the tangent that decreases |psi|
        out = float(np.clip((rho - r_near) / (r_orbit - r_near), 0.0, 1.0))
        v_orbit = c.orbit_radial_gain * (r_orbit - rho) * e_rho + c.max_speed * out * e_back
        corridor = float(np.arctan2(width, -stand_off))
        w = float(np.clip((abs(psi) - corridor) / 0.3, 0.0, 1.0))
        return (1.0 - w) * v_push + w * v_orbit

    def expert_action(self, obs, gain: float = 1.0) -> np.ndarray:
        """The scripted pushing controller: a function of the observation alone, so it can
        label any state a learner visits (DAgger).

        It pushes the box along its own axes (the goal offset in the box frame: first along
        the box's x, then, if still needed, along its y): pushing along a face's normal
        keeps the contact sticking on any friction, where a push at an angle to the face
        slides off it on a slippery box and turns it. Per face, three smooth fields (f: push
        direction, t: along the face):

        * orbit: a tip beside or in front of that face circles the box at a clearance no
          orientation of the box reaches, to the side behind it;
        * line up: a tip behind the face but off its contact point backs off to a stand-off
          and moves sideways there (sliding along a grippy face would drag and turn the box);
        * push: lined up, it pushes along f, slowing as the leg's remaining distance shrinks.

        Which leg: :meth:`_leg`. Yaw: pushing at an offset along +t from the face centre
        turns the box clockwise, so the contact point is ``yaw_gain x yaw error`` off centre:
        the yaw is steered to the goal's while the box travels, and a kick that turns it is
        taken out again."""
        c = self.cfg
        obs = np.asarray(obs, float)
        th = float(np.arctan2(obs[6], obs[7]))
        cs, sn = np.cos(th), np.sin(th)
        to_box = np.array([[cs, sn], [-sn, cs]])        # world -> box frame
        g = to_box @ -obs[:2]                            # goal - box, box frame
        p = to_box @ obs[4:6]                            # tip - box, box frame
        yaw_err = float(np.arctan2(obs[2], obs[3]))
        v_box = self._face_velocity(self._leg(g, p), g, p, yaw_err)
        v = np.array([[cs, -sn], [sn, cs]]) @ v_box      # box -> world frame
        return np.clip(gain * v, -c.max_speed, c.max_speed)
