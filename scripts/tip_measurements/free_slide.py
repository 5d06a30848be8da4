"""Free-slide tip measurement: object at rest, given horizontal speed v, does it tip?"""

import copy
import itertools
import json

import mujoco
import numpy as np
import yaml

from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
from real2sim2real_ros.core.emulated_world import EmulatedWorld

base = yaml.safe_load(open(default_cell_spec_path()))


def outcome(shape, size, mu, v, mass=0.2, solref=0.004, com=(0, 0, 0), edge_r=0.0, T=1.5):
    d = copy.deepcopy(base)
    d["objects"] = [
        {
            "id": "o",
            "shape": shape,
            "size": list(size),
            "pose": {"xyz": [0.55, 0.0], "yaw": 0.0},
            "mass": mass,
            "com_offset": list(com),
            "friction": [mu, 0.005, 0.0001],
            "edge_radius": edge_r,
        }
    ]
    d["contact"]["solref"] = [solref, 1.0]
    w = EmulatedWorld(load_cell_spec(d))
    w.step_for(0.3)
    _m, dd = w.model, w.data
    da = w._obj_dadr["o"]
    qa = w._obj_qadr["o"]
    dd.qvel[da] = v
    maxtilt = 0.0
    t0 = dd.time
    while dd.time - t0 < T:
        w.step_for(0.005)
        q = dd.qpos[qa + 3 : qa + 7]
        R = np.zeros(9)
        mujoco.mju_quat2Mat(R, q)
        tilt = np.degrees(np.arccos(np.clip(R[8], -1, 1)))
        maxtilt = max(maxtilt, tilt)
    slide = float(dd.qpos[qa] - 0.55)
    return tilt > 30, maxtilt, slide


if __name__ == "__main__":
    cases = [
        ("box", (0.05, 0.05, 0.09)),
        ("cylinder", (0.05, 0.09)),
        ("box", (0.04, 0.04, 0.10)),
        ("box", (0.06, 0.06, 0.08)),
    ]
    speeds = [0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.8, 1.0, 1.2]
    rows = []
    for (shape, size), mu in itertools.product(cases, [1.0, 0.6, 0.3]):
        h = size[-1]
        e = size[0] / 2
        hc = h / 2
        dh = np.hypot(e, hc) - hc
        vb = np.sqrt(2 * 9.81 * dh)
        res = []
        for v in speeds:
            tipped, mt, sl = outcome(shape, size, mu, v)
            res.append((v, bool(tipped), float(round(mt, 1)), float(round(sl, 4))))
        vt = min([r[0] for r in res if r[1]], default=None)
        row = dict(
            shape=shape,
            size=size,
            mu=mu,
            mu_h_gt_e=bool(mu * hc > e),
            v_energy=float(round(vb, 3)),
            first_tip_speed=vt,
            runs=res,
        )
        print(json.dumps(row), flush=True)
        rows.append(row)
    json.dump(rows, open("free_slide.json", "w"))
