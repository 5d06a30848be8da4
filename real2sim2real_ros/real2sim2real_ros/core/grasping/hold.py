"""The hold test: does a grasped object stay in the jaw while the arm carries it?

Contract (issue "Grasp and place", build item 3). A box (default 0.2 kg, 5 cm) stands on the
table in front of the robot. The arm, tool pointing down, opens the jaw above it, descends,
closes the jaw with a maximum effort, lifts the box ``lift`` (0.2 m), turns its base joint
by ``turn`` (90 deg) at ``turn_rate`` (1 rad/s) and holds still. The slip is how far the box
moved in the grasp frame (the robot's ``tip_link``) between the end of the closing and each
later mark: after the lift, after the turn, after the final hold. A twin whose slip stays at
or below 2 mm holds what it grasps; a larger one predicts nothing about carrying.

:func:`plan_hold` turns the config into one plan (arm joint samples from the tool-down IK on
the robot description alone, jaw commands, marks). :func:`hold_in_twin` runs it in a
core.twin.Twin built on a scene MJCF of table + box with the twin's grasp contact settings;
the cells run the same plan through their own controller and gripper interfaces
(:func:`hold_in_cell`). Only the slip figures are read back; a cell's truth is read under
``truth.scoring()`` by the caller's door.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import mujoco
import numpy as np

from ..geometry import yaw_quat
from ..tasks.kinematics import ToolDownIK
from .jaw import MujocoJaw, gripper_joints, twin_grasp_contacts

MARKS = ('grasped', 'lifted', 'turned', 'end')


@dataclass(frozen=True)
class HoldConfig:
    """The hold test's scene and motion (SI units)."""

    box_size: float = 0.05          # m, cube edge
    box_mass: float = 0.2           # kg
    box_friction: float = 0.8       # the box's sliding friction (it rules its contacts)
    box_xy: tuple[float, float] = (0.45, 0.0)
    effort: float = 30.0            # N, the jaw's maximum effort while closing
    approach: float = 0.10          # m above the grasp height, jaw open
    grasp_clearance: float = 0.01   # m between the pads' lower ends and the table
    lift: float = 0.20              # m
    turn: float = math.pi / 2       # rad, base joint
    turn_rate: float = 1.0          # rad/s, cruise speed of the turn
    turn_accel: float = 5.0         # rad/s^2, its ramps
    settle: float = 0.3             # s after each motion
    close_time: float = 0.6         # s given to the jaw to close
    final_hold: float = 1.0         # s held still after the turn
    sample_period: float = 0.01     # s between the arm trajectory's samples


