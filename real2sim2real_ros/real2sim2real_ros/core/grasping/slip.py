"""The finger-object friction from a controlled slip (issue "Grasp and place", build item 5).

Contract. The probe (:func:`run_slip_probe`) runs on any task backend with a gripper
(core/tasks/worlds.py: a twin, an emulated cell through its trajectory controller and its
gripper interface; a lab's arm the same way): the arm grasps the box at its observed centre
as pick_and_place does (core/tasks/pick_and_place.PickAndPlace.grasp_plan) with
``start_effort``, lifts it until its top would clear the pads' lower ends if it fell, then
lowers the commanded closing effort step by step (each ``ratio`` times the last, down to
``min_effort``), ``dwell`` s per step. The box slips out when two pads' friction can no
longer carry its weight (2 mu F < m g, with the engine's own contact compliance); it falls
to the table and the jaw, commanded shut, closes past the width it held the box at by more
than ``closed_drop``. What a real cell gives is enough: the measured jaw position (the
driven finger in ``/joint_states``) and the tracked start pose the grasp is planned from.
The result is the step at which the box came out (None: it held down to ``min_effort``).
Each step's duration on the world's clock (``world.time``, where the world has one) comes
with it: a live step lasts as long as its jaw goal took plus ``dwell``, and the fit replays
it so.

The probe runs once per entry of ``grasp_offsets`` (m, along the pads' faces from the
observed centre, capped at ``offset_fraction`` of the box's extent that way; each grasp
planned from the object's pose as then observed). A box gripped well off its centre of mass
turns between the pads under its weight and then holds at a far lower effort (measured
in-process on the emulated gripper cell, box 0.21 kg, friction 0.55, centre of mass 6 mm
along its 8 cm side: with the grasp 1-8 mm from the centre of mass it came out at 3.22 N,
at 13-15 mm at 0.68 N, at 18 mm at 0.28 N, from 20 mm on never). The tracker's error adds
to the offset: live, the grasp of the same box was planned 3.9 mm off its centre, and in 2
of 21 runs the box stayed in until 1.65 N and 1.05 N, which the fit read as 1.2 and 3.1
times the friction (docs/grasping.md). An offset grasp far off a small box's centre can
instead slip early (a 5 cm box: 15.5 mm off centre, step 8 for 9; on a drawn cell's arm,
7.5 mm off, two steps early in 2 of 8 cells, at 5 mm at most one), hence the cap. So the
first grasp (through the seen centre) counts, unless another slipped at least
``catch_steps`` earlier (the catches seen held on 3-11 steps longer): then the earliest, the
grasp nearest the centre of mass. The fit replays it through the observed centre in the
twin, whose centre of mass is its own. A run in which the box was
already out before the first step while another held it at the start effort was a missed
grasp and does not count.

The held mass comes with it (:func:`held_mass`): the arm's measured joint efforts averaged
over ``effort_window`` s while it holds the lifted box still, and again at the same pose after
the jaw has opened (the box gone); their difference is the box's weight seen through the
arm, m g J_z(q)^T at the grasp centre, solved for m by least squares over the joints. A
servo with dry joint friction takes part of a static load change up in its joints: the
estimate carries that error.

The fit (:func:`fit_finger_friction`) replays the same probe in the twin (its identified mass
and every other value; the grasp contact recipe of core/grasping/jaw.twin_grasp_contacts,
where ``global/finger_friction`` rules every finger-object contact) and bisects, in log
space within ``friction_bounds``, for the finger friction at which the twin's box comes out
at the same step: the range of values that do is the estimate's interval (the probe's
resolution: one step's ratio), its geometric middle the estimate. The twin then needs the
grip the cell needs: what the estimate is, in the twin's terms, is the product of the cell's
friction and everything else the twin gets wrong about a grasp (the identified mass, the
contacts' compliance); the number is the twin's effective value, not the cell's Coulomb
coefficient. A probe at whose first step the box already fell, or that held it to the
last, bounds the value on one side only: the estimate is that bound, not identified.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from ..tasks.worlds import observed_start
from .hold import pad_half_length

PARAMETER = 'global/finger_friction'


class SlipProbeError(RuntimeError):
    """The probe could not run (the object not seen, not grasped at the start effort)."""


@dataclass(frozen=True)
class SlipConfig:
    """How the slip probe is made (SI units)."""

    start_effort: float = 30.0     # N, the closing effort of the grasp and the lift
    min_effort: float = 0.25       # N, the last step's
    ratio: float = 0.8             # each step's effort over the last one's
    dwell: float = 0.4             # s per step
    # s per step where they differ (a fit replaying a live probe, whose steps last as long as
    # each grip goal took plus ``dwell``); empty: ``dwell`` each
    step_dwells: tuple[float, ...] = ()
    lift_margin: float = 0.02      # m between the fallen box's top and the pads' lower ends
    closed_drop: float = 0.004     # m the jaw closes past its holding width: the box is out
    settle: float = 0.3            # s after the lift, before the first step
    effort_window: float = 0.3     # s of joint efforts averaged, held and empty
    friction_bounds: tuple[float, float] = (0.05, 3.0)   # the fit's search range
    # m along the pads from the observed centre, one probe each; the first is the reference
    # grasp, another counts when it slips at least catch_steps earlier (module docstring)
    grasp_offsets: tuple[float, ...] = (0.0, 0.008, -0.008)
    catch_steps: int = 2
    offset_fraction: float = 0.1   # an offset's cap: this x the box's extent along the pads
    tolerance: float = 0.02        # relative, the bisection's on the friction

    def __post_init__(self):
        if not 0 < self.ratio < 1:
            raise ValueError(f'slip probe: ratio {self.ratio} must be in (0, 1)')
        if not self.grasp_offsets or not all(math.isfinite(o) for o in self.grasp_offsets):
            raise ValueError(f'slip probe: grasp_offsets {self.grasp_offsets!r} must be one or '
                             'more finite distances (m)')
        if not (isinstance(self.catch_steps, int) and self.catch_steps >= 1):
            raise ValueError(f'slip probe: catch_steps {self.catch_steps!r} must be an '
                             'integer >= 1')
        if not 0 <= self.offset_fraction < 0.5:
            raise ValueError(f'slip probe: offset_fraction {self.offset_fraction} must be in '
                             '[0, 0.5)')
        if not 0 < self.min_effort < self.start_effort:
            raise ValueError('slip probe: 0 < min_effort < start_effort (N) is needed')
        lo, hi = self.friction_bounds
        if not 0 < lo < hi:
            raise ValueError(f'slip probe: friction_bounds {self.friction_bounds} must be '
                             '0 < lo < hi')

    def efforts(self) -> list[float]:
        """The steps' closing efforts (N), from ``start_effort * ratio`` down."""
        n = int(math.floor(math.log(self.min_effort / self.start_effort) / math.log(self.ratio)))
        return [self.start_effort * self.ratio ** k for k in range(1, n + 1)]


