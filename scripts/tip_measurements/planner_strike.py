"""Arm strike at the PLANNER's own choice (default StrikeConfig, prior friction (0.2,0.5,1.0))."""

import copy
import itertools
import sys

import mujoco
import numpy as np

sys.path.insert(0, __import__("os").path.dirname(__file__))
import arm_strike as A

from real2sim2real_ros.core.cell_spec import load_cell_spec
from real2sim2real_ros.core.emulated_world import EmulatedWorld
from real2sim2real_ros.core.joint_trajectory import JointTrajectoryCommand
from real2sim2real_ros.core.sysid.object_probes import (
    StrikeConfig,
    StrikeObject,
    TableRegion,
    plan_strike_probe,
)


def run(
    shape,
    size,
    mu,
    com=(0, 0, 0),
    solref=0.004,
    friction=(0.2, 0.5, 1.0),
    xy=(0.46, 0.0),
    mass=0.2,
):
    d = copy.deepcopy(A.base)
    d["objects"] = [
        {
            "id": "o",
            "shape": shape,
            "size": list(size),
            "pose": {"xyz": list(xy), "yaw": 0.0},
            "mass": mass,
            "com_offset": list(com),
            "friction": [mu, 0.005, 0.0001],
        }
    ]
    d["contact"]["solref"] = [solref, 1.0]
    spec = load_cell_spec(d)
    w = EmulatedWorld(spec)
    t = spec.table
    table = TableRegion(np.array(t.center[:2]), np.array(t.size[:2]), t.height)
    ext = (size[0], size[1], size[2]) if shape == "box" else (size[0], size[0], size[1])
    obj = StrikeObject("o", shape, ext, np.array(xy), 0.0, t.height + ext[2] / 2)
    try:
        plan = plan_strike_probe(
            A.robot,
            [obj],
            table,
            np.asarray(spec.robot.initial_positions),
            {"o": friction},
            StrikeConfig(gentle_strikes=True),
        )
    except Exception as e:
        return {"refused": str(e)[:160]}
    p = plan.probe
    s = plan.strikes[0]
    dd = w.data
    qa = w._obj_qadr["o"]
    w.set_trajectory(
        JointTrajectoryCommand(p.joint_names, p.times, p.positions, p.velocities), now=w.time
    )
    t0 = w.time
    mt = 0
    while w.time - t0 < p.duration + 0.3:
        w.step_for(0.005)
        R = np.zeros(9)
        mujoco.mju_quat2Mat(R, dd.qpos[qa + 3 : qa + 7])
        mt = max(mt, np.degrees(np.arccos(np.clip(R[8], -1, 1))))
    return dict(
        speed=round(s.speed, 3),
        gentle=s.gentle,
        heading=round(np.degrees(s.heading)),
        tipped=bool(mt > 30 and R[8] < 0.9),
        max_tilt=round(float(mt), 1),
        moved=round(float(np.hypot(*(dd.qpos[qa : qa + 2] - xy))), 4),
    )


cases = [
    ("box", (0.05, 0.05, 0.09)),
    ("cylinder", (0.05, 0.09)),
    ("box", (0.04, 0.04, 0.10)),
    ("box", (0.06, 0.06, 0.08)),
    ("cylinder", (0.06, 0.08)),
    ("box", (0.04, 0.04, 0.04)),
    ("box", (0.10, 0.11, 0.09)),
]
coms = [(0, 0, 0), "worst"]
for (shape, size), mu, com in itertools.product(cases, [1.0, 0.6, 0.3], coms):
    if com == "worst":  # the wide prior's extreme: 15% x extent forward, +20% x height up
        com = (0.15 * size[0], 0.0, 0.2 * size[-1])
    r = run(shape, size, mu, com=com)
    print(shape, size, mu, "com", tuple(round(c, 4) for c in com), r, flush=True)