@dataclass
class HoldPlan:
    """Arm samples (times s, q, qd), jaw commands [(t, position m, effort N)] and marks."""

    times: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    jaw: list[tuple[float, float, float]]
    marks: dict[str, float]
    box_pose: tuple[np.ndarray, float]      # (centre xyz, yaw) where the box stands

    @property
    def duration(self) -> float:
        """Length of the plan (s)."""
        return float(self.times[-1])

    def reference(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Arm (q, qd) at time t (linear between samples, held after the last)."""
        k = int(np.clip(np.searchsorted(self.times, t) - 1, 0, len(self.times) - 2))
        t0, t1 = self.times[k], self.times[k + 1]
        a = float(np.clip((t - t0) / (t1 - t0), 0.0, 1.0))
        return (1 - a) * self.q[k] + a * self.q[k + 1], (1 - a) * self.qd[k] + a * self.qd[k + 1]

    def jaw_command(self, t: float) -> tuple[float, float] | None:
        """The latest jaw command at or before t (position, effort), or None."""
        due = [(p, e) for tc, p, e in self.jaw if tc <= t + 1e-9]
        return due[-1] if due else None


@dataclass
class HoldResult:
    """Slip of the box in the grasp frame from 'grasped' to each later mark (mm), the jaw's
    state when it closed, and what ran it."""

    world: str                      # mujoco_twin, mujoco_cell, drake_cell
    slip_mm: dict[str, float]
    jaw_position: float             # m, driven finger at 'grasped'
    jaw_effort: float               # N, the servo's effort at 'grasped'
    box_lifted: float               # m, box centre rise from the table at 'turned'
    settings: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready dict of every field."""
        return asdict(self)


def _min_jerk(s):
    return 10 * s**3 - 15 * s**4 + 6 * s**5


def _min_jerk_rate(s):
    return 30 * s**2 - 60 * s**3 + 30 * s**4


def _line(ik, a, b, duration, dt, q_seed):
    n = max(2, int(round(duration / dt)) + 1)
    s = np.linspace(0.0, 1.0, n)
    pts = a + np.outer(_min_jerk(s), b - a)
    qs = ik.solve_path(pts, q_seed)
    qd = np.gradient(qs, s * duration, axis=0)
    qd[0] = qd[-1] = 0.0
    return s * duration, qs, qd


def _turn_profile(angle, rate, accel, dt):
    """Trapezoidal (triangular if short) base-joint profile: times, angle, rate."""
    t_acc = rate / accel
    if accel * t_acc**2 > abs(angle):
        t_acc = math.sqrt(abs(angle) / accel)
        rate = accel * t_acc
    t_cruise = (abs(angle) - accel * t_acc**2) / rate
    total = 2 * t_acc + t_cruise
    t = np.linspace(0.0, total, max(2, int(math.ceil(total / dt)) + 1))
    v = np.minimum.reduce([accel * t, np.full_like(t, rate), accel * (total - t)])
    v = np.clip(v, 0.0, None)
    x = np.concatenate([[0.0], np.cumsum(0.5 * (v[1:] + v[:-1]) * np.diff(t))])
    x *= abs(angle) / x[-1]
    sign = 1.0 if angle >= 0 else -1.0
    return t, sign * x, sign * v


def _still(q, duration):
    """A segment holding q for ``duration`` (s)."""
    return np.array([0.0, duration]), np.vstack([q, q]), np.zeros((2, len(q)))


def plan_hold(robot, cfg: HoldConfig = HoldConfig()) -> HoldPlan:
    """The hold test's plan for ``robot`` (a RobotDescription with a gripper)."""
    jaw = gripper_joints(robot)
    if jaw is None:
        raise ValueError(f'{robot.name} has no parallel-jaw gripper to hold with')
    ik = ToolDownIK(robot)
    dt = cfg.sample_period
    # The pads span +-half their length about the tip; keep their lower ends clear.
    pad_half = pad_half_length(robot)
    grasp = np.array([*cfg.box_xy, max(cfg.box_size / 2, pad_half + cfg.grasp_clearance)])
    above = grasp + [0.0, 0.0, cfg.approach]
    lifted = grasp + [0.0, 0.0, cfg.lift]
    q_above = ik.solve(above)
    segments = [_still(q_above, cfg.settle)]
    t_desc, q_desc, qd_desc = _line(ik, above, grasp, 1.0, dt, q_above)
    segments.append((t_desc, q_desc, qd_desc))
    q_grasp = q_desc[-1]
    segments.append(_still(q_grasp, cfg.close_time + cfg.settle))
    t_lift, q_lift, qd_lift = _line(ik, grasp, lifted, 1.5, dt, q_grasp)
    segments.append((t_lift, q_lift, qd_lift))
    q_top = q_lift[-1]
    segments.append(_still(q_top, cfg.settle))
    t_turn, x_turn, v_turn = _turn_profile(cfg.turn, cfg.turn_rate, cfg.turn_accel, dt)
    base = 0   # the first arm joint: the base's vertical axis on every supported arm
    q_turn = np.repeat(q_top[None], len(t_turn), axis=0)
    q_turn[:, base] += x_turn
    qd_turn = np.zeros_like(q_turn)
    qd_turn[:, base] = v_turn
    segments.append((t_turn, q_turn, qd_turn))
    q_end = q_turn[-1]
    segments.append(_still(q_end, cfg.settle + cfg.final_hold))
    times, qs, qds, ends, t0 = [], [], [], [], 0.0
    for k, (t, q, qd) in enumerate(segments):
        skip = 1 if k else 0          # each segment starts where the last one ended
        times.append(t[skip:] + t0)
        qs.append(q[skip:])
        qds.append(qd[skip:])
        t0 += float(t[-1])
        ends.append(t0)
    t_closed = ends[1]
    marks = {'grasped': ends[2], 'lifted': ends[4], 'turned': ends[5] + cfg.settle,
             'end': ends[6]}
    jaw_cmds = [(0.0, jaw.upper, cfg.effort), (t_closed, jaw.lower, cfg.effort)]
    box_centre = np.array([*cfg.box_xy, cfg.box_size / 2])
    return HoldPlan(np.concatenate(times), np.vstack(qs), np.vstack(qds), jaw_cmds, marks,
                    (box_centre, jaw_axis_yaw(robot, ik, q_grasp)))


def _finger_boxes(robot):
    """(centre, half extents) of each collision geom on the fingers, in the tip's frame (z
    along the tool axis), with the jaw as the description holds it."""
    model = robot.compile()
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    tip = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, robot.tip_link)
    jaw = gripper_joints(robot)
    fingers = {model.jnt_bodyid[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n)]
               for n in (jaw.joint, *jaw.followers)}
    rot = data.xmat[tip].reshape(3, 3)
    return [(rot.T @ (data.geom_xpos[g] - data.xpos[tip]),
             np.abs(rot.T @ data.geom_xmat[g].reshape(3, 3)) @ model.geom_size[g])
            for g in range(model.ngeom)
            if model.geom_bodyid[g] in fingers and model.geom_contype[g]]