@dataclass
class SlipRun:
    """One probe: the efforts commanded, the jaw width at the end of each step run (m), the
    width it held the box at after the lift, the step at which the box came out (None:
    held to the last; -1: already out before the first step), and the start it was
    planned from (observed: a fit replays the probe in the twin from there)."""

    efforts: list[float]
    widths: list[float]
    held_width: float
    slipped_at: int | None
    start_xy: tuple[float, float] = (0.0, 0.0)
    start_yaw: float = 0.0
    hold_q: list[float] = field(default_factory=list)          # rad, the arm while holding
    held_efforts: list[float] = field(default_factory=list)    # N m, mean, box held
    empty_efforts: list[float] = field(default_factory=list)   # N m, mean, jaw open after
    # s, each step's duration on the world's clock (empty: the world has none)
    step_durations: list[float] = field(default_factory=list)
    grasp_offset: float = 0.0      # m along the pads from the observed centre
    # every probe's (grasp offset m, slipped_at) in order, when there were several (this
    # run is the one that counts: run_slip_probe)
    repeat_steps: list = field(default_factory=list)

    @property
    def step(self) -> int:
        """The step index the box came out at, ``len(efforts)`` when it held to the last."""
        return len(self.efforts) if self.slipped_at is None else self.slipped_at

    @property
    def slip_effort(self) -> float | None:
        """The closing effort (N) at which the box came out (None: it held)."""
        if self.slipped_at is None:
            return None
        return self.efforts[self.slipped_at] if self.slipped_at >= 0 else None

    def to_dict(self) -> dict:
        """JSON-ready record."""
        return {**asdict(self), 'slip_effort': self.slip_effort}


