"""Tip measurement with the arm's real strike (plan_strike_probe at a forced speed)."""

import copy
import itertools
import json
import sys

import mujoco
import numpy as np
import yaml

from real2sim2real_ros.core.cell_spec import default_cell_spec_path, load_cell_spec
from real2sim2real_ros.core.emulated_world import EmulatedWorld
from real2sim2real_ros.core.joint_trajectory import JointTrajectoryCommand
from real2sim2real_ros.core.robot_description import default_cell_urdf, load_robot
from real2sim2real_ros.core.sysid.object_probes import (
    StrikeConfig,
    StrikeObject,
    TableRegion,
    plan_strike_probe,
)

base = yaml.safe_load(open(default_cell_spec_path()))
robot = load_robot(default_cell_urdf())


def outcome(shape, size, mu, v, mass=0.2, solref=0.004, com=(0, 0, 0), edge_r=0.0, xy=(0.46, 0.0)):
    d = copy.deepcopy(base)
    d["objects"] = [
        {
            "id": "o",
            "shape": shape,
            "size": list(size),
            "pose": {"xyz": list(xy), "yaw": 0.0},
            "mass": mass,
            "com_offset": list(com),
            "friction": [mu, 0.005, 0.0001],
            "edge_radius": edge_r,
        }
    ]
    d["contact"]["solref"] = [solref, 1.0]
    spec = load_cell_spec(d)
    w = EmulatedWorld(spec)
    t = spec.table
    table = TableRegion(np.array(t.center[:2]), np.array(t.size[:2]), t.height)
    ext = (size[0], size[1], size[2]) if shape == "box" else (size[0], size[0], size[1])
    obj = StrikeObject("o", shape, ext, np.array(xy), 0.0, t.height + ext[2] / 2)
    cfg = StrikeConfig(
        tool_radius=float(__import__("os").environ.get("TOOL_R", 0.02)),
        lift=float(__import__("os").environ.get("LIFT", 0.015)),
        accel=float(__import__("os").environ.get("ACCEL", 8.0)),
        tip_margin=1e3,
        speed_min=v * 0.999,
        speed_max=v,
        target_slide=5.0,
        directions=1,
        **(
            {"tip_energy_margin": 1e3}
            if "tip_energy_margin" in StrikeConfig.__dataclass_fields__
            else {}
        ),
    )
    plan = plan_strike_probe(
        robot, [obj], table, np.asarray(spec.robot.initial_positions), {"o": (mu, mu, mu)}, cfg
    )
    s = plan.strikes[0]
    p = plan.probe
    _m, dd = w.model, w.data
    qa, da = w._obj_qadr["o"], w._obj_dadr["o"]
    w.set_trajectory(
        JointTrajectoryCommand(p.joint_names, p.times, p.positions, p.velocities), now=w.time
    )
    t0 = w.time
    maxtilt, vmax, _v_rel = 0.0, 0.0, None
    while w.time - t0 < p.duration:
        w.step_for(0.002)
        tt = w.time - t0
        R = np.zeros(9)
        mujoco.mju_quat2Mat(R, dd.qpos[qa + 3 : qa + 7])
        maxtilt = max(maxtilt, np.degrees(np.arccos(np.clip(R[8], -1, 1))))
        sp = float(np.hypot(*dd.qvel[da : da + 2]))
        if s.t_release <= tt <= s.t_release + 0.03:
            vmax = max(vmax, sp)
    R = np.zeros(9)
    mujoco.mju_quat2Mat(R, dd.qpos[qa + 3 : qa + 7])
    tilt = np.degrees(np.arccos(np.clip(R[8], -1, 1)))
    slide = float(dd.qpos[qa] - xy[0])
    return dict(
        planned=round(s.speed, 3),
        v_after_release=round(vmax, 3),
        tipped=bool(tilt > 30),
        max_tilt=round(float(maxtilt), 1),
        moved=round(slide, 4),
    )


if __name__ == "__main__":
    cases = [
        ("box", (0.05, 0.05, 0.09)),
        ("cylinder", (0.05, 0.09)),
        ("box", (0.04, 0.04, 0.10)),
        ("box", (0.06, 0.06, 0.08)),
    ]
    speeds = (
        [float(x) for x in sys.argv[1].split(",")]
        if len(sys.argv) > 1
        else [0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.8, 1.0]
    )
    extra = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    mus = extra.pop("mus", [1.0, 0.3])
    for (shape, size), mu in itertools.product(cases, mus):
        h = size[-1]
        e = size[0] / 2
        hc = h / 2
        vb = float(np.sqrt(2 * 9.81 * (np.hypot(e, hc) - hc)))
        res = []
        for v in speeds:
            try:
                r = outcome(shape, size, mu, v, **extra)
            except Exception as exc:
                r = {"error": str(exc)[:80]}
            res.append((v, r))
        vt = min([v for v, r in res if r.get("tipped")], default=None)
        print(
            json.dumps(
                dict(
                    shape=shape,
                    size=size,
                    mu=mu,
                    extra=extra,
                    mu_h_gt_e=bool(mu * hc > e),
                    v_energy=round(vb, 3),
                    first_tip=vt,
                    runs=res,
                )
            ),
            flush=True,
        )