def pad_half_length(robot) -> float:
    """Half the vertical span of the fingers' collision geometry about the tip (m)."""
    return max((abs(c[2]) + float(h[2]) for c, h in _finger_boxes(robot)), default=0.0)


def finger_reach(robot) -> tuple[float, float]:
    """(depth, radius) of the closed fingers' collision geometry about the tip (m): how far
    it reaches past the tip along the tool axis (towards the table when the tool points
    down) and, in the plane across that axis, from the axis (each geom's centre offset plus
    its half extents, corner to corner). The fingers as a pusher (core/sysid strikes)."""
    boxes = _finger_boxes(robot)
    depth = max((float(c[2] + h[2]) for c, h in boxes), default=0.0)
    radius = max((float(np.hypot(abs(c[0]) + h[0], abs(c[1]) + h[1])) for c, h in boxes),
                 default=0.0)
    return depth, radius


def jaw_axis_yaw(robot, ik: ToolDownIK, q) -> float:
    """Yaw (rad) of the driven finger's travel axis in the world at joints ``q``, projected
    on the table: a box with its x axis along it faces the jaw."""
    ik.fk(q)
    jid = mujoco.mj_name2id(ik.model, mujoco.mjtObj.mjOBJ_JOINT, gripper_joints(robot).joint)
    axis = ik.data.xaxis[jid]
    return float(math.atan2(axis[1], axis[0]))


# ----------------------------------------------------------------------------- the twin

def hold_scene_xml(cfg: HoldConfig, box_pose) -> str:
    """MJCF of the test's table and box, as the reconstruction writes a scene (object contact
    priority 1, solref 0.008 s: core/reconstruction/scene_mjcf.py)."""
    from ..reconstruction.scene_mjcf import OBJECT_CONTACT, solid_inertia
    centre, yaw = box_pose
    h = cfg.box_size / 2
    inertia = solid_inertia('box', [cfg.box_size] * 3, cfg.box_mass)
    quat = ' '.join(f'{v:.9g}' for v in yaw_quat(yaw))
    return f"""<mujoco model="hold_test">
  <worldbody>
    <geom name="table" type="box" size="0.6 0.8 0.02" pos="0.3 0 -0.02"
          friction="0.6 0.005 0.0001"/>
    <body name="object/box_0" pos="{centre[0]} {centre[1]} {centre[2]}" quat="{quat}">
      <freejoint name="object/box_0"/>
      <inertial pos="0 0 0" mass="{cfg.box_mass}"
                diaginertia="{inertia[0]} {inertia[1]} {inertia[2]}"/>
      <geom name="object/box_0" type="box" size="{h} {h} {h}" condim="4" {OBJECT_CONTACT}
            friction="{cfg.box_friction} 0.005 0.0001"/>
    </body>
  </worldbody>
</mujoco>"""