def lift_height(task, cfg: SlipConfig = SlipConfig()) -> float:
    """How far (m) the probe lifts the box: a box that falls out lands with its top
    ``lift_margin`` below the pads' lower ends, so nothing holds it up but friction."""
    c = task.cfg
    pads_low = task.grasp_height - pad_half_length(task.robot) - c.table_height
    return float(c.object_size[2] - pads_low + cfg.lift_margin)


def _hold(world, q, duration: float, dt: float) -> None:
    """The arm held at ``q`` for ``duration`` s."""
    world.execute(np.array([dt]), np.asarray(q)[None], None, duration)


def _efforts(world, q, duration: float, dt: float) -> tuple[list, list]:
    """The arm held at ``q`` for ``duration`` s: its mean measured (joint positions, joint
    efforts) over that time, sampled every ``dt`` s."""
    qs, taus = [], []
    for _ in range(max(1, int(round(duration / dt)))):
        _hold(world, q, dt, dt)
        qs.append(world.joint_positions())
        taus.append(world.joint_efforts())
    return np.mean(qs, axis=0).tolist(), np.mean(taus, axis=0).tolist()


def held_mass(robot, run: SlipRun, gravity: float = 9.81) -> tuple[float, float] | None:
    """The held box's mass and the half-width of its 95% interval (kg) from ``run``'s
    efforts (module docstring; the interval from the least-squares residual over the
    joints: dry joint friction shows there); None when the probe has no efforts (the box
    was out before the lift ended)."""
    if not run.held_efforts or not run.empty_efforts:
        return None
    import mujoco
    model, data = robot._kinematics()
    data.qpos[:] = model.qpos0
    data.qpos[robot.qpos_indices(model)] = run.hold_q
    mujoco.mj_kinematics(model, data)
    mujoco.mj_comPos(model, data)
    tip = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, robot.tip_link)
    jacp = np.zeros((3, model.nv))
    mujoco.mj_jac(model, data, jacp, None, data.xpos[tip], tip)
    dofs = [int(model.jnt_dofadr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n)])
            for n in robot.joint_names]
    a = gravity * jacp[2, dofs]
    d = np.asarray(run.held_efforts) - np.asarray(run.empty_efforts)
    m = float(d @ a / (a @ a))
    dof = max(len(d) - 1, 1)
    sigma = math.sqrt(float(np.sum((d - m * a) ** 2)) / dof / float(a @ a))
    return m, 1.96 * sigma


# The held mass's 95% half-width is at least this fraction of it: the residual over the
# joints misses the servo's dry-friction bias (measured, r2s2r slip-test, 30 cases of MuJoCo
# and Drake cells, 0.1-0.862 kg: errors -9.0% .. +6.7%; the residual's half-width alone
# covered 22 of 30, with this floor 30 of 30).
HELD_MASS_MIN_HALF_WIDTH = 0.10


def held_mass_interval(mass: tuple[float, float]) -> tuple[float, float]:
    """The 95% interval (kg) of a :func:`held_mass` result ``(m, half_width)``: the
    residual's half-width, floored at ``HELD_MASS_MIN_HALF_WIDTH`` of ``m``."""
    m, half = mass
    half = max(float(half), HELD_MASS_MIN_HALF_WIDTH * abs(m))
    return m - half, m + half


def held_mass_estimate(name: str, mass: tuple[float, float] | None, prior: float):
    """The object's mass parameter ``name`` (kg) from a :func:`held_mass` result, as a
    ParameterEstimate with :func:`held_mass_interval`'s 95% interval (None when there is
    no held mass: the box was out before the lift ended). One form for the harness and the
    system_identification node."""
    from ..parameters import ParameterEstimate
    if mass is None:
        return None
    lo, hi = held_mass_interval(mass)
    return ParameterEstimate(name, float(mass[0]), max(lo, 1e-6), hi, float(prior), 'kg', True)


