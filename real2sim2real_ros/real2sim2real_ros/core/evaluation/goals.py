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
  :class:`GoalsUnreachable` (the cell's reason ``GOALS_UNREACHABLE``).

A lab can act on each: a lighter / smoother object, or goals nearer, or a faster arm.
"""
from __future__ import annotations

import numpy as np

REACH_FRACTION = 0.85      # of the shortest top-speed slide: the farthest goal kept
MIN_GOAL_DISTANCE = 0.05   # m: a nearer farthest goal leaves nothing to learn (radius 3 cm)


class GoalsUnreachable(RuntimeError):
    """The expert cannot reach any goal worth training on (the cell's GOALS_UNREACHABLE)."""


def top_speed_slides(task, twin, headings=None) -> list[float]:
    """Distances (m) the object slides in ``twin`` from the task's start when struck at the
    task's top speed (no offset) at ``headings`` (default: the goal headings' ends and
    middle). A lost or tipped object (struck too hard for it: slower strikes reach further
    than the goals) counts as infinite reach."""
    from ..tasks.base import ResetSample
    c = task.cfg
    hs = headings if headings is not None else (c.heading_range[0], float(np.mean(
        c.heading_range)), c.heading_range[1])
    xy = np.asarray(c.start_xy, float)
    out = []
    for h in hs:
        u = np.array([np.cos(h), np.sin(h)])
        reset = ResetSample(xy, float(h), xy + 0.3 * u)
        state = task.twin_outcomes(twin, reset, np.array([c.speed_range[1], 0.0]))[0]
        moved = float(np.dot(np.asarray(state['object_xy']) - xy, u))
        ok = task.upright(state)
        out.append(max(moved, 0.0) if ok else float('inf'))
    return out


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
    slides = top_speed_slides(task, twin)
    reach = min(slides)
    d0, d1 = (float(v) for v in c.distance_range)
    record = {'top_speed_slides_m': slides, 'configured_distance_range': [d0, d1],
              'speed_range': list(c.speed_range)}
    expert = {}
    if identified_friction is not None and np.isfinite(identified_friction):
        expert['demo_friction'] = float(identified_friction)
        record['expert_friction'] = float(identified_friction)
    far = REACH_FRACTION * reach
    if far >= d1:
        record.update(adapted=False, distance_range=[d0, d1])
        return {'overrides': {}, 'expert_overrides': expert, 'record': record}
    if far < MIN_GOAL_DISTANCE:
        raise GoalsUnreachable(
            f'GOALS_UNREACHABLE: struck at the fastest strike the arm allows, the object slides '
            f'at most {100 * reach:.1f} cm in the identified twin (headings '
            f'{c.heading_range[0]:+.2f}..{c.heading_range[1]:+.2f} rad: '
            + ', '.join(f'{100 * s:.1f}' for s in slides) + ' cm); goals '
            f'{100 * d0:.0f}-{100 * d1:.0f} cm away need a lighter or smoother object, nearer '
            f'goals (>= {100 * MIN_GOAL_DISTANCE:.0f} cm kept) or a faster arm')
    rng = [round(min(d0, 0.6 * far), 4), round(far, 4)]
    record.update(adapted=True, distance_range=rng,
                  unreachable_share_of_range=(d1 - far) / (d1 - d0) if d1 > d0 else 1.0,
                  message=f'goals {100 * d0:.0f}-{100 * d1:.0f} cm: the expert reaches '
                  f'{100 * reach:.1f} cm at top speed; trained and evaluated on goals '
                  f'{100 * rng[0]:.1f}-{100 * rng[1]:.1f} cm away (the rest reported '
                  f'unreachable)')
    return {'overrides': {'distance_range': tuple(rng)}, 'expert_overrides': expert,
            'record': record}


__all__ = ['GoalsUnreachable', 'MIN_GOAL_DISTANCE', 'REACH_FRACTION', 'reachable_goals',
           'top_speed_slides']