def _relative(model, data, tip: int, obj: int) -> np.ndarray:
    rot = data.xmat[tip].reshape(3, 3)
    return rot.T @ (data.xpos[obj] - data.xpos[tip])


def follow_plan(plan: HoldPlan, period: float, now, command_jaw, measure, advance) -> dict:
    """Walk ``plan`` in steps of ``period`` (s) on any engine: ``now()`` its time, the jaw
    commands as they fall due (``command_jaw(position, effort)``), ``measure()`` -> (box
    position in the grasp frame, box height, jaw state) at the start and at each mark,
    ``advance(t)`` one period on from time t. Returns the marks' figures for summarise."""
    rel, rise, states = {}, {}, {}
    pending = sorted(plan.marks.items(), key=lambda kv: kv[1])
    last_cmd = None
    z0 = measure()[1]
    n = int(math.ceil(plan.duration / period))
    for k in range(n + 1):
        t = now()
        cmd = plan.jaw_command(t)
        if cmd is not None and cmd != last_cmd:
            command_jaw(*cmd)
            last_cmd = cmd
        while pending and t >= pending[0][1] - 1e-9:
            name = pending.pop(0)[0]
            rel[name], z, states[name] = measure()
            rise[name] = z - z0
        if k < n:
            advance(t)
    return {'rel': rel, 'rise': rise, 'jaw': states}


def run_hold(model, data, step, jaw: MujocoJaw, plan: HoldPlan, tip_body: str,
             object_body: str) -> dict:
    """Step a MuJoCo model through ``plan``: ``step(q_ref, v_ref)`` advances one physics step
    of the model's time step (a twin's, with its latency queue)."""
    tip = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, tip_body)
    obj = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, object_body)
    dt = float(model.opt.timestep)

    def measure():
        mujoco.mj_kinematics(model, data)
        return _relative(model, data, tip, obj), float(data.xpos[obj][2]), jaw.state(data)

    def advance(t):
        jaw.step(data, dt)
        step(*plan.reference(t))
    return follow_plan(plan, dt, lambda: float(data.time), jaw.command, measure, advance)


def summarise(world: str, run: dict, settings: dict) -> HoldResult:
    """HoldResult from a run's marks (slip from 'grasped', in mm)."""
    rel = run['rel']
    slip = {m: 1000.0 * float(np.linalg.norm(rel[m] - rel['grasped'])) for m in MARKS[1:]}
    pos, _, effort = run['jaw']['grasped']
    return HoldResult(world, slip, pos, effort, run['rise']['turned'], settings)


def hold_in_twin(robot, cfg: HoldConfig = HoldConfig(), recipe: bool = True,
                 timestep: float = 0.001) -> HoldResult:
    """The hold test in a MuJoCo twin of ``robot`` (core.twin.Twin: elliptic cones) with the
    twin's grasp contact recipe (``jaw.twin_grasp_contacts``), or without it (``recipe``
    False: the object's own contact settings rule the finger contacts, impratio 1)."""
    from ..twin import Twin
    plan = plan_hold(robot, cfg)
    twin = Twin(robot, hold_scene_xml(cfg, plan.box_pose), timestep=timestep)
    if recipe:
        twin_grasp_contacts(twin.model, robot)
    jaw = MujocoJaw(twin.model, robot)
    twin.reset(plan.q[0])
    jaw.reset(jaw.joints.upper, twin.data)
    mujoco.mj_forward(twin.model, twin.data)
    run = run_hold(twin.model, twin.data, twin.step, jaw, plan, robot.tip_link, 'object/box_0')
    opt = twin.model.opt
    return summarise('mujoco_twin' if recipe else 'mujoco_twin_no_recipe', run, {
        'recipe': recipe, 'cone': 'elliptic', 'impratio': float(opt.impratio),
        'noslip_iterations': int(opt.noslip_iterations), 'timestep': timestep})


