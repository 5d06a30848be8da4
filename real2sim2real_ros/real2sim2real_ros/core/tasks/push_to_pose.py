"""push_to_pose: push a box to a goal position (and yaw) in closed loop, with disturbances.

Control at ``control_rate`` Hz: each tick the policy sees the box pose relative to the goal
and the tool tip relative to the box, and commands a planar tip velocity. The tip target is
integrated from the commands (not from the measured tip, which lags), held at the pushing
height with the tool down, turned into joints by damped-least-squares IK and sent as a
one-point trajectory for the tick. A start pose is drawn around a nominal one, and once per
episode the box gets a kick (a planar velocity) at a random tick.

Observation (6): [box - goal x, y (m), sin, cos of (box yaw - goal yaw), tip - box x, y (m)].
Action (2): tip velocity x, y (m/s). Success: box within ``position_tolerance`` of the goal
and its yaw within ``yaw_tolerance`` (a single round pusher controls yaw only loosely, so the
default goal yaw is the start yaw plus a small change).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..twin import UnstableTwinError
from .base import (
    EpisodeResult,
    ResetSample,
    TaskError,
    check_action,
    task_config,
    wrap_angle,
)
from .kinematics import IKError, ToolDownIK
from .worlds import quat_yaw


@dataclass
class PushConfig:
    object_id: str = 'box_0'
    object_size: tuple[float, float, float] = (0.08, 0.06, 0.05)
    table_height: float = 0.0
    start_xy: tuple[float, float] = (0.48, 0.05)
    start_jitter: float = 0.03           # m
    start_yaw_jitter: float = 0.3        # rad
    goal_forward: tuple[float, float] = (0.08, 0.15)   # m along +x from the start
    goal_lateral: float = 0.05           # m, +- along y
    goal_yaw_change: float = 0.15        # rad, +-
    position_tolerance: float = 0.03     # m
    yaw_tolerance: float = 0.4           # rad
    control_rate: float = 10.0           # Hz
    max_steps: int = 60
    max_speed: float = 0.12              # m/s per axis
    push_height: float = 0.008           # m, the pusher ball's lowest point above the table
    tool_radius: float = 0.015           # m, the cell arm's ball-ended pusher
    kick_speed: float = 0.15             # m/s, the disturbance's planar velocity
    kick_probability: float = 1.0        # chance of one kick per episode
    workspace: tuple[float, float, float, float] = (0.28, 0.85, -0.35, 0.35)  # x/y limits

    def __post_init__(self):
        if self.control_rate <= 0 or self.max_steps < 1 or self.max_speed <= 0:
            raise TaskError('push_to_pose: control_rate, max_steps, max_speed must be > 0')


class PushToPose:
    name = 'push_to_pose'
    observation_dim = 6
    action_dim = 2
    one_shot = False

    def __init__(self, robot, config: PushConfig | dict | None = None):
        self.cfg = task_config(PushConfig, config, self.name)
        self.robot = robot
        self.ik = ToolDownIK(robot)
        self.object_id = self.cfg.object_id
        self.action_low = np.full(2, -self.cfg.max_speed)
        self.action_high = np.full(2, self.cfg.max_speed)

    def config(self) -> dict:
        return {'task': self.name, **asdict(self.cfg)}

    @property
    def dt(self) -> float:
        return 1.0 / self.cfg.control_rate

    @property
    def object_z(self) -> float:
        return self.cfg.table_height + self.cfg.object_size[2] / 2

    # ---------------------------------------------------------------- episode start
    def sample_reset(self, rng: np.random.Generator) -> ResetSample:
        c = self.cfg
        xy = np.asarray(c.start_xy) + rng.uniform(-c.start_jitter, c.start_jitter, 2)
        yaw = rng.uniform(-c.start_yaw_jitter, c.start_yaw_jitter)
        goal = xy + np.array([rng.uniform(*c.goal_forward),
                              rng.uniform(-c.goal_lateral, c.goal_lateral)])
        goal_yaw = wrap_angle(yaw + rng.uniform(-c.goal_yaw_change, c.goal_yaw_change))
        kick = rng.random() < c.kick_probability
        ang = rng.uniform(0, 2 * np.pi)
        extra = {'kick_step': int(rng.integers(5, c.max_steps // 2)) if kick else -1,
                 'kick_velocity': (c.kick_speed * np.array([np.cos(ang), np.sin(ang)])).tolist(),
                 'tip_start_xy': (xy - np.array([0.09, 0.0])).tolist()}
        return ResetSample(xy, yaw, goal, goal_yaw, extra)

    def observation(self, state: dict) -> np.ndarray:
        d = np.asarray(state['object_xy']) - state['goal_xy']
        dyaw = state['object_yaw'] - state['goal_yaw']
        t = np.asarray(state['tip_xy']) - state['object_xy']
        return np.array([d[0], d[1], np.sin(dyaw), np.cos(dyaw), t[0], t[1]])

    # ---------------------------------------------------------------- outcome
    def error(self, state: dict) -> float:
        return float(np.linalg.norm(np.asarray(state['object_xy']) - state['goal_xy']))

    def success(self, state: dict) -> bool:
        yaw_err = abs(wrap_angle(state['object_yaw'] - state['goal_yaw']))
        upright = abs(state['object_z'] - self.object_z) < 0.01
        return bool(upright and self.error(state) <= self.cfg.position_tolerance
                    and yaw_err <= self.cfg.yaw_tolerance)

    def reward(self, state: dict, action=None) -> float:
        yaw_err = abs(wrap_angle(state['object_yaw'] - state['goal_yaw']))
        return float(self.success(state)) - self.error(state) / 0.1 - 0.1 * yaw_err

    # ---------------------------------------------------------------- running
    def _state(self, world, reset, tip_xy) -> dict:
        xyz, quat = world.object_pose()
        return {'object_xy': np.asarray(xyz[:2]), 'object_z': float(xyz[2]),
                'object_yaw': quat_yaw(quat), 'goal_xy': reset.goal_xy,
                'goal_yaw': reset.goal_yaw, 'tip_xy': np.asarray(tip_xy)}

    def run_episode(self, world, reset: ResetSample, policy) -> EpisodeResult:
        """Closed loop on a backend (TwinWorld or CellWorld) until success or max_steps."""
        c = self.cfg
        z = c.table_height + c.push_height
        tip = np.asarray(reset.extra.get('tip_start_xy', reset.object_xy - [0.09, 0.0]), float)
        q = self.ik.solve([*tip, z])
        world.reset(q, [*reset.object_xy, self.object_z], reset.object_yaw)
        obs_log, act_log, rewards = [], [], []
        state = self._state(world, reset, tip)
        info = {'steps': 0, 'unstable': False, 'ik_failures': 0}
        lo_x, hi_x, lo_y, hi_y = c.workspace
        try:
            for k in range(c.max_steps):
                if k == reset.extra.get('kick_step', -1):
                    world.kick_object(reset.extra['kick_velocity'])
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
        ok = self.success(state) and not info['unstable']
        return EpisodeResult(ok, float(np.sum(rewards)), self.error(state),
                             np.array(obs_log).reshape(-1, self.observation_dim),
                             np.array(act_log).reshape(-1, self.action_dim),
                             state['object_xy'], state['object_yaw'], info)

    # ---------------------------------------------------------------- demonstrations
    def scripted_demo_policy(self, reset: ResetSample, rng: np.random.Generator):
        """A pushing controller: get behind the box on the line to the goal (going around it
        if on the wrong side), then push along the line while steering back onto it."""
        c = self.cfg
        reach = max(c.object_size[:2]) / 2 + c.tool_radius
        gain = float(np.exp(rng.normal(0.0, 0.1)))

        def policy(obs):
            to_goal = -obs[:2]
            dist = np.linalg.norm(to_goal)
            u = to_goal / max(dist, 1e-6)
            n = np.array([-u[1], u[0]])
            tip_rel = obs[4:6]                        # tip - box
            behind = -(tip_rel @ u)                   # > 0 when the tip is behind the box
            lateral = tip_rel @ n
            if behind < reach - 0.005:                # wrong side: go around, sideways first
                side = np.sign(lateral) if abs(lateral) > 1e-3 else 1.0
                target = -u * (reach + 0.03) + side * n * (reach + 0.03) * (
                    abs(lateral) < reach + 0.02)
                v = 1.5 * (target - tip_rel)
            elif abs(lateral) > 0.01:                 # behind but off the line: line up
                v = 1.5 * (-lateral * n) + 0.3 * (-(behind - reach - 0.01)) * -u
            else:                                     # push, slowing near the goal
                v = u * min(c.max_speed, 1.2 * dist + 0.02) - 1.0 * lateral * n
            return np.clip(gain * v, -c.max_speed, c.max_speed)
        return policy
