"""Strike probes for object identification (ROS-free): push-and-release strikes planned from
the objects' measured poses.

One strike: the tool comes down behind the object (tilted back by ``tilt`` so that only the
front rim of its end face touches the object, low on its side, below the wider wrist), rests,
then pushes the object from a few millimetres away with a constant, gentle acceleration to the
strike speed ``v`` and brakes harder than friction can stop the object, so the object leaves
the tool at ``v`` and slides ``~ v^2 / (2 mu g)``. Known speed, no impact: the launch does not
depend on contact stiffness or restitution the twin cannot know, and the slide distance
measures the friction. Measured on the emulated cells (README, identification section):

* the tool of the default arm is only 0.04 m long under a 0.035 m radius wrist: a vertical
  tool at 12 mm pins a 5 cm box under the wrist when the arm dips on braking (the box stopped
  after 4 cm instead of sliding 8); tilting the tool keeps the wrist behind the contact;
* an impact strike launched the box 20% faster in the twin than on the cell (soft contacts
  restitute), a push-and-release at 3-4 m/s^2 matches to a few percent;
* pushing high on a box with a high friction rocks it onto its front edge; the tilted tool
  touches at ``tip_height + tool_radius sin(tilt)`` (21 mm), near the centre of mass.

Headings: a box is pushed along its long axis (onto a short face: the most stable way), the
short axis if that does not fit; a cylinder in any of 12 directions. A heading is taken when
the object's whole path (push plus the longest slide the friction bounds allow, plus margins)
stays on the table, clear of every other object and of the paths of objects struck before it
in the same probe, and the arm reaches every waypoint within its joint and speed limits.
Speed: the largest that keeps the slide at the friction's lower bound inside the free path,
at most the one that slides ``target_slide`` at the current estimate. A tall object (friction
up to the current upper bound x centre height > ``tip_margin`` x the distance to its front
edge) gets a gentle strike instead: released below the speed whose kinetic energy could lift
its centre of mass over the edge (:func:`tip_energy_speed`, with ``com_uncertainty`` and
``tip_speed_fraction``), without the lift on braking; the strikes after it use the fitted
friction's upper bound (core/sysid/stage.run_strikes refits between strike probes). One for
which even that cannot be done (too slow to move it measurably) is refused ('could tip over').

One probe execution strikes every object once (one trajectory: travel above the start at a
safe height, descend, rest, push, settle, lift, next object, back to where it started), so
the probe budget does not grow with the number of objects. :class:`StrikeInfo` records what
the fit needs to cut each strike out of the recording (times on the trajectory's axis).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace

import mujoco
import numpy as np

from .probes import Probe, ProbeError

__all__ = ['StrikeConfig', 'StrikeInfo', 'StrikeObject', 'StrikePlan', 'TableRegion',
           'TiltedToolIK', 'footprint_radius', 'plan_strike_probe', 'tip_energy_speed']

G = 9.81


@dataclass
class StrikeConfig:
    """How strikes are made. Lengths in m, speeds in m/s, times in s, angles in rad."""

    tool_radius: float = 0.02        # the cylindrical tool's radius
    wrist_radius: float = 0.035      # the widest link right above the tool
    tilt: float = math.radians(25)   # tool axis leans back from vertical by this much
    tip_height: float = 0.016        # tool tip (centre of the end face) above the table
    gap: float = 0.008               # tool rim to the object's face before the push
    creep_speed: float = 0.05        # the tool closes the gap (and 5 mm more) this slowly
    creep_extra: float = 0.005
    accel: float = 8.0               # push acceleration (the object rides the tool)
    decel: float = 15.0              # braking (> mu g for any mu <= 1: the object leaves)
    # At the strike speed this long before braking (slide_to_target's cruise_time: 0.02). The
    # arm's servo and latency lag its reference: without a cruise the tool reached the strike
    # speed ~20 ms after the planned release on the Drake cells, so the box left a tool that
    # was already braking (docs/model_gap.md, stop 51). 0: brake right after accelerating.
    cruise_time: float = 0.0
    lift: float = 0.015              # the tool rises this much while braking
    speed_min: float = 0.3
    speed_max: float = 1.2
    target_slide: float = 0.12       # slide wanted at the current friction estimate
    # Per strike probe (round r takes target_slides[r % len]; empty: target_slide for all):
    # slides wanted at spread speeds, so that a fit can tell a loss that grows with speed
    # (body/<id>/linear_damping) from friction, which one speed cannot (issue 15, docs/
    # model_gap.md stop 49). Off by default.
    target_slides: tuple = ()
    min_slide: float = 0.04          # a heading with less room at the estimate is not taken
    table_margin: float = 0.04       # object footprint to the table's edge
    clearance: float = 0.03          # between objects, paths and the wrist
    safe_height: float = 0.06        # travel height above the tallest object
    travel_speed: float = 0.3        # tool speed of the moves between strikes
    vertical_speed: float = 0.12     # tool speed going down and up
    dwell: float = 0.5               # at rest behind the object before the push
    settle_min: float = 1.0          # after the push, at least (plus the longest slide time)
    waypoint_dt: float = 0.01        # spacing of the push's trajectory points
    move_dt: float = 0.05            # spacing of the moves' points
    joint_speed_fraction: float = 0.8   # of the velocity limits, at most
    directions: int = 12             # headings tried for a cylinder
    # Azimuths (deg) of the tool's lean from straight back (the upper tool behind the contact),
    # in order. The first (straight back) is taken at a heading whenever it plans a strike
    # within the joint speed limits that passes the probe's checks; the others are tried
    # only where it reaches the strike but cannot move so (never for one out of reach): the
    # first of them fast enough for an informative slide (min_slide at the estimate), else
    # the fastest. The pusher is round, so a lean to the side touches the object the same
    # way, and lets an arm whose wrist would align at the straight-back lean (a Panda's
    # joints 5 and 7 at joint 6 = pi) keep its wrist away from that. Within +-90: never over
    # the object.
    leans_deg: tuple = (0.0, 45.0, -45.0, 90.0, -90.0)
    tip_margin: float = 0.75         # mu_max h_com <= this x (COM to the front edge): upright
    # Above tip_margin (a tall object, or the prior's friction bound): a gentle strike whose
    # release cannot tip it, 1/2 v^2 < g dh (tip_energy_speed), the centre of mass taken
    # com_uncertainty x the extent nearer the front edge and x the height higher than the
    # geometric centre, at tip_speed_fraction of that speed, with no lift while braking (a
    # rising tool drags a high-friction object's face up and tips it: measured, docs/
    # identification.md "Tall objects"); taken when it slides >= gentle_min_slide at the
    # estimate, at >= gentle_speed_min. Later strikes use the fitted friction's upper bound.
    # Off by default (the bench and the default cell's unit tests strike as before: with
    # them on, the default cell's box came out at friction 0.481 for 0.55 instead of 0.509,
    # its plans changed by the cylinder's gentle strikes); config/identification.yaml turns
    # them on for the node and the harness.
    gentle_strikes: bool = False
    com_uncertainty: float = 0.1
    tip_speed_fraction: float = 0.9
    gentle_speed_min: float = 0.15
    gentle_min_slide: float = 0.003
    gentle_lift: float = 0.0
    # ... and creeping this far past the planned contact (not creep_extra) before it
    # accelerates: the release speed of a gentle strike must be the planned one, so the tool
    # must already touch (the default arm's 15 mm ball meets the object ~9 mm later than a
    # tool_radius 0.02 flat tool would; measured: a 0.18 m/s strike never reached a 4 cm box)
    gentle_creep_extra: float = 0.02
    # A gentle strike expected to slide less than this at the estimate waits: it is made
    # only where nothing else is struck and either no strike has been made yet or every
    # object waits (a cell of such objects); where another object only lacks room, the
    # strikes stop. The fit budgets 10% of the slide + 5 mm per strike along its path
    # (ObjectFitOptions), so a 1 cm slide measures the friction to +-60% (1 sigma) a
    # strike, and the default cell's cylinder kept its prior interval after three such
    # strikes in every live run (docs/identification.md "Tall objects"). 0: off.
    gentle_informative_slide: float = 0.0
    # The friction range a strike is planned on while the fit has not identified it: the
    # fit's bounds with the upper one capped here (0: not capped). The fit may still leave
    # this range, the plan does not: a wider fit bound (a cell whose static friction exceeds
    # the dynamic, as Drake's, needs an effective value above 1.0) would otherwise count more
    # objects as tall at the first strike and strike them gently (results/model_gap/
    # friction_bound: friction and mass then traded off on a 1.3 kg cylinder).
    plan_friction_upper: float = 0.0

    def for_round(self, r: int) -> StrikeConfig:
        """The config of strike probe ``r``: its target slide from ``target_slides``."""
        if not self.target_slides:
            return self
        return replace(self, target_slide=self.target_slides[r % len(self.target_slides)])

    @classmethod
    def from_dict(cls, d: dict | None) -> StrikeConfig:
        """StrikeConfig from a dict (None: defaults; tilt_deg in degrees); ValueError on an unknown
        field."""
        d = dict(d or {})
        if 'tilt_deg' in d:
            d['tilt'] = math.radians(float(d.pop('tilt_deg')))
        known = {f.name for f in fields(cls)}
        extra = sorted(set(d) - known)
        if extra:
            raise ValueError(f'strike config: unknown field(s) {extra}; known {sorted(known)}')
        kinds = {'directions': int, 'gentle_strikes': bool,
                 'leans_deg': lambda v: tuple(float(x) for x in v),
                 'target_slides': lambda v: tuple(float(x) for x in v)}
        cfg = cls(**{k: kinds.get(k, float)(v) for k, v in d.items()})
        if cfg.cruise_time < 0 or cfg.cruise_time > 0.2:
            raise ValueError('strike config: cruise_time must be in [0, 0.2] s (the object '
                             'rides the tool at the strike speed that long)')
        if cfg.plan_friction_upper < 0:
            raise ValueError('strike config: plan_friction_upper must be >= 0 (0: the fit\'s '
                             'friction bound)')
        if any(not cfg.min_slide <= x < 1 for x in cfg.target_slides):
            raise ValueError(f'strike config: every target_slides entry must be in '
                             f'[min_slide, 1) m = [{cfg.min_slide:g}, 1) (a shorter slide is '
                             f'never planned)')
        if not cfg.leans_deg or any(abs(x) > 90 for x in cfg.leans_deg):
            raise ValueError('strike config: leans_deg needs at least one lean, each within '
                             '+-90 deg (the upper tool never over the object)')
        if not (0 < cfg.speed_min < cfg.speed_max and cfg.accel > 0 and cfg.decel > G
                and 0 <= cfg.tilt < math.radians(60)):
            raise ValueError('strike config: need 0 < speed_min < speed_max, accel > 0, '
                             'decel > 9.81 and 0 <= tilt < 60 deg')
        if not (0 <= cfg.com_uncertainty < 0.5 and 0 < cfg.tip_speed_fraction <= 1
                and 0 < cfg.gentle_speed_min and cfg.gentle_lift >= 0
                and cfg.gentle_creep_extra >= 0):
            raise ValueError('strike config: need 0 <= com_uncertainty < 0.5, '
                             '0 < tip_speed_fraction <= 1, gentle_speed_min > 0, '
                             'gentle_lift >= 0 and gentle_creep_extra >= 0')
        return cfg


def footprint_radius(shape: str, extents) -> float:
    """The footprint radius (m) of an object with full ``extents`` (cylinder: d, d, h): a
    cylinder's own radius (the same circle at any yaw; the half-diagonal of its d x d extents
    overstated it by 41%, and kept strikes from coming down beside it: wide_5's box lost its
    long-axis strikes to a 47 mm cylinder taken as 67 mm), anything else's half-diagonal (a
    box may turn while it slides)."""
    if shape == 'cylinder':
        return 0.5 * float(max(extents[0], extents[1]))
    return 0.5 * float(np.hypot(extents[0], extents[1]))


@dataclass
class StrikeObject:
    """An object as the planner sees it: geometry (reconstruction) and pose (tracker)."""

    id: str
    shape: str                       # 'box' or 'cylinder'
    extents: tuple                   # full extents along its axes (cylinder: d, d, h)
    xy: np.ndarray
    yaw: float
    z: float = 0.0                   # centre height

    @property
    def height(self) -> float:
        """Object height in m."""
        return float(self.extents[2])

    @property
    def radius(self) -> float:
        """Footprint radius (:func:`footprint_radius`)."""
        return footprint_radius(self.shape, self.extents)

    def half_extent_along(self, heading: float) -> float:
        """Half the object's extent along ``heading`` (rad, world) in m."""
        if self.shape != 'box':
            return 0.5 * float(self.extents[0])
        rel = heading - self.yaw
        return float(abs(0.5 * self.extents[0] * np.cos(rel))
                     + abs(0.5 * self.extents[1] * np.sin(rel)))