# ----------------------------------------------------------------------------- the cells

def hold_cell_spec(base: dict, robot_urdf: str, cfg: HoldConfig, plan: HoldPlan,
                   engine: str) -> dict:
    """A cell-spec dict for the hold test: ``base`` (a cell spec as loaded from YAML, its
    servo, contact and camera values) with the gripper robot at the plan's start, the test's
    box as its only object and the given engine."""
    spec = {k: v for k, v in base.items() if k != 'source_path'}
    spec['name'] = f"hold_{base.get('name', 'cell')}_{engine}"
    spec['engine'] = engine
    spec['robot'] = dict(base['robot'], urdf=robot_urdf,
                         initial_positions=[float(v) for v in plan.q[0]])
    centre, yaw = plan.box_pose
    spec['objects'] = [{
        'id': 'box_0', 'shape': 'box', 'size': [cfg.box_size] * 3,
        'pose': {'xyz': [float(centre[0]), float(centre[1])], 'yaw': float(yaw)},
        'mass': cfg.box_mass, 'com_offset': [0.0, 0.0, 0.0],
        'friction': [cfg.box_friction, 0.005, 0.0001], 'edge_radius': 0.0,
        'rgba': [0.85, 0.35, 0.15, 1.0]}]
    return spec


def hold_in_cell(robot, world, cfg: HoldConfig = HoldConfig(), control_period: float = 0.01
                 ) -> HoldResult:
    """The hold test on an emulated cell ``world`` (core.world.CellWorld) built from
    :func:`hold_cell_spec`: the plan goes through the cell's joint trajectory controller and
    its gripper interface, ``control_period`` (s) apart; the box's pose and the arm's joint
    positions are read through the cell's truth door (scoring) at the marks only."""
    from ..joint_trajectory import JointTrajectoryCommand
    plan = plan_hold(robot, cfg)
    world.set_trajectory(JointTrajectoryCommand(list(robot.joint_names), plan.times, plan.q,
                                                plan.qd))

    def measure():
        with world.truth.scoring():
            xyz, _ = world.object_poses()['box_0']
            q = world.true_joint_positions()
        tip, quat = robot.fk(q)
        rot = np.zeros(9)
        mujoco.mju_quat2Mat(rot, quat)
        return rot.reshape(3, 3).T @ (xyz - tip), float(xyz[2]), world.gripper_state()
    run = follow_plan(plan, control_period, lambda: world.time, world.command_gripper,
                      measure, lambda _t: world.step_for(control_period))
    return summarise('', run, {})


def hold_on_cells(robot, robot_urdf: str, base: dict, cfg: HoldConfig = HoldConfig(),
                  engines=('mujoco', 'drake')) -> list[HoldResult]:
    """:func:`hold_in_cell` on a cell of each engine made from ``base``."""
    from ..cell_spec import load_cell_spec
    from ..world import make_world
    plan = plan_hold(robot, cfg)
    out = []
    for engine in engines:
        spec = load_cell_spec(hold_cell_spec(base, robot_urdf, cfg, plan, engine))
        world = make_world(spec)
        try:
            res = hold_in_cell(robot, world, cfg)
        finally:
            world.close()
        res.world = f'{engine}_cell'
        c = spec.contact
        res.settings = ({'timestep': c.timestep, 'cone': c.cone, 'impratio': c.impratio,
                         'solref': list(c.solref)} if engine == 'mujoco' else
                        {'timestep': c.timestep, 'contact_model': spec.drake.contact_model,
                         'static_friction_ratio': spec.drake.static_friction_ratio})
        out.append(res)
    return out
