"""What the expert can reach on the identified object, and the goal distribution it trains on.

slide_to_target's goals lie ``distance_range`` (0.10-0.18 m) from the box. A heavy,
high-friction object (friction 1.0 slides a box struck at the arm's top speed, about 1.1 m/s
on the default arm, ~6 cm) cannot get there: the scripted expert then has no demonstration
to give (``NoDemonstrationsError``). Before training, :func:`reachable_goals` strikes the
object in the IDENTIFIED twin at the fastest strike the executor accepts (the task's top
speed, which the strike planner slows to the arm's velocity limits) in the goal headings'
extremes and middle, and

* adapts the expert: its assumed friction becomes the identified one (the identified twins'
  expert; the nominal twin's expert keeps the prior's);
* where the slide falls short of the farthest goal, narrows the goal distribution to what the
  expert reaches (``REACH_FRACTION`` of the shortest measured slide) and says so: the
  distribution every policy of the cell trains and is evaluated on;
* where even that is shorter than ``MIN_GOAL_DISTANCE`` (nothing worth training on), raises
  :class:`GoalsUnreachable` (the cell's reason ``GOALS_UNREACHABLE``);
* where the top-speed strike TIPS the identified object over (a tall object on a small
  footprint; before, a tipped object counted as infinite reach and the goals were attempted),
  bisects the fastest strike that leaves it upright at every goal heading, caps every
  policy's strike speed (``speed_range``) at ``UPRIGHT_SPEED_MARGIN`` x that, and narrows the
  goals to what that capped strike reaches (the rest reported out of reach); where no speed
  of the task's range keeps it upright, ``GOALS_UNREACHABLE`` saying so. Tipping need not be
  monotone in the speed (a cylinder in the identified twin of a Drake cell stayed upright at
  1.75 m/s and tipped at 1.57): where the capped strike tips, the cap is instead the fastest
  of ``UPRIGHT_SCAN_STEPS`` speeds from the slowest up to it below which every one leaves
  the object upright (:func:`upright_from_below`).

A lab can act on each: a lighter / smoother object, or goals nearer, or a faster arm.
"""
from __future__ import annotations

import numpy as np

REACH_FRACTION = 0.85      # of the shortest top-speed slide: the farthest goal kept
MIN_GOAL_DISTANCE = 0.05   # m: a nearer farthest goal leaves nothing to learn (radius 3 cm)
UPRIGHT_BISECTIONS = 6    # speed bisections for the fastest strike that leaves it upright
UPRIGHT_SPEED_MARGIN = 0.9   # x that speed: the task's top speed on an object that tips
UPRIGHT_SCAN_STEPS = 8     # speeds scanned up to a capped strike that tips after all


class GoalsUnreachable(RuntimeError):
    """The expert cannot reach any goal worth training on (the cell's GOALS_UNREACHABLE)."""


def _headings(c, headings=None):
    return headings if headings is not None else (c.heading_range[0], float(np.mean(
        c.heading_range)), c.heading_range[1])


def slides_at(task, twin, speed: float, headings=None) -> tuple[list[float], list[bool]]:
    """(distances the object slides in ``twin`` from the task's start when struck at
    ``speed`` (no offset) at ``headings`` (default: the goal headings' ends and middle),
    whether it stayed upright at each)."""
    from ..tasks.base import ResetSample
    c = task.cfg
    xy = np.asarray(c.start_xy, float)
    out, upright = [], []
    for h in _headings(c, headings):
        u = np.array([np.cos(h), np.sin(h)])
        reset = ResetSample(xy, float(h), xy + 0.3 * u)
        state = task.twin_outcomes(twin, reset, np.array([float(speed), 0.0]))[0]
        out.append(max(float(np.dot(np.asarray(state['object_xy']) - xy, u)), 0.0))
        upright.append(bool(task.upright(state)))
    return out, upright


def top_speed_slides(task, twin, headings=None) -> list[float]:
    """Distances (m) the object slides in ``twin`` struck at the task's top speed (see
    :func:`slides_at`); a tipped object's entry is ``inf`` (its reach is limited by tipping,
    which :func:`reachable_goals` then measures, never by the slide)."""
    slides, upright = slides_at(task, twin, task.cfg.speed_range[1], headings)
    return [s if ok else float('inf') for s, ok in zip(slides, upright)]


def upright_speed_limit(task, twin, headings=None, iterations: int = UPRIGHT_BISECTIONS):
    """The fastest strike (m/s, bisected within the task's speed range) that leaves the
    object upright at every heading in ``twin``: None when it tips even at the slowest."""
    lo, hi = (float(v) for v in task.cfg.speed_range)
    if not all(slides_at(task, twin, lo, headings)[1]):
        return None
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if all(slides_at(task, twin, mid, headings)[1]):
            lo = mid
        else:
            hi = mid
    return lo


def upright_from_below(task, twin, lo: float, hi: float, steps: int = UPRIGHT_SCAN_STEPS):
    """Strikes at ``steps`` speeds evenly above ``lo`` up to ``hi`` (m/s), slowest first:
    (the fastest before the first that tips the object at some heading, or None when the
    slowest does; its slides; [[speed, upright at every heading]] of those tried)."""
    best, best_slides, tried = None, None, []
    for k in range(1, steps + 1):
        v = round(lo + (hi - lo) * k / steps, 3)
        slides, upright = slides_at(task, twin, v)
        tried.append([v, all(upright)])
        if not all(upright):
            break
        best, best_slides = v, slides
    return best, best_slides, tried


