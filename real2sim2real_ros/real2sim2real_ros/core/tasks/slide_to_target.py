"""slide_to_target: strike a box once so that it slides and stops inside a target circle.

The strike is a push-and-release, as on a shuffleboard: the tool (pointing down, its ball end
5 mm above the table) creeps into contact behind the box on the line from the box to the
target, accelerates WITH the box over ``push_length`` to the commanded speed and then brakes
harder than friction can decelerate the box, so the box leaves the tool at the strike speed
and slides ``~ v^2 / (2 mu g)``. Touching at creep speed instead of hitting keeps the launch
repeatable (a 1 m/s impact on a rounded, off-centre box scattered the launch speed by +-30%).
The speed that lands the box on the target therefore depends on the sliding friction (and,
through the servo's give while pushing, on the mass and the arm's gains and latency): a
policy tuned in a twin with the wrong friction misses.

Action: [strike speed (m/s), direction offset (rad) from the box-to-target line].
Observation: [distance box->target (m), heading of the target (rad), box yaw relative to
that heading (rad)]. Success: the box ends within ``success_radius`` of the target, upright.
Start and goal distributions, success, reward and the expert's parameters are declared in
config/tasks/slide_to_target.yaml (core/tasks/spec.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..geometry import quat_yaw, wrap_angle, yaw_quat
from ..object_tracking import footprint_yaw_period
from ..twin import UnstableTwinError
from .base import (
    EpisodeResult,
    ResetSample,
    TaskError,
    check_action,
)
from .kinematics import ToolDownIK
from .spec import DeclaredTask
from .worlds import applied_parameters, observed_start, scored_pose

G = 9.81


@dataclass
class SlideConfig:
    """slide_to_target settings: the object, start and goal distributions, success radius."""
    object_id: str = 'box_0'
    object_size: tuple[float, float, float] = (0.08, 0.06, 0.05)   # a cylinder: (d, d, h)
    object_shape: str = 'box'            # or an upright 'cylinder' (struck on its side)
    table_height: float = 0.0
    start_xy: tuple[float, float] = (0.48, 0.10)
    start_jitter: float = 0.02           # m, uniform box half-width around start_xy
    yaw_jitter: float = 0.15             # rad, box yaw about the strike heading
    distance_range: tuple[float, float] = (0.10, 0.18)   # m, box -> target
    heading_range: tuple[float, float] = (-0.35, 0.35)   # rad, target direction about +x
    success_radius: float = 0.03         # m
    speed_range: tuple[float, float] = (0.2, 1.8)        # m/s
    direction_offset_max: float = 0.15   # rad
    tool_radius: float = 0.015           # m, the cell arm's ball-ended pusher
    strike_height: float = 0.005         # m, the ball's lowest point above the table (it
    #                                      touches the box 20 mm up, below its centre of mass)
    approach_gap: float = 0.01           # m crept at creep_speed into contact
    creep_speed: float = 0.05            # m/s
    push_length: float = 0.03            # m accelerated with the box to the strike speed
    #                                      (short: the free slide, which friction decides,
    #                                      is most of the distance)
    cruise_time: float = 0.02            # s at the strike speed before the stop (a clean release)
    approach_height: float = 0.08        # m: the arm comes down onto q_start from this high
    stop_decel: float = 25.0             # m/s^2, well above mu g for any plausible mu
    settle_time: float = 1.2             # s after the tool stops, for the box to stop
    waypoint_dt: float = 0.01            # s between trajectory points
    demo_friction: float = 0.5           # the friction a scripted demonstrator assumes
    demo_spread: float = 0.45            # log-normal spread of the demonstrator's speed
    velocity_margin: float = 0.98        # of the joint velocity limits the strike's cubic
    #                                      reference may reach (plan() slows it down to fit)
    twin_rest_offset: tuple[float, float] = (0.0, 0.0)   # m (along, across the strike):
    #     added to an upright object's rest in a twin, never on a cell: the bias of the
    #     twin's rests against a cell's tracked ones (evaluation/deployment_refit.py)

    def __post_init__(self):
        lo, hi = self.speed_range
        if not 0 < lo < hi:
            raise TaskError(f'slide_to_target: speed_range {self.speed_range} must be 0 < lo < hi')
        d0, d1 = self.distance_range
        if not 0 < d0 <= d1:
            raise TaskError(f'slide_to_target: distance_range {self.distance_range} invalid')
        if self.success_radius <= 0:
            raise TaskError('slide_to_target: success_radius must be > 0')
        if len(self.twin_rest_offset) != 2 or not np.all(np.isfinite(self.twin_rest_offset)):
            raise TaskError(f'slide_to_target: twin_rest_offset {self.twin_rest_offset} must '
                            'be two finite numbers (m along, across the strike)')
        if self.object_shape not in ('box', 'cylinder'):
            raise TaskError(f'slide_to_target: object_shape {self.object_shape!r} must be '
                            f"'box' or 'cylinder'")


class SlideToTarget(DeclaredTask):
    """Strike the object once so it slides to a goal point (one-shot: heading and speed).

    Start, goal, success, reward and the expert's parameters: config/tasks/
    slide_to_target.yaml (or the ``spec`` given: a TaskSpec or a YAML path; spec.py)."""
    name = 'slide_to_target'
    observation_dim = 3
    action_dim = 2
    one_shot = True

    def __init__(self, robot, config: SlideConfig | dict | None = None, spec=None):
        self.bind_spec(config, spec)
        self.robot = robot
        self.ik = ToolDownIK(robot)
        c = self.cfg
        self.action_low = np.array([c.speed_range[0], -c.direction_offset_max])
        self.action_high = np.array([c.speed_range[1], c.direction_offset_max])

    # ---------------------------------------------------------------- episode start
    def sample_reset(self, rng: np.random.Generator) -> ResetSample:
        """A random start pose and a goal at a random heading and distance, drawn from ``rng``
        (the spec's start and goal)."""
        xy, yaw, goal, _ = self.sample_start_goal(rng)
        return ResetSample(xy, yaw, goal)

    def observation(self, state: dict) -> np.ndarray:
        """(distance to goal m, heading to goal rad, object yaw relative to that heading rad).
        The relative yaw is what a depth tracker can know: a box's modulo its outline's
        symmetry (a half turn, a quarter for a square footprint: the tracker's own
        ``footprint_yaw_period``), centred on 0; a cylinder's 0 (no yaw). A twin's true yaw
        and a cell's tracked one then agree: with the raw yaw, a box struck with its heading
        beyond +-pi/2 was observed pi off its training range on the cell (wide-prior cell
        wide_6: 0/10 with the tracker, 10/10 with the true pose)."""
        d = np.asarray(state['goal_xy']) - np.asarray(state['object_xy'])
        heading = float(np.arctan2(d[1], d[0]))
        return np.array([np.linalg.norm(d), heading,
                         self._relative_yaw(state['object_yaw'] - heading)])

    def _relative_yaw(self, a: float) -> float:
        if self.cfg.object_shape == 'cylinder':
            return 0.0
        period = footprint_yaw_period(self.cfg.object_shape, self.cfg.object_size)
        return float((a + 0.5 * period) % period - 0.5 * period)

    # ---------------------------------------------------------------- outcome
    def upright(self, state: dict) -> bool:
        """On the table, right way up (a box that tipped onto a side is a failure)."""
        return bool(abs(state['object_z'] - self.object_z) < 0.01
                    and state.get('object_up_z', 1.0) > 0.95)

    # ---------------------------------------------------------------- the strike
    def plan(self, reset: ResetSample, action) -> dict:
        """The strike as joint motion: q_start (rest pose behind the box) and a trajectory."""
        c = self.cfg
        speed, offset = check_action(self, action)
        d = reset.goal_xy - reset.object_xy
        theta = float(np.arctan2(d[1], d[0])) + offset
        u = np.array([np.cos(theta), np.sin(theta)])
        hx, hy = c.object_size[0] / 2, c.object_size[1] / 2
        rel = theta - reset.object_yaw
        if c.object_shape == 'cylinder':
            contact = hx + c.tool_radius
        else:
            contact = abs(hx * np.cos(rel)) + abs(hy * np.sin(rel)) + c.tool_radius
        start = reset.object_xy - u * (contact + c.approach_gap)
        # s(t): creep into contact, constant acceleration with the box up to `speed`, a short
        # cruise, then a hard stop that releases it.
        v0 = min(c.creep_speed, speed)
        t_creep = c.approach_gap / v0
        a_push = (speed ** 2 - v0 ** 2) / (2 * c.push_length)
        t_push = (speed - v0) / a_push if a_push > 0 else c.push_length / speed
        t_cruise = c.cruise_time
        t_dec = speed / c.stop_decel
        t_end = t_creep + t_push + t_cruise + t_dec
        t = np.arange(1, int(np.ceil(t_end / c.waypoint_dt)) + 1) * c.waypoint_dt
        t = np.append(t[t < t_end - 1e-6], t_end)
        tp = t - t_creep
        tc = tp - t_push
        td = tc - t_cruise
        s_push = c.approach_gap + c.push_length
        s = np.where(t <= t_creep, v0 * t,
                     np.where(tc <= 0, c.approach_gap + v0 * tp + 0.5 * a_push * tp ** 2,
                              np.where(td <= 0, s_push + speed * tc,
                                       s_push + speed * (t_cruise + td)
                                       - 0.5 * c.stop_decel * td ** 2)))
        z = c.table_height + c.strike_height
        tip = np.column_stack([start + np.outer(s, u), np.full(len(t), z)])
        q_start = self.ik.solve([*start, z])
        q_above = self.ik.solve([*start, z + c.approach_height], q_start)
        q = self.ik.solve_path(tip, q_start)
        qd = np.gradient(np.vstack([q_start, q]), np.concatenate([[0.0], t]), axis=0)[1:]
        qd[-1] = 0.0
        scale = self.time_scale(q_start, t, q, qd)
        if scale > 1.0:
            # The cubic reference the controller follows through these points (and the
            # executor's validator checks, exactly) would exceed a joint's velocity limit:
            # the same path, slower (a near-limit strike is as fast as this arm goes).
            t, qd, t_end = t * scale, qd / scale, t_end * scale
        return {'q_start': q_start, 'q_above': q_above, 'times': t, 'positions': q,
                'velocities': qd, 'time_scale': scale,
                'duration': float(t_end + c.settle_time), 'strike_heading': theta}

    def time_scale(self, q_start, t, q, qd) -> float:
        """The factor (>= 1) to stretch the strike's times by so that the cubic reference
        through (0, q_start, rest), (t, q, qd) keeps every joint within
        ``velocity_margin`` x its velocity limit (1.0: within already). Stretching the
        times by k divides every reference velocity by k exactly."""
        from ..joint_trajectory import Spline
        vmax = np.asarray(self.robot.velocity_limits, float) * self.cfg.velocity_margin
        if not np.all(np.isfinite(vmax)) or np.any(vmax <= 0):
            return 1.0
        spline = Spline.through(np.concatenate([[0.0], t]), np.vstack([q_start, q]),
                                np.vstack([np.zeros_like(q_start), qd]), kind='cubic')
        peak = spline.extrema().speed.max(axis=0)
        return float(max(1.0, np.max(peak / vmax)))

    def _twin_rest(self, state: dict, heading: float) -> dict:
        """A twin's outcome with ``twin_rest_offset`` added (upright objects only)."""
        a, c = self.cfg.twin_rest_offset
        if (a == 0.0 and c == 0.0) or not self.upright(state):
            return state
        u = np.array([np.cos(heading), np.sin(heading)])
        return {**state, 'object_xy': state['object_xy'] + a * u + c * np.array([-u[1], u[0]])}

    def _outcome(self, reset: ResetSample, xyz, quat) -> dict:
        w, x, y, _ = np.asarray(quat, float) / np.linalg.norm(quat)
        return {'object_xy': np.asarray(xyz[:2], float), 'object_z': float(xyz[2]),
                'object_yaw': quat_yaw(quat), 'goal_xy': reset.goal_xy,
                'object_up_z': float(1 - 2 * (x * x + y * y))}   # box z axis . world z

    def run_episode(self, world, reset: ResetSample, policy) -> EpisodeResult:
        """One strike on a backend (TwinWorld or CellWorld). The policy and the strike's plan
        see the start as the backend observes it (a cell's tracker); the outcome is scored on
        the backend's scored pose. Not seen at the start: a failure (info 'not_seen')."""
        true_xyz = [*reset.object_xy, self.object_z]
        seen = observed_start(world, true_xyz, reset.object_yaw)
        if seen is None:
            xyz, quat = scored_pose(world)
            state = self._outcome(reset, xyz, quat)
            return EpisodeResult(False, self.reward(state), self.error(state),
                                 np.zeros((0, self.observation_dim)),
                                 np.zeros((0, self.action_dim)), state['object_xy'],
                                 state['object_yaw'], {'not_seen': True, 'upright': True})
        view = replace(reset, object_xy=np.asarray(seen[0][:2], float),
                       object_yaw=float(seen[1]))
        obs = self.observation(self.initial_state(view))
        action = check_action(self, policy(obs))
        plan = self.plan(view, action)
        world.reset(plan['q_start'], true_xyz, reset.object_yaw, via=plan['q_above'])
        try:
            world.execute(plan['times'], plan['positions'], plan['velocities'],
                          plan['duration'])
            xyz, quat = scored_pose(world)
            state = self._outcome(reset, xyz, quat)
            if getattr(world, 'kind', None) != 'cell':
                state = self._twin_rest(state, plan['strike_heading'])
        except UnstableTwinError:
            state = self._lost(reset)
        return EpisodeResult(self.success(state), self.reward(state), self.error(state),
                             obs[None], action[None], state['object_xy'], state['object_yaw'],
                             {'strike_heading': plan['strike_heading'],
                              'upright': self.upright(state)})

    def hindsight_relabel(self, reset: ResetSample, result: EpisodeResult):
        """(observation, action) for which this strike WAS right: the goal moved to where the
        box stopped. None when the box was lost or barely moved. In a deterministic twin this
        turns every replayed demonstration, hit or miss, into a correct example."""
        moved = np.asarray(result.final_object_xy) - reset.object_xy
        if not result.info.get('upright', False) or \
                np.linalg.norm(moved) < self.cfg.distance_range[0] / 2:
            return None
        obs = self.observation({'object_xy': reset.object_xy, 'object_yaw': reset.object_yaw,
                                'goal_xy': reset.object_xy + moved})
        offset = wrap_angle(result.info['strike_heading'] - obs[1])
        if abs(offset) > self.cfg.direction_offset_max:
            return None
        return obs, np.array([result.actions[0, 0], offset])

    def twin_outcomes(self, twin, reset: ResetSample, action,
                      param_samples: list[dict] | None = None) -> list[dict]:
        """Final states of one strike in ``twin`` once per parameter sample (the fast path for
        training). A rollout that blows up counts as the object lost (z far off)."""
        plan = self.plan(reset, action)
        out = []
        for params in (param_samples or [{}]):
            with applied_parameters(twin, params):
                try:
                    res = twin.rollout(
                        plan['q_start'], None, plan['times'], plan['positions'],
                        traj_velocities=plan['velocities'], duration=plan['duration'],
                        sample_times=[plan['duration']],
                        object_poses={self.object_id: ([*reset.object_xy, self.object_z],
                                                       yaw_quat(reset.object_yaw))})
                except UnstableTwinError:
                    out.append(self._lost(reset))
                    continue
            k = res.object_ids.index(self.object_id)
            p = res.object_poses[0, -1, k]
            out.append(self._twin_rest(self._outcome(reset, p[:3], p[3:]),
                                       plan['strike_heading']))
        return out

    def _lost(self, reset: ResetSample) -> dict:
        return {'object_xy': np.asarray(reset.object_xy) + 1.0, 'object_z': -1.0,
                'object_yaw': 0.0, 'goal_xy': reset.goal_xy, 'object_up_z': 0.0}

    # ---------------------------------------------------------------- demonstrations
    def scripted_demo_policy(self, reset: ResetSample, rng: np.random.Generator):
        """A demonstrator with a rough physics model: v = sqrt(2 mu g d) for an assumed
        friction, with a multiplicative spread (a human's strikes are not exact): the
        spec's expert ``friction_model_strike`` with its ``friction`` and ``spread``. It
        aims off a twin's ``twin_rest_offset`` (within ``direction_offset_max``)."""
        c = self.cfg
        p = self.declared['expert_params']
        scale = float(np.exp(rng.normal(0.0, p['spread'])))
        along, across = c.twin_rest_offset

        def policy(obs):
            slide = max(obs[0] - along - c.push_length, 0.01)
            aim = -np.arctan2(across, max(obs[0], 1e-3))
            return np.array([np.sqrt(2 * p['friction'] * G * slide) * scale,
                             float(np.clip(aim, -c.direction_offset_max,
                                           c.direction_offset_max))])
        return policy