def _clock(world) -> float | None:
    """The world's time (s), None where it has no clock."""
    t = getattr(world, 'time', None)
    return None if t is None else float(t)


def _counts(run: SlipRun) -> bool:
    """Whether the box was held when the steps began (module docstring)."""
    return run.slipped_at is None or run.slipped_at >= 0


def run_slip_probe(task, world, reset, cfg: SlipConfig = SlipConfig()) -> SlipRun:
    """The probe on ``world`` for ``task`` (a PickAndPlace) with the box placed at ``reset``'s
    start, once per ``cfg.grasp_offsets`` entry: planned from the observed start (tracked on
    a cell with an observer), read back through the jaw's measured position only. Of the
    runs that held the box when the steps began (else the first run): the first, unless
    another slipped at least ``cfg.catch_steps`` earlier, then the earliest; every run's
    (offset, ``slipped_at``) in ``repeat_steps`` when there was more than one (module
    docstring)."""
    runs = [_probe_once(task, world, reset, cfg, o) for o in cfg.grasp_offsets]
    if len(runs) == 1:
        return runs[0]
    held = [r for r in runs if _counts(r)] or runs[:1]
    best = min(held, key=lambda r: r.step)
    if best.step > held[0].step - cfg.catch_steps:
        best = held[0]
    return replace(best, repeat_steps=[[r.grasp_offset, r.slipped_at] for r in runs])


def _probe_once(task, world, reset, cfg: SlipConfig, offset: float = 0.0) -> SlipRun:
    """One probe (run_slip_probe), the grasp ``offset`` m along the pads."""
    prepare = getattr(world, 'prepare_grasping', None)
    if prepare is not None:
        prepare()
    c = task.cfg
    true_xyz = [*reset.object_xy, task.object_z]
    seen = observed_start(world, true_xyz, reset.object_yaw)
    if seen is None:
        raise SlipProbeError('slip probe: the object was not seen at its start')
    view = replace(reset, object_xy=np.asarray(seen[0][:2], float), object_yaw=float(seen[1]))
    along, extent = task.along_pads(view.object_yaw)
    cap = cfg.offset_fraction * extent
    offset = float(np.clip(offset, -cap, cap))
    plan = task.grasp_plan(replace(view, object_xy=view.object_xy + offset * along),
                           lift_height(task, cfg))
    world.reset(plan['q_above'], true_xyz, reset.object_yaw)
    lower, upper = task.jaw.lower, task.jaw.upper
    world.command_gripper(upper, cfg.start_effort)
    _hold(world, plan['q_above'], c.open_time, c.waypoint_dt)
    world.execute(*plan['descend'])
    world.command_gripper(lower, cfg.start_effort)
    _hold(world, plan['descend'][1][-1], c.close_time, c.waypoint_dt)
    q_top = plan['lift'][1][-1]
    world.execute(*plan['lift'], duration=plan['lift'][0][-1] + cfg.settle)
    held = float(world.gripper_state()[0])
    efforts = cfg.efforts()
    start = (tuple(float(v) for v in view.object_xy), float(view.object_yaw))
    if held - lower < cfg.closed_drop:
        return SlipRun(efforts, [], held, -1, *start, grasp_offset=offset)
    hold_q, held_tau = _efforts(world, q_top, cfg.effort_window, c.waypoint_dt)
    widths, slipped, starts = [], None, []
    for k, effort in enumerate(efforts):
        starts.append(_clock(world))
        world.command_gripper(lower, effort)
        _hold(world, q_top, cfg.step_dwells[k] if k < len(cfg.step_dwells) else cfg.dwell,
              c.waypoint_dt)
        widths.append(float(world.gripper_state()[0]))
        if widths[-1] < held - cfg.closed_drop:
            slipped = k
            break
    starts.append(_clock(world))
    world.command_gripper(upper, cfg.start_effort)
    _hold(world, q_top, c.open_time, c.waypoint_dt)
    _, empty_tau = _efforts(world, q_top, cfg.effort_window, c.waypoint_dt)
    durations = ([] if None in starts else
                 [float(b - a) for a, b in zip(starts, starts[1:])])
    return SlipRun(efforts, widths, held, slipped, *start, hold_q, held_tau, empty_tau,
                   durations, offset)