@dataclass
class TableRegion:
    """The table top's x, y centre and extents (m) and its height."""
    center: np.ndarray               # x, y of the top's centre
    size: np.ndarray                 # x, y extents (axis-aligned)
    height: float = 0.0

    def inside(self, xy: np.ndarray, margin: float) -> np.ndarray:
        """Per point of ``xy`` (N, 2), True when it lies on the table at least ``margin`` m inside
        its edges."""
        lo = np.asarray(self.center) - np.asarray(self.size) / 2 + margin
        hi = np.asarray(self.center) + np.asarray(self.size) / 2 - margin
        xy = np.atleast_2d(xy)
        return np.all((xy >= lo) & (xy <= hi), axis=1)


@dataclass
class StrikeInfo:
    """One strike inside a probe trajectory (times on the trajectory's time axis)."""

    object_id: str
    heading: float                   # rad, direction of the push in the world frame
    speed: float                     # m/s at release
    accel: float
    t_rest: float                    # the arm is at rest behind the object from here ...
    t_push: float                    # ... to here, where the push starts
    t_release: float                 # braking starts: the object leaves the tool
    t_end: float                     # end of the settle time (the object is at rest)
    push_length: float = 0.0         # m the object rides the tool (to the release)
    start_xy: list = field(default_factory=list)     # object position the plan assumed
    slide_range: list = field(default_factory=list)  # predicted slide at the friction bounds
    lean: float = 0.0                # rad, azimuth of the tool's tilt from straight back
    gentle: bool = False             # speed capped so that the release cannot tip it

    def to_dict(self) -> dict:
        """The strike's info as a JSON-ready dict."""
        d = asdict(self)
        return {k: (float(v) if isinstance(v, (float, np.floating)) else v)
                for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict) -> StrikeInfo:
        """StrikeInfo from a dict (unknown keys ignored)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass
class StrikePlan:
    """A strike probe: the joint trajectory, one StrikeInfo per strike, and the objects skipped and
    why."""
    probe: Probe
    strikes: list[StrikeInfo]
    skipped: dict[str, str]          # object id -> why it is not struck


class TiltedToolIK:
    """ToolDownIK (core/tasks/kinematics.py) with the tool leaning back from the heading.

    ``set_heading(h)``: the tool axis points down and forward along h, tilted by ``tilt``
    from vertical (its upper part, and the wrist, behind the contact point)."""

    def __init__(self, robot, tilt: float):
        from ..tasks.kinematics import ToolDownIK
        self.ik = ToolDownIK(robot)
        self._down = self.ik.rot_ready.copy()
        self.tilt = float(tilt)
        self.heading = 0.0
        # More than 6 arm joints: the tool-down task leaves a self-motion (ToolDownIK).
        self.redundant = len(robot.joint_names) > 6

    def set_heading(self, heading: float, lean: float = 0.0) -> None:
        """Point the tilted tool along ``heading`` (rad) for the next solves, its tilt turned
        by ``lean`` (rad, azimuth from straight back, positive counter-clockwise)."""
        self.heading = float(heading)
        a = heading + lean
        axis = np.array([-np.sin(a), np.cos(a), 0.0])
        quat, rot = np.zeros(4), np.zeros(9)
        mujoco.mju_axisAngle2Quat(quat, axis, -self.tilt)
        mujoco.mju_quat2Mat(rot, quat)
        self.ik.rot_ready = rot.reshape(3, 3) @ self._down

    def solve(self, target, q_seed=None) -> np.ndarray:
        """Joint positions (rad) putting the tool tip at ``target`` (m)."""
        return self.ik.solve(target, q_seed)

    def solve_path(self, points, q_seed=None) -> np.ndarray:
        """Joint positions (rad) per point of ``points`` (m), each seeded by the last."""
        return self.ik.solve_path(points, q_seed)

    def tip(self, q) -> np.ndarray:
        """The tool tip's position (m) at joints ``q``."""
        return self.ik.tip_position(q)

    def speed_ratio(self, q, tip_velocity, vlim) -> float:
        """max_j |qd_j| / vlim_j of the least-norm joint rates moving the tip at
        ``tip_velocity`` with the tilted tool held (large near a wrist singularity)."""
        return float(np.max(np.abs(self.ik.joint_rates(q, tip_velocity)) / vlim))

    def best_redundancy(self, target, q, checks, vlim, step: float = 0.3,
                        reach: float = 3.0) -> np.ndarray:
        """On a redundant arm, the joint positions for ``target`` along the arm's self-motion
        from q (walked both ways, ``step`` rad at a time up to ``reach``, within the joint
        limits) that need the least joint speed for the strike: the largest speed ratio over
        ``checks`` [(tip point, tip velocity)], each point solved from the candidate. q itself
        unless another is clearly better (10%). A non-redundant arm: q."""
        dirs = self.ik.self_motions(q) if self.redundant else ()
        if not len(dirs):
            return q

        def cost(c):
            worst = 0.0
            for point, vel in checks:
                try:
                    qc = self.ik.solve(point, c)
                except ValueError:   # IKError: that candidate does not reach the strike
                    return np.inf
                worst = max(worst, self.speed_ratio(qc, vel, vlim))
            return worst

        robot = self.ik.robot
        best, best_cost = q, cost(q)
        for k in range(len(dirs)):
            for sign in (1.0, -1.0):
                c, d = q.copy(), sign * dirs[k]
                for _ in range(int(reach / step)):
                    try:
                        c = self.ik.solve(target, np.clip(c + step * d, robot.lower,
                                                          robot.upper))
                    except ValueError:
                        break
                    nxt = self.ik.self_motions(c)
                    if len(nxt) <= k:
                        break
                    d = nxt[k] * np.sign(nxt[k] @ d or 1.0)   # keep walking the same way
                    cc = cost(c)
                    if cc < 0.9 * best_cost:
                        best, best_cost = c.copy(), cc
        return best


