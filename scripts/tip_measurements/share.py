"""Share of wide-prior drawn cells whose task object the strike planner refuses (planning only,
spec geometry and poses = what a perfect reconstruction/tracker gives; prior friction bounds)."""

import collections
import json
import math
import sys

import numpy as np

from real2sim2real_ros.core.cell_spec import load_cell_spec
from real2sim2real_ros.core.evaluation.cells import draw_wide_cell_data
from real2sim2real_ros.core.robot_description import default_cell_urdf, load_robot
from real2sim2real_ros.core.sysid.object_probes import (
    StrikeConfig,
    StrikeObject,
    TableRegion,
    plan_strike_probe,
)
from real2sim2real_ros.core.sysid.probes import ProbeError

GENTLE = len(sys.argv) > 3 and sys.argv[3] == "gentle"
robot = load_robot(default_cell_urdf())
N = int(sys.argv[1])
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
rng = np.random.default_rng(seed)
out = collections.Counter()
rows = []
for i in range(N):
    d = draw_wide_cell_data(rng, i)
    spec = load_cell_spec(d)
    t = spec.table
    table = TableRegion(np.array(t.center[:2]), np.array(t.size[:2]), t.height)
    objs = []
    for o in spec.objects:
        ext = o.extents
        objs.append(
            StrikeObject(
                o.id, o.shape, tuple(ext), np.array(o.xyz[:2]), o.yaw, t.height + ext[2] / 2
            )
        )
    task = [o for o in objs if o.id == "box_0"]
    others = [o for o in objs if o.id != "box_0"]
    try:
        plan = plan_strike_probe(
            robot,
            task,
            table,
            np.asarray(spec.robot.initial_positions),
            {"box_0": (0.2, 0.5, 1.0)},
            StrikeConfig(gentle_strikes=GENTLE),
            obstacles=others,
        )
        res, why = "planned", f"{plan.strikes[0].speed:.2f} m/s"
    except ProbeError as exc:
        why = str(exc)
        res = (
            "OBJECT_WOULD_TIP"
            if "could tip over" in why
            else ("NO_SAFE_STRIKE" if "struck safely" in why else "PROBE_ERROR")
        )
    except Exception as exc:
        res, why = type(exc).__name__, str(exc)[:100]
    o = task[0]
    ext = o.extents
    e_long = max(ext[0], ext[1]) / 2 if o.shape == "box" else ext[0] / 2
    hc = ext[2] / 2
    vE = math.sqrt(2 * 9.81 * (math.hypot(e_long, hc) - hc))
    out[res] += 1
    rows.append(
        dict(
            i=i,
            res=res,
            shape=o.shape,
            ext=[round(x, 3) for x in ext],
            mu=spec.object("box_0").friction[0],
            vE_long=round(vE, 3),
            why=why[:200],
        )
    )
    print(json.dumps(rows[-1]), flush=True)
print("SUMMARY", N, dict(out), flush=True)