def friction_error(value: float, dynamic: float, static: float) -> float:
    """Relative error of a fitted finger friction against a cell whose friction holds
    between ``dynamic`` and ``static`` (the same on a MuJoCo cell; on a Drake cell a slowly
    slipping box turns dynamic: measured, the fit lands between the two): 0 inside."""
    if dynamic <= value <= static:
        return 0.0
    near = dynamic if value < dynamic else static
    return abs(value - near) / near


def friction_covered(lower: float, upper: float, dynamic: float, static: float) -> bool:
    """True when the interval [lower, upper] meets the cell's friction range [dynamic,
    static] (see :func:`friction_error`)."""
    return bool(lower <= static and upper >= dynamic)


@dataclass
class FrictionFit:
    """The twin's finger friction at which its box comes out at the cell's step."""

    value: float
    lower_95: float
    upper_95: float
    identified: bool
    cell_step: int
    twin_steps: dict = field(default_factory=dict)    # friction -> step, every twin run
    note: str = ''

    def to_dict(self) -> dict:
        """JSON-ready record (the twin runs as [friction, step] pairs, in order)."""
        d = asdict(self)
        d['twin_steps'] = [[float(k), int(v)] for k, v in sorted(self.twin_steps.items())]
        return d


def fit_finger_friction(task, twin_world, cell: SlipRun,
                        cfg: SlipConfig = SlipConfig()) -> FrictionFit:
    """Bisect ``twin_world``'s (a TwinWorld) ``global/finger_friction`` for the values whose
    probe, from the start the cell's probe was planned from, lets the box out at ``cell``'s
    step. The twin's value is restored afterwards."""
    from ..tasks.base import ResetSample
    xy = np.asarray(cell.start_xy, float)
    reset = ResetSample(xy, float(cell.start_yaw), xy.copy())
    twin = twin_world.twin
    saved = twin.get_parameter(PARAMETER)
    steps: dict[float, int] = {}
    cfg = replace(cfg, grasp_offsets=(0.0,))     # the twin's grasp through its centre

    def step_at(mu: float) -> int:
        if mu not in steps:
            twin.set_parameter(PARAMETER, mu)
            steps[mu] = run_slip_probe(task, twin_world, reset, cfg).step
        return steps[mu]

    def smallest(target: int) -> float | None:
        """The smallest friction in bounds whose box comes out at ``target`` or later
        (the step grows with the friction); None when even the upper bound's comes out
        earlier."""
        lo, hi = (math.log(b) for b in cfg.friction_bounds)
        if step_at(math.exp(hi)) < target:
            return None
        if step_at(math.exp(lo)) >= target:
            return math.exp(lo)
        while hi - lo > math.log1p(cfg.tolerance):
            mid = 0.5 * (lo + hi)
            if step_at(math.exp(mid)) >= target:
                hi = mid
            else:
                lo = mid
        return math.exp(hi)

    try:
        k = cell.step
        low, high = smallest(k), smallest(k + 1)
    finally:
        twin.set_parameter(PARAMETER, saved)
    lo_b, hi_b = cfg.friction_bounds
    if low is None:
        return FrictionFit(hi_b, hi_b, hi_b, False, k, steps,
                           'the twin lets the box out earlier than the cell even at the '
                           'upper bound')
    if high is None:
        note = '' if k < len(cell.efforts) else 'the cell held the box to the last step'
        return FrictionFit(low if note else math.sqrt(low * hi_b), low, hi_b, not note, k,
                           steps, note)
    if k < 0 or low <= lo_b:
        return FrictionFit(high, lo_b, high, False, k, steps,
                           'the box came out at the first step: an upper bound only')
    return FrictionFit(math.sqrt(low * high), low, high, True, k, steps)