def reachable_goals(task, twin, identified_friction: float | None = None) -> dict:
    """Task config overrides for the cell's goal distribution and expert, with the record.

    Returns {'overrides': {...} (for every policy), 'expert_overrides': {...} (for the
    identified twins' expert only), 'record': {...}}. Raises GoalsUnreachable. Only tasks
    with ``distance_range`` and a scripted expert (slide_to_target) are adapted; others get
    empty overrides."""
    c = task.cfg
    if not hasattr(c, 'distance_range') or not hasattr(c, 'demo_friction'):
        return {'overrides': {}, 'expert_overrides': {},
                'record': {'adapted': False, 'why': f'{task.name}: no goal distance range'}}
    d0, d1 = (float(v) for v in c.distance_range)
    slides, upright = slides_at(task, twin, c.speed_range[1])
    record = {'top_speed_slides_m': [s if ok else float('inf')
                                     for s, ok in zip(slides, upright)],
              'configured_distance_range': [d0, d1], 'speed_range': list(c.speed_range)}
    overrides = {}
    if not all(upright):
        # Struck at the top speed the identified object tips over: the goals it reaches are
        # those of the fastest strike that leaves it upright (with a margin), and every
        # policy's speeds are capped there; never a goal that needs a tipping strike.
        v_up = upright_speed_limit(task, twin)
        if v_up is None or UPRIGHT_SPEED_MARGIN * v_up <= c.speed_range[0]:
            raise GoalsUnreachable(
                f'GOALS_UNREACHABLE: the object tips over in the identified twin when struck '
                f'at {c.speed_range[0]:.2f} m/s (the task\'s slowest strike)' if v_up is None
                else f'GOALS_UNREACHABLE: the object tips over in the identified twin when '
                f'struck faster than {v_up:.2f} m/s, and {UPRIGHT_SPEED_MARGIN} x that is not '
                f'above the task\'s slowest strike ({c.speed_range[0]:.2f} m/s): a lower or '
                f'wider object, or a smoother one')
        v_cap = round(UPRIGHT_SPEED_MARGIN * v_up, 3)
        slides, upright = slides_at(task, twin, v_cap)
        if not all(upright):      # tipping need not be monotone in the speed
            tipped_at = v_cap
            v_cap, slides, tried = upright_from_below(task, twin, float(c.speed_range[0]),
                                                      tipped_at)
            record['upright_scan'] = tried
            if v_cap is None:
                raise GoalsUnreachable(
                    f'GOALS_UNREACHABLE: the object tips over in the identified twin at '
                    f'{tried[0][0]:.2f} m/s and at {tipped_at:.2f} m/s though not at '
                    f'{v_up:.2f} m/s: no strike speed keeps it upright reliably; a lower or '
                    f'wider object, or a smoother one')
        overrides['speed_range'] = (float(c.speed_range[0]), v_cap)
        why = (f'struck at {tried[-1][0]:.2f} m/s (the first of the speeds scanned from the '
               f'slowest that tips it) and faster than {v_up:.2f} m/s'
               if 'upright_scan' in record else f'struck faster than {v_up:.2f} m/s')
        record.update(upright_speed_limit=v_up, speed_cap=v_cap, slides_at_cap_m=slides,
                      tip_message=f'the object tips over {why} in the identified twin: '
                      f'strikes capped at {v_cap:.2f} m/s')
    reach = min(slides)
    expert = {}
    if identified_friction is not None and np.isfinite(identified_friction):
        expert['demo_friction'] = float(identified_friction)
        record['expert_friction'] = float(identified_friction)
    far = REACH_FRACTION * reach
    if far >= d1:
        record.update(adapted=bool(overrides), distance_range=[d0, d1])
        return {'overrides': overrides, 'expert_overrides': expert, 'record': record}
    if far < MIN_GOAL_DISTANCE:
        why = (f'at {overrides["speed_range"][1]:.2f} m/s (faster tips it over)' if overrides
               else 'at the fastest strike the arm allows')
        raise GoalsUnreachable(
            f'GOALS_UNREACHABLE: struck {why}, the object slides '
            f'at most {100 * reach:.1f} cm in the identified twin (headings '
            f'{c.heading_range[0]:+.2f}..{c.heading_range[1]:+.2f} rad: '
            + ', '.join(f'{100 * s:.1f}' for s in slides) + ' cm); goals '
            f'{100 * d0:.0f}-{100 * d1:.0f} cm away need '
            + ('a lower or wider object (it would not tip at a faster strike), a smoother one '
               if overrides else 'a lighter or smoother object, ')
            + f'or nearer goals (>= {100 * MIN_GOAL_DISTANCE:.0f} cm kept)'
            + ('' if overrides else ' or a faster arm'))
    rng = [round(min(d0, 0.6 * far), 4), round(far, 4)]
    record.update(adapted=True, distance_range=rng,
                  unreachable_share_of_range=(d1 - far) / (d1 - d0) if d1 > d0 else 1.0,
                  message=f'goals {100 * d0:.0f}-{100 * d1:.0f} cm: the expert reaches '
                  f'{100 * reach:.1f} cm at '
                  f'{"its capped" if overrides else "top"} speed; trained and evaluated on goals '
                  f'{100 * rng[0]:.1f}-{100 * rng[1]:.1f} cm away (the rest reported '
                  f'unreachable)')
    return {'overrides': {**overrides, 'distance_range': tuple(rng)},
            'expert_overrides': expert, 'record': record}


__all__ = ['GoalsUnreachable', 'MIN_GOAL_DISTANCE', 'REACH_FRACTION', 'UPRIGHT_SPEED_MARGIN',
           'reachable_goals', 'slides_at', 'top_speed_slides', 'upright_from_below',
           'upright_speed_limit']
