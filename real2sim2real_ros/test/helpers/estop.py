"""What an e-stop test reads from the cell's streams, on one system clock and on the cell's
own clock (shared by test_cell_integration.py's topic backend and test_fjt_integration.py's
follow_joint_trajectory backend).

Input: the (DDS source timestamp, msg) pairs of ``/joint_states`` and of the controller's
``controller_state``, the wall time of the stop call and ``t_hold``, when the hold reached
the controller (wall-clock s). The figures:

* end to end (source timestamps): hold -> the controller's reference at rest (every joint's
  reference speed < 1e-4 rad/s), -> the measured speeds about zero (the mean of three
  consecutive samples, 30 ms at 100 Hz, below 0.05 rad/s on every joint: the velocities carry
  ~0.02 rad/s of sensor noise);
* on the cell's clock (header stamps, the cell's world time, which under CPU load runs late of
  the wall clock but never skips a control period): the last state still on the goal (the
  pan joint's reference faster than 0.2 rad/s forward) -> reference at rest, and reference at
  rest -> measured speeds about zero.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from real2sim2real_ros.nodes.cell_messages import seconds


@dataclass
class StopFigures:
    ref_still: float      # source time of the first reference at rest after the hold
    still: float          # source time of the first measured speeds about zero after it
    ref_span: float       # cell's clock: last state on the goal -> reference at rest
    arm_span: float       # cell's clock: reference at rest -> measured speeds about zero
    times: np.ndarray     # source times of the joint states
    smooth: np.ndarray    # their 3-sample mean speed, the largest joint's


def stop_figures(joint_states, references, t_call: float, t_hold: float) -> StopFigures:
    """The figures above; AssertionError naming what is missing when the streams do not show
    a moving arm at the call, a reference at rest after the hold or speeds about zero."""
    times = np.array([t for t, _ in joint_states])
    vel = np.array([m.velocity for _, m in joint_states])
    smooth = np.array([np.abs(vel[max(0, i - 2):i + 1].mean(axis=0)).max()
                       for i in range(len(vel))])
    assert smooth[times < t_call][-10:].max() > 0.2, 'it was moving when stopped'
    after = np.nonzero((times >= t_hold) & (smooth < 0.05))[0]
    assert after.size, 'speeds never came to about zero'
    refs = [(t, seconds(m.header.stamp), max(abs(v) for v in m.reference.velocities),
             m.reference.velocities[0]) for t, m in references if m.reference.velocities]
    rest = next((i for i, (t, _, v, _) in enumerate(refs) if t >= t_hold and v < 1e-4), None)
    assert rest is not None, f'reference never at rest after the hold: {refs[-10:]}'
    on_goal = [s for _, s, _, v0 in refs[:rest] if v0 > 0.2]
    assert on_goal, 'the reference was on the goal before the hold'
    stamps = np.array([seconds(m.header.stamp) for _, m in joint_states])
    return StopFigures(ref_still=refs[rest][0], still=float(times[after[0]]),
                       ref_span=refs[rest][1] - on_goal[-1],
                       arm_span=float(stamps[after[0]] - refs[rest][1]),
                       times=times, smooth=smooth)