# ------------------------------------------------------------------ geometry helpers

def _segment_distance(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    ab = b - a
    t = 0.0 if not np.any(ab) else float(np.clip((p - a) @ ab / (ab @ ab), 0.0, 1.0))
    return float(np.linalg.norm(p - (a + t * ab)))


def _segments_distance(a0, a1, b0, b1) -> float:
    """Distance between two 2-D segments (sampled: these are short)."""
    ts = np.linspace(0.0, 1.0, 21)
    return min(_segment_distance(a0 + t * (a1 - a0), b0, b1) for t in ts)


@dataclass
class _Capsule:
    a: np.ndarray
    b: np.ndarray
    radius: float
    what: str


def _free_length(obj: StrikeObject, u: np.ndarray, table: TableRegion,
                 occupied: list[_Capsule], cfg: StrikeConfig, max_length: float = 0.6):
    """How far the object may travel along u: (length, what limits it)."""
    step = 0.005
    last, why = 0.0, 'no room'
    for s in np.arange(0.0, max_length + 1e-9, step):
        c = obj.xy + s * u
        if not table.inside(c, cfg.table_margin + obj.radius)[0]:
            return last, 'the table edge'
        for cap in occupied:
            if _segment_distance(c, cap.a, cap.b) < obj.radius + cap.radius + cfg.clearance:
                return last, cap.what
        last = s
        why = 'the longest strike planned'
    return last, why


# Two strike headings within 45 degrees of one axis (either way along it) push the box
# along the same axis.
SAME_AXIS_COS = math.cos(math.radians(45.0))


def _headings(obj: StrikeObject, cfg: StrikeConfig) -> list[float]:
    if obj.shape == 'box':
        long_axis = obj.yaw if obj.extents[0] >= obj.extents[1] else obj.yaw + np.pi / 2
        return [long_axis, long_axis + np.pi, long_axis + np.pi / 2, long_axis - np.pi / 2]
    return [2 * np.pi * k / cfg.directions for k in range(cfg.directions)]


def _wrap(a: float) -> float:
    return float((a + np.pi) % (2 * np.pi) - np.pi)


def _min_jerk(t, duration):
    s = np.clip(t / duration, 0.0, 1.0)
    return (10 * s ** 3 - 15 * s ** 4 + 6 * s ** 5,
            (30 * s ** 2 - 60 * s ** 3 + 30 * s ** 4) / duration)


# ------------------------------------------------------------------ the planner

class _Builder:
    """Accumulates trajectory points (time, positions, velocities)."""

    def __init__(self, q0: np.ndarray):
        self.t = 0.0
        self.q = np.asarray(q0, float)
        self.times, self.pos, self.vel = [0.0], [self.q.copy()], [np.zeros_like(self.q)]

    def add(self, t, q, qd):
        self.times.append(float(t))
        self.pos.append(np.asarray(q, float))
        self.vel.append(np.asarray(qd, float))
        self.t, self.q = float(t), np.asarray(q, float)

    def hold(self, duration):
        self.add(self.t + duration, self.q, np.zeros_like(self.q))

    def joint_move(self, q_to, duration, dt):
        n = max(2, int(math.ceil(duration / dt)))
        q_from = self.q.copy()
        t0 = self.t
        for k in range(1, n + 1):
            tau = duration * k / n
            s, ds = _min_jerk(tau, duration)
            self.add(t0 + tau, q_from + s * (q_to - q_from),
                     ds * (q_to - q_from) if k < n else np.zeros_like(q_from))

    def path(self, times, qs, qds):
        t0 = self.t
        for t, q, qd in zip(times, qs, qds):
            self.add(t0 + t, q, qd)


def _line_points(ik: TiltedToolIK, a, b, duration, dt, q_seed):
    """IK along a straight tool-tip line a -> b with min-jerk timing."""
    n = max(2, int(math.ceil(duration / dt)))
    taus = duration * np.arange(1, n + 1) / n
    s, _ = _min_jerk(taus, duration)
    pts = np.asarray(a)[None] + s[:, None] * (np.asarray(b) - np.asarray(a))[None]
    qs = ik.solve_path(pts, q_seed)
    qd = np.gradient(np.vstack([q_seed, qs]), np.concatenate([[0.0], taus]), axis=0)[1:]
    qd[-1] = 0.0
    return taus, qs, qd


def _vertical_points(ik: TiltedToolIK, a, b, height, cfg, q_seed, vlim):
    """_line_points down or up between ``a`` and ``b`` (``height`` apart) at
    ``cfg.vertical_speed`` (at least 0.5 s), stretched where a joint would pass ``vlim`` (an
    arm whose wrist turns fast for a short tool move is slowed, not refused)."""
    duration = max(0.5, height / cfg.vertical_speed)
    move = _line_points(ik, a, b, duration, cfg.move_dt, q_seed)
    ratio = float(np.max(np.abs(move[2]) / vlim))
    if ratio > 1.0:
        move = _line_points(ik, a, b, duration * ratio * 1.05, cfg.move_dt, q_seed)
    return move


def _push_profile(v: float, cfg: StrikeConfig, lift: float | None = None,
                  creep_extra: float | None = None):
    """Tool progress s(t) from the start (at rest) and its height offset: creep at
    ``creep_speed`` over the gap and ``creep_extra`` (the tool meets the object gently, wherever
    the gap really is), accelerate at ``accel`` to v, brake at ``decel`` while rising by
    ``lift``. Returns (t, s, dz, t_release, s_release)."""
    vc = cfg.creep_speed
    t_c0 = vc / cfg.accel                              # up to creep speed
    s_c0 = 0.5 * vc * t_c0
    d_creep = cfg.gap + (cfg.creep_extra if creep_extra is None else creep_extra)
    t_c1 = t_c0 + max(d_creep - s_c0, 0.0) / vc        # end of the creep
    s_c1 = max(d_creep, s_c0)
    t_acc = (v - vc) / cfg.accel
    t_cruise = t_c1 + t_acc                            # at v from here ...
    t_rel = t_cruise + cfg.cruise_time                 # ... to the release (braking)
    s_cruise = s_c1 + vc * t_acc + 0.5 * cfg.accel * t_acc ** 2
    s_rel = s_cruise + v * cfg.cruise_time
    t_dec = v / cfg.decel
    t_end = t_rel + t_dec
    dt = cfg.waypoint_dt
    t = np.arange(1, int(math.ceil(t_end / dt)) + 1) * dt
    t = np.append(t[t < t_end - 1e-6], t_end)
    s = np.where(
        t <= t_c0, 0.5 * cfg.accel * t ** 2,
        np.where(t <= t_c1, s_c0 + vc * (t - t_c0),
                 np.where(t <= t_cruise,
                          s_c1 + vc * (t - t_c1) + 0.5 * cfg.accel * (t - t_c1) ** 2,
                          np.where(t <= t_rel, s_cruise + v * (t - t_cruise),
                                   s_rel + v * (t - t_rel)
                                   - 0.5 * cfg.decel * (t - t_rel) ** 2))))
    dz = (cfg.lift if lift is None else lift) * np.clip((t - t_rel) / t_dec, 0.0, 1.0)
    return t, s, dz, t_rel, s_rel


def fingers_as_tool(robot, cfg: StrikeConfig) -> StrikeConfig:
    """``cfg`` for ``robot``'s tool. A robot with a parallel-jaw gripper strikes with its
    closed fingers: the tip (the grasp centre) is raised by how far the fingers reach past it
    (``tip_height`` stays the fingers' clearance over the table) and ``tool_radius`` is at
    least their reach across the tool axis (grasping.hold.finger_reach). Planned with the
    pusher's settings, the cell arm's pads (30 mm past the tip) were sent below the table
    top (config/cells/gripper.yaml: friction 0.96 for 0.55, held-out error 10.5 mm). A
    robot without a gripper, or whose fingers end above its tip (a Panda carrying the
    pusher): ``cfg`` unchanged."""
    from ..grasping.jaw import gripper_joints
    if gripper_joints(robot) is None:
        return cfg
    from ..grasping.hold import finger_reach
    depth, radius = finger_reach(robot)
    if depth <= 0.0:        # the fingers end above the tip: a pusher below them strikes
        return cfg
    return replace(cfg, tip_height=cfg.tip_height + depth,
                   tool_radius=max(cfg.tool_radius, radius))


def plan_strike_probe(robot, objects: list[StrikeObject], table: TableRegion, q_start,
                      friction: dict[str, tuple[float, float, float]],
                      cfg: StrikeConfig | None = None, *, previous: dict | None = None,
                      name: str = 'strike', obstacles=()) -> StrikePlan:
    """One probe striking every object that can be struck safely.

    obstacles: other objects on the table (StrikeObject, or (xy, radius) footprints) that are
    not struck: every strike's path and the tool's descent keep clear of them as of the
    struck objects.

    friction: {id: (lower, estimate, upper)} of the sliding friction (the prior bounds before
    any estimate). previous: {id: heading of its last strike, or the headings of all its
    strikes so far, oldest first}. Among the strikes with an informative slide, a box's next
    one prefers an axis of the box not struck yet (a push along one axis bends the path by
    the centre of mass offset across it only: strikes back and forth along one axis leave
    the other offset unobservable), then the heading opposite the last (the object comes
    back). A gentle strike too short to inform (``cfg.gentle_informative_slide``) waits
    (:func:`_strike_order`). Objects not struck are in ``skipped``. Raises ProbeError when
    no object is struck.
    """
    cfg = fingers_as_tool(robot, cfg or StrikeConfig())
    previous = previous or {}
    q_start = np.asarray(q_start, float)
    ik = TiltedToolIK(robot, cfg.tilt)
    obstacle_caps, obstacle_heights = [], []
    for k, ob in enumerate(obstacles):
        if isinstance(ob, StrikeObject):
            obstacle_caps.append(_Capsule(ob.xy, ob.xy, ob.radius, f'object {ob.id!r}'))
            obstacle_heights.append(ob.height)
        else:
            xy, r = np.asarray(ob[0], float)[:2], float(ob[1])
            obstacle_caps.append(_Capsule(xy, xy, r, f'obstacle {k}'))
    z_top = table.height + max([o.height for o in objects] + obstacle_heights)
    safe_z = z_top + cfg.safe_height
    vlim = cfg.joint_speed_fraction * np.asarray(robot.velocity_limits, float)
    occupied = [_Capsule(o.xy, o.xy, o.radius, f'object {o.id!r}') for o in objects]
    occupied += obstacle_caps
    build = _Builder(q_start)
    tip0 = ik.tip(q_start)
    if tip0[2] < safe_z - 0.02:
        raise ProbeError(f'the tool tip is {tip0[2]:.3f} m high at the probe start; strikes '
                         f'start from above the objects (>= {safe_z - 0.02:.3f} m)')
    strikes, skipped, deferred = [], {}, []
    q_seed = q_start
    for obj, options in _strike_order(objects, deferred, strikes, not previous):
        lo, est, hi = friction.get(obj.id, (0.2, 0.5, 1.0))
        if options is None:
            others = [c for c in occupied if c.what != f'object {obj.id!r}']
            options, reasons = _strike_options(obj, table, others, cfg, ik, vlim,
                                               (lo, est, hi), safe_z, q_seed)
            if not options:
                skipped[obj.id] = 'no safe strike (' + '; '.join(reasons[:4]) + ')'
                continue
            if why := _uninformative(options, est, cfg):
                deferred.append((obj, options))
                skipped[obj.id] = why
                continue
        else:
            del skipped[obj.id]          # a deferred one, struck after all
        struck = np.atleast_1d(np.asarray(previous.get(obj.id, []), float))
        prev = float(struck[-1]) if struck.size else None

        # The longest informative slide first (a short one measures the launch, not the
        # friction), among those a box's axis not struck yet, then the way back (the object
        # stays near the middle), then room.
        fastest = max(o['speed'] for o in options)

        def score(o, prev=prev, fastest=fastest, struck=struck, box=obj.shape == 'box'):
            back = 0.0 if prev is None else np.cos(o['heading'] - prev)   # -1: opposite
            seen = box and bool(np.any(np.abs(np.cos(o['heading'] - struck)) > SAME_AXIS_COS))
            return (o['speed'] < 0.85 * fastest, seen, round(back, 1), -o['free'])
        best = min(options, key=score)
        info = _append_strike(build, obj, best, cfg, ik, safe_z, lo, hi)
        strikes.append(info)
        q_seed = build.q
        u = best['u']
        occupied = [c for c in occupied if c.what != f'object {obj.id!r}']
        occupied.append(_Capsule(obj.xy.copy(), obj.xy + best['travel'] * u, obj.radius,
                                 f'the path of {obj.id!r}'))
    if not strikes:
        raise ProbeError('no object can be struck safely: ' + '; '.join(
            f'{k}: {v}' for k, v in skipped.items()))
    # Back to where the probe started (at the safe height first).
    tip = ik.tip(build.q)
    if tip[2] < safe_z - 1e-3:
        raise ProbeError('internal: the tool is not at the safe height after a strike')
    dq = np.abs(q_start - build.q)
    build.joint_move(q_start, max(1.0, float(np.max(dq * 1.875 / (0.5 * vlim)))),
                     cfg.move_dt)
    probe = Probe(list(robot.joint_names), np.array(build.times), np.array(build.pos),
                  np.array(build.vel), name)
    _check_probe(robot, probe, ik, table, vlim)
    return StrikePlan(probe, strikes, skipped)


def _strike_order(objects, deferred: list, strikes: list, first: bool):
    """(object, None) for the objects by id; then (object, its strike options) for the ones
    ``deferred`` as uninformative (:func:`_uninformative`, with the options it judged: nothing
    was struck, so the plan's state is the same) when none was struck and either this is the
    ``first`` probe (identification needs a strike) or every object was deferred (a cell of
    such objects only): a generator, read after each object's turn. Where another object
    only lacks room now, the strikes stop instead (a probe of uninformative strikes costs
    its motion and would be the held-out one)."""
    for obj in sorted(objects, key=lambda o: o.id):
        yield obj, None
    if not strikes and (first or len(deferred) == len(objects)):
        yield from list(deferred)


def _uninformative(options, mu_est: float, cfg) -> str:
    """Why the object's strikes (``options``) wait (:func:`_strike_order`): each one gentle,
    sliding less than ``cfg.gentle_informative_slide`` at the estimate; '' when one
    informs."""
    limit = cfg.gentle_informative_slide
    if limit <= 0 or not all(o.get('gentle') for o in options):
        return ''
    slide = max(o['speed'] for o in options) ** 2 / (2 * max(mu_est, 1e-3) * G)
    if slide >= limit:
        return ''
    return (f'only a gentle strike is safe, sliding {1000 * slide:.1f} mm at friction '
            f'{mu_est:.2f} (< {1000 * limit:.0f} mm: strike: gentle_informative_slide); made '
            f'only where nothing else can be struck')


def _strike_options(obj, table, others, cfg, ik, vlim, friction, safe_z, q_seed):
    """The strikes of obj, one per heading that can strike it (_try_heading), and the reasons
    of the headings that cannot."""
    lo, est, hi = friction
    options, reasons = [], []
    for heading in _headings(obj, cfg):
        option, why = _try_heading(obj, heading, table, others, cfg, ik, vlim, lo, est,
                                   safe_z, q_seed, hi)
        if option is None:
            reasons.append(f'{math.degrees(_wrap(heading)):.0f} deg: {why}')
            continue
        options.append(option)
    return options, reasons


def tip_energy_speed(edge: float, h_com: float, g: float = G) -> float:
    """The release speed (m/s) below which a rigid object sliding on a table cannot tip over
    its front edge whatever the friction: tipping lifts the centre of mass (``h_com`` above
    the table, ``edge`` horizontally behind the edge) by ``hypot(edge, h_com) - h_com``, which
    the kinetic energy 1/2 v^2 must pay (friction only takes energy away). A necessary
    condition, not a sufficient one: measured in MuJoCo (docs/identification.md, "Tall
    objects") free slides first tip at 1.4-1.8 x this speed."""
    return math.sqrt(2.0 * g * (math.hypot(edge, h_com) - h_com))


def _try_heading(obj, heading, table, occupied, cfg, ik, vlim, mu_lo, mu_est, safe_z, q_seed,
                 mu_hi=1.0):
    """The strike of obj along heading: straight back (the first of cfg.leans_deg) whenever
    it plans one within the joint speed limits that passes the probe's checks; the other
    leans only when straight back reaches the strike but cannot move it so (a wrist near a
    singularity; never for a strike out of reach): the first of them fast enough for an
    informative slide (or not slowed down at all), else the fastest.
    (option, '') or (None, why: straight back's reason)."""
    u = np.array([np.cos(heading), np.sin(heading)])
    # Sliding, friction tips an object over its front edge when mu h_com > (COM to the edge)
    # and the release's kinetic energy lifts its centre of mass over the edge.
    edge = obj.half_extent_along(heading)
    v_tip = None
    if mu_hi * obj.height / 2 > cfg.tip_margin * edge:
        cu = cfg.com_uncertainty
        v_tip = cfg.tip_speed_fraction * tip_energy_speed(edge * (1 - 2 * cu),
                                                          obj.height * (0.5 + cu))
        tip_why = (f'it could tip over (friction up to {mu_hi:.2f} x centre height '
                   f'{obj.height / 2:.3f} m > {cfg.tip_margin} x {edge:.3f} m to its edge)')
        slide_est = v_tip ** 2 / (2 * mu_est * G)
        if not cfg.gentle_strikes:
            return None, f'{tip_why}; gentle strikes are off (strike: gentle_strikes)'
        if v_tip < cfg.gentle_speed_min or slide_est < cfg.gentle_min_slide:
            return None, (f'{tip_why}, and the gentlest strike that cannot tip it '
                          f'({v_tip:.2f} m/s: its centre of mass lifts '
                          f'{1000 * v_tip ** 2 / (2 * G):.1f} mm at most) would slide it '
                          f'{1000 * slide_est:.1f} mm at friction {mu_est:.2f} (a gentle '
                          f'strike needs >= {1000 * cfg.gentle_min_slide:.0f} mm at >= '
                          f'{cfg.gentle_speed_min} m/s); a wider or lower object, or a lower '
                          f'friction upper bound')
    free, why = _free_length(obj, u, table, occupied, cfg)
    contact = obj.half_extent_along(heading) + cfg.tool_radius * np.cos(cfg.tilt) + cfg.gap
    start = obj.xy - u * contact
    # The wrist comes down behind the object: it must clear every other object.
    for cap in occupied:
        if _segment_distance(start, cap.a, cap.b) < cap.radius + cfg.wrist_radius + \
                cfg.clearance:
            return None, f'the tool would come down next to {cap.what}'
    if not table.inside(start, 0.0)[0]:
        return None, 'the tool start is off the table'
    extra = 0.02
    k = 1 / (2 * cfg.accel) + 1 / (2 * mu_lo * G)
    v_space = math.sqrt(max(free - extra - cfg.gap, 0.0) / k)
    v_goal = math.sqrt(2 * mu_est * G * cfg.target_slide)
    v = min(v_space, v_goal, cfg.speed_max)
    v_info = math.sqrt(2 * mu_est * G * cfg.min_slide)
    speed_min = cfg.speed_min
    if v_tip is not None:            # a gentle strike: its own minimum
        speed_min = cfg.gentle_speed_min
        v_info = math.sqrt(2 * mu_est * G * cfg.gentle_min_slide)
        v = min(v, v_tip)
    if v < max(speed_min, min(v_info, cfg.speed_max)):
        return None, f'{free:.2f} m free before {why}'
    lift, creep = (cfg.lift, cfg.creep_extra) if v_tip is None else (cfg.gentle_lift,
                                                                      cfg.gentle_creep_extra)
    best, why = None, 'the push is too fast for the joint speed limits'
    for k, lean in enumerate(cfg.leans_deg):
        option, why_lean = _try_lean(heading, math.radians(lean), start, u, v, cfg, ik, vlim,
                                     mu_lo, safe_z, q_seed, table, free, extra, speed_min,
                                     lift, creep)
        if option is None:
            if k > 0:
                continue
            why = why_lean
            if why.startswith(_UNREACHABLE):
                break
            continue
        option['gentle'] = v_tip is not None
        if k == 0:
            return option, ''
        if best is None or option['speed'] > best['speed'] + 1e-9:
            best = option
        if option['speed'] >= min(v, max(v_info, speed_min)) - 1e-9:
            break
    return best, ('' if best is not None else why)


_UNREACHABLE = 'unreachable'     # the start of _try_lean's reason for a strike out of reach


def _approach(ik, start, rest_z, safe_z, q_seed, cfg, v, u, lift, creep, vlim):
    """(q_above, q_rest, down): the joints above the start and at rest behind the object, and
    the straight descent between them (_line_points). A non-redundant arm: the IK solutions
    from q_seed, the descent to the tip of q_rest. A redundant arm: the self-motion needing the
    least joint speed at the rest and at the release (TiltedToolIK.best_redundancy), q_rest
    the descent's last point (the push starts where the descent ends)."""
    q_above = ik.solve([*start, safe_z], q_seed)
    q_rest = ik.solve([*start, rest_z], q_above)
    if not ik.redundant:
        down = _vertical_points(ik, ik.tip(q_above), ik.tip(q_rest), safe_z - rest_z, cfg,
                                q_above, vlim)
        return q_above, q_rest, down
    rest = np.array([*start, rest_z])
    _, _, _, _, s_rel0 = _push_profile(v, cfg, lift, creep)
    release = rest + np.array([*(s_rel0 * u), 0.0])
    vel = np.array([*(v * u), 0.0])
    q_best = ik.best_redundancy(rest, q_rest, [(rest, vel), (release, vel)], vlim)
    if q_best is not q_rest:
        q_above = ik.solve([*start, safe_z], q_best)
    down = _vertical_points(ik, ik.tip(q_above), rest, safe_z - rest_z, cfg, q_above, vlim)
    return q_above, down[1][-1], down


def _try_lean(heading, lean, start, u, v, cfg, ik, vlim, mu_lo, safe_z, q_seed, table,
              free, extra, speed_min, lift, creep):
    """The fastest strike at speed <= v, slowed 10% at a time down to speed_min, with the tool
    leaning ``lean`` from straight back: within the joint speed limits (vlim) along the push
    and, as the whole strike from q_seed would be in the probe (_strike_motion), through the
    probe's own checks (_probe_problem). (option, '') or (None, why)."""
    ik.set_heading(heading, lean)
    z = cfg.tip_height
    try:
        q_above, q_rest, down = _approach(ik, start, table.height + z, safe_z, q_seed, cfg, v,
                                          u, lift, creep, vlim)
    except ValueError as exc:    # IKError: out of reach or past a limit
        return None, f'{_UNREACHABLE} ({str(exc).splitlines()[0]})'
    why = 'the push is too fast for the joint speed limits'
    while v >= speed_min:
        try:
            t, s, dz, t_rel, s_rel = _push_profile(v, cfg, lift, creep)
            pts = np.column_stack([start[None] + s[:, None] * u[None],
                                   table.height + z + dz])
            qs = ik.solve_path(pts, q_rest)
            top = ik.tip(qs[-1])
            top[2] = safe_z
            up = _vertical_points(ik, ik.tip(qs[-1]), top, safe_z - ik.tip(qs[-1])[2], cfg,
                                  qs[-1], vlim)
        except ValueError as exc:    # IKError: out of reach or past a limit
            return None, f'{_UNREACHABLE} ({str(exc).splitlines()[0]})'
        qd = np.gradient(np.vstack([q_rest, qs]), np.concatenate([[0.0], t]), axis=0)[1:]
        if np.all(np.abs(qd) <= vlim) and all(np.all(np.abs(m[2]) <= vlim) for m in (down, up)):
            travel = s_rel - cfg.gap + v * v / (2 * mu_lo * G) + extra
            if travel > free:
                v *= 0.9
                continue
            option = {'heading': heading, 'lean': lean, 'u': u, 'speed': v, 'start': start,
                      'q_above': q_above,
                      'q_rest': q_rest, 'down': down, 'push': (t, qs, qd), 'up': up,
                      'free': free, 'travel': travel, 't_release': t_rel,
                      's_release': s_rel}
            build = _Builder(q_seed)
            _strike_motion(build, option, cfg, ik, mu_lo)
            problem = _probe_problem(ik, table, vlim, build.times, build.pos, build.vel)
            if not problem:
                return option, ''
            why = f'the whole strike fails the probe checks ({problem})'
        v *= 0.9
    return None, why


def _strike_motion(build: _Builder, opt, cfg, ik, mu_lo):
    """Append one strike's motion (travel above the start, down, push, settle, up) to build;
    returns (t_rest, t_push, t_release, t_end) on the builder's clock."""
    ik.set_heading(opt['heading'], opt['lean'])
    start = opt['start']
    # Travel (joint space, min-jerk) to above the start, then straight down.
    tip_now = ik.tip(build.q)
    dist = float(np.linalg.norm(tip_now[:2] - start))
    dq = np.abs(opt['q_above'] - build.q)
    duration = max(0.8, dist / cfg.travel_speed, float(np.max(dq * 1.875 / (0.5 * np.pi))))
    build.joint_move(opt['q_above'], duration, cfg.move_dt)
    build.path(*opt['down'])
    t_rest = build.t
    build.hold(cfg.dwell)
    t_push = build.t
    t, qs, qd = opt['push']
    qd = qd.copy()
    qd[-1] = 0.0
    build.path(t, qs, qd)
    t_release = t_push + opt['t_release']
    settle = max(cfg.settle_min, opt['speed'] / (mu_lo * G) + 0.6)
    build.hold(t_release + settle - build.t)
    t_end = build.t
    build.path(*opt['up'])
    return t_rest, t_push, t_release, t_end


def _append_strike(build: _Builder, obj, opt, cfg, ik, safe_z, mu_lo, mu_hi) -> StrikeInfo:
    t_rest, t_push, t_release, t_end = _strike_motion(build, opt, cfg, ik, mu_lo)
    slide_max = opt['speed'] ** 2 / (2 * mu_lo * G)
    return StrikeInfo(obj.id, float(_wrap(opt['heading'])), float(opt['speed']),
                      float(cfg.accel), float(t_rest), float(t_push), float(t_release),
                      float(t_end), float(max(opt['s_release'] - cfg.gap, 0.0)),
                      [float(x) for x in obj.xy],
                      [float(opt['speed'] ** 2 / (2 * mu_hi * G)), float(slide_max)],
                      float(opt['lean']), bool(opt.get('gentle', False)))


def _probe_problem(ik: TiltedToolIK, table: TableRegion, vlim, times, positions,
                   velocities) -> str:
    """What a strike probe's points (times, positions, velocities) break, '' if nothing:
    the joint limits, the joint speed limits (vlim is 80% of them: the commanded velocities
    within the limits, the steps between points within 1.05 x) and the table (the tip
    >= 4 mm above it)."""
    robot = ik.ik.robot
    positions, velocities = np.asarray(positions), np.asarray(velocities)
    if not all(robot.within_limits(q) for q in positions):
        return 'a strike probe point is past a joint limit'
    if np.any(np.abs(velocities) > vlim / 0.8 + 1e-6):
        return 'a strike probe point is past the joint speed limits'
    dq = np.diff(positions, axis=0) / np.diff(np.asarray(times))[:, None]
    if np.any(np.abs(dq) > vlim / 0.8 * 1.05 + 1e-6):
        return 'a strike probe moves faster than the joint speed limits'
    low = min(ik.tip(q)[2] for q in positions)
    if low < table.height + 0.004:
        return f'the tool tip comes within {low - table.height:.4f} m of the table'
    return ''


def _check_probe(robot, probe: Probe, ik: TiltedToolIK, table: TableRegion, vlim):
    problem = _probe_problem(ik, table, vlim, probe.times, probe.positions, probe.velocities)
    if problem:
        raise ProbeError(f'internal: {problem}')
